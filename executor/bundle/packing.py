"""What a bundle holds of a machine's caches: each family's files (its module's ``collect``), every
one with its sha256 and size, and the directory each family was packed from (what an install
relocates from: executor/caches/relocate.py)."""

from __future__ import annotations

import os

from ..caches.registry import of
from . import archive
from .archive import FileRecord, Manifest


def pack(roots: dict, head: Manifest) -> tuple[Manifest, dict]:
    """`head` with the members of `roots` (family -> the root to pack; a missing root packs
    nothing), and per member name its file on disk."""
    kernels, sources, packed = [], {}, {}
    for name, root in roots.items():
        if not root:
            continue
        found, found_kernels = of(name).collect(root, head.fingerprint)  # a root that is not there: nothing
        sources.update(found)
        kernels += found_kernels
        if found:
            packed[name] = os.path.abspath(root)
    files = [FileRecord(name, archive.sha256_file(path), os.path.getsize(path)) for name, path in sorted(sources.items())]
    return head._replace(files=files, deep_gemm=kernels, roots=packed), sources
