"""Triton's file cache entries, moved between cache directories so that they still hit.

An entry is ``<cache dir>/<key hash>/``: the kernel's files, and a group file
``__grp__<name>.json`` that lists them by **absolute path** (triton/runtime/cache.py
``FileCacheManager.put_group``). Triton's lookup (``get_group``) keeps only the listed paths that
exist, so an entry copied as it is into another directory points back at the old one: once that is
gone (a bundle installed on another machine, a worker's private directory cleaned up), every
kernel compiles again. Copies made here point the group file at the copied files. The key hash
does not depend on the directory (TRITON_CACHE_DIR is not among Triton's cache-invalidating
variables), so the same name is a hit wherever the files land.
"""

from __future__ import annotations

import json
import os
import uuid

GROUP_PREFIX = "__grp__"


def current_dir() -> str:
    """The directory this process's Triton reads and writes now (it follows TRITON_CACHE_DIR)."""
    from triton import knobs

    return knobs.cache.dir


def groups(entry: str) -> list[str]:
    """The group files of a cache entry (an entry without one is incomplete or absent)."""
    try:
        return [f for f in os.listdir(entry) if f.startswith(GROUP_PREFIX)]
    except OSError:
        return []


def install_entries(source: str | None, target: str | None = None) -> int:
    """Copy every complete entry of `source` that `target` (default: Triton's directory now)
    lacks; returns how many. Files land whole (written beside, then renamed), group files last."""
    target = target or current_dir()
    if not source or not os.path.isdir(source) or os.path.realpath(source) == os.path.realpath(target):
        return 0
    copied = 0
    for name in sorted(os.listdir(source)):
        entry = os.path.join(source, name)
        if groups(entry) and not groups(os.path.join(target, name)):
            copy_entry(entry, os.path.join(target, name))
            copied += 1
    return copied


def copy_entry(source: str, dest: str) -> None:
    """One entry into `dest`, its group files pointing at the copies."""
    os.makedirs(dest, exist_ok=True)
    for name in sorted(os.listdir(source), key=lambda f: f.startswith(GROUP_PREFIX)):  # groups last
        with open(os.path.join(source, name), "rb") as f:
            data = f.read()
        if name.startswith(GROUP_PREFIX):
            data = rehome_group(data, dest)
        write_whole(os.path.join(dest, name), data)


def rehome_entry(entry: str, final: str) -> None:
    """Point the group files of `entry` (a copy being prepared) at `final`, where it will be renamed."""
    for name in groups(entry):
        path = os.path.join(entry, name)
        with open(path, "rb") as f:
            data = f.read()
        write_whole(path, rehome_group(data, final))


def rehome_group(data: bytes, dest: str) -> bytes:
    """A group file's listed paths, moved into `dest` (each keeps its file name)."""
    group = json.loads(data)
    paths = group.get("child_paths") or {}
    group["child_paths"] = {child: os.path.join(dest, os.path.basename(path)) for child, path in paths.items()}
    return json.dumps(group).encode()


def write_whole(path: str, data: bytes) -> None:
    temp = f"{path}.tmp.{os.getpid()}.{uuid.uuid4().hex}"
    with open(temp, "wb") as f:
        f.write(data)
    os.replace(temp, path)
