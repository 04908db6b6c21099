"""What a bundle holds of a machine's caches: each family's files (its module's ``collect``), every
one with its sha256 and size, and the directory each family was packed from (what an install
relocates from: executor/caches/relocate.py).

Listing and hashing are two steps (``listing``, ``hashed``): the vLLM plugin lists the caches the
moment vLLM is ready and hashes and writes them afterwards, beside vLLM's serving; what a file is at
the listing (``Seen``: its inode, size and mtime) is what is packed, and a file that changed since
is refused in one line (``changed``), so nothing written after the listing is packed, whole or half.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from planner.errors import PlanError

from ..caches.registry import of
from . import archive
from .archive import FileRecord, Manifest


class Seen(NamedTuple):
    """A file as the listing saw it."""

    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> "Seen":
        return cls(st.st_ino, st.st_size, st.st_mtime_ns)


class Listing(NamedTuple):
    """The members of a bundle, not yet hashed: `head` with its DeepGEMM kernels and roots, per
    member name its file on disk, and each file as it was when listed."""

    head: Manifest
    sources: dict
    seen: dict


def pack(roots: dict, head: Manifest) -> tuple[Manifest, dict]:
    """`head` with the members of `roots` (family -> the root to pack; a missing root packs
    nothing), and per member name its file on disk."""
    listed = listing(roots, head)
    return hashed(listed), listed.sources


def listing(roots: dict, head: Manifest) -> Listing:
    """The members of `roots`, each file's identity taken now (no file is read but DeepGEMM's
    kernel sources, for their keys)."""
    kernels, sources, packed = [], {}, {}
    for name, root in roots.items():
        if not root:
            continue
        found, found_kernels = of(name).collect(root, head.fingerprint)  # a root that is not there: nothing
        sources.update(found)
        kernels += found_kernels
        if found:
            packed[name] = os.path.abspath(root)
    seen = {member: Seen.of(os.stat(path)) for member, path in sources.items()}
    return Listing(head._replace(deep_gemm=kernels, roots=packed), sources, seen)


def hashed(listed: Listing, cancelled=None) -> Manifest:
    """The listing's manifest: every member with its sha256 and size, each file checked to be the
    one listed (PlanError, one line, where it changed); `cancelled()` true stops it (archive.Cancelled)."""
    files = []
    for member, path in sorted(listed.sources.items()):
        if cancelled is not None and cancelled():
            raise archive.Cancelled()
        digest, st = archive.sha256_file(path, stat=True)
        problem = changed(listed.seen.get(member), st)
        if problem:
            raise PlanError(f"{problem} after the caches were listed; a bundle packs each file as it was then, "
                            "whole", file=path)
        files.append(FileRecord(member, digest, st.st_size))
    return listed.head._replace(files=files)


def changed(seen: Seen | None, st: os.stat_result) -> str | None:
    """How a file differs from what the listing saw (None: it is the same file, unchanged)."""
    if seen is None:
        return None
    now = Seen.of(st)
    if now.ino != seen.ino:
        return "was replaced"
    if now.size != seen.size:
        return f"changed size ({seen.size} -> {now.size} bytes)"
    if now.mtime_ns != seen.mtime_ns:
        return "was written"
    return None
