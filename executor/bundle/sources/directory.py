"""A directory holding one bundle: a Kubernetes image volume mounts an OCI artifact's layer
read-only, under its title; anything else there (the volume's hidden entries, other files) is
ignored."""

from __future__ import annotations

import os

from planner.errors import PlanError

from .. import archive
from .file import FileSource

SCHEME = "directory"


def claims(value: str) -> bool:
    return os.path.isdir(value)


def opened(value: str, *, where: str = "reference") -> "DirectorySource":
    return DirectorySource(value)


class DirectorySource(FileSource):
    """A local source like a file's (nothing to pin or fetch), whose bundle is the one file in it."""

    def path(self, cache_dir: str | None = None) -> str:
        return bundle_in(self.name)


def bundle_in(directory: str) -> str:
    """The one bundle file in `directory` (not a hidden entry, not a sub-directory); PlanError, one
    line, where it holds none or several."""
    found = sorted(os.path.join(directory, name) for name in os.listdir(directory)
                   if not name.startswith(".") and os.path.isfile(os.path.join(directory, name))
                   and _is_bundle(os.path.join(directory, name)))
    if len(found) != 1:
        what = "no warmup bundle" if not found else f"{len(found)} warmup bundles ({', '.join(map(os.path.basename, found))})"
        raise PlanError(f"a bundle directory must hold one warmup bundle; it holds {what}", file=directory)
    return found[0]


def _is_bundle(path: str) -> bool:
    try:
        archive.read_manifest(path)
        return True
    except PlanError:
        return False
