"""Cache trees: what a family packs of its root, and how staged members land in a root.

Placement never shows anything half-written: each entry is copied (or, from the plugin's staging
directory, renamed) next to its destination and renamed into place. An entry already there wins:
DeepGEMM, Triton, Inductor and vLLM publish only complete entries, so one that exists is either
the same compile or one this machine made itself.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple

from . import triton_entries
from .targets import cannot_write

# What `place` put into a cache during the current install (None: no install is recording): an
# install that fails half-way (a full disk) removes it, so that nothing is left without its record.
# A context variable, not an argument, because every family's placement reaches `place` its own
# way; each thread (the plugin's) has its own.
_JOURNAL: ContextVar[list | None] = ContextVar("warmup_placed", default=None)


class Placed(NamedTuple):
    new: int = 0
    kept: int = 0      # already there (an existing complete entry wins)
    rekeyed: int = 0
    paths: tuple = ()  # what this install placed (files, or directories that landed whole)

    def add(self, outcome: bool, dest: str, rekeyed: bool = False) -> "Placed":
        """One more entry: placed at `dest` (outcome True) or already there."""
        return Placed(self.new + outcome, self.kept + (not outcome), self.rekeyed + rekeyed,
                      self.paths + ((dest,) if outcome else ()))

    def merge(self, other: "Placed") -> "Placed":
        return Placed(self.new + other.new, self.kept + other.kept, self.rekeyed + other.rekeyed,
                      self.paths + other.paths)


def collect_tree(base: str, prefix: str, skip: frozenset = frozenset()) -> dict:
    """member name -> file, for every regular file under `base` (links skipped, lock files and the
    top-level directories `skip` too: the precompile claims say which process of the building
    machine compiles what, and would hold up the installing machine's pool until they go stale)."""
    out = {}
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not (folder == base and d in skip))
        for name in sorted(files):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path) and not name.endswith(".lock"):
                out[f"{prefix}/{os.path.relpath(path, base)}"] = path
    return out


def files_under(path: str) -> list[str]:
    """`path` itself when it is a file, else every file under it."""
    if os.path.isfile(path):
        return [path]
    return [os.path.join(folder, n) for folder, _, names in os.walk(path) for n in sorted(names)]


@contextmanager
def journal():
    """Record what `place` puts into place within the block; yields the list of those paths."""
    placed: list = []
    token = _JOURNAL.set(placed)
    try:
        yield placed
    finally:
        _JOURNAL.reset(token)


def undo(paths) -> None:
    """Remove what an install placed (the paths `journal` recorded), newest first."""
    for path in reversed(list(paths)):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            try:
                os.unlink(path)
            except OSError:
                pass


def place(src: str, dest: str, prepare=None, move: bool = False) -> bool:
    """Copy `src` (a file or a directory) next to `dest`, then rename it into place. False when
    `dest` is already there. `prepare(copy, dest)` adjusts the copy before the rename (Triton's
    entries). `move`: `src` is a staging copy of ours, renamed rather than copied where it is on the
    same filesystem (the plugin's install: no byte copied on vLLM's path). A cache that cannot be
    written (a file in the way, read-only, full) is a WriteError naming the path and the cause."""
    if os.path.lexists(dest):
        return False
    staged = _staging_beside(dest)
    try:
        target, is_dir = os.path.join(staged, "x"), os.path.isdir(src)
        if not (move and _renamed(src, target)):
            (shutil.copytree if is_dir else shutil.copy2)(src, target)
        if prepare is not None:
            prepare(target, dest)
        if is_dir:
            os.rename(target, dest)  # a directory: atomic, and refused when another one won meanwhile
        else:
            os.link(target, dest)    # a file: never replaces one that appeared meanwhile
    except FileExistsError:
        return False
    except OSError as e:
        if os.path.lexists(dest):
            return False
        raise cannot_write(e, dest) from None
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    _recorded(dest)
    return True


def _staging_beside(dest: str) -> str:
    """A temporary directory in `dest`'s folder (made if missing), for the rename into place."""
    parent = os.path.dirname(dest)
    try:
        os.makedirs(parent, exist_ok=True)
        return tempfile.mkdtemp(prefix=".warmup-staging-", dir=parent)
    except OSError as e:
        raise cannot_write(e, parent) from None


def _recorded(dest: str) -> None:
    placed = _JOURNAL.get()
    if placed is not None:
        placed.append(dest)


def _renamed(src: str, target: str) -> bool:
    try:
        os.rename(src, target)
        return True
    except OSError:  # another filesystem (EXDEV): copied instead
        return False


def place_children(src_dir: str, dest_dir: str, prepare=None, move: bool = False, skip: frozenset = frozenset()) -> Placed:
    """Each entry of `src_dir` into `dest_dir`, whole (names in `skip` left out)."""
    placed = Placed()
    if not os.path.isdir(src_dir):
        return placed
    for name in sorted(os.listdir(src_dir)):
        if name in skip:
            continue
        src = os.path.join(src_dir, name)
        dest = os.path.join(dest_dir, name)
        placed = placed.add(place(src, dest, prepare if os.path.isdir(src) else None, move), dest)
    return placed


def place_tree(src: str, dest: str, move: bool = False) -> Placed:
    """`src`'s tree into `dest`: a directory `dest` lacks lands whole (one rename, its Triton
    entries pointing at their new place), one it has is merged into, a file there or a Triton
    entry there is kept."""
    placed = Placed()
    if not os.path.isdir(src):
        return placed
    for name in sorted(os.listdir(src)):
        source, target = os.path.join(src, name), os.path.join(dest, name)
        if os.path.isdir(source) and os.path.isdir(target) and not triton_entries.groups(source):
            placed = placed.merge(place_tree(source, target, move))
            continue
        placed = placed.add(place(source, target, rehome_tree if os.path.isdir(source) else None, move), target)
    return placed


def rehome_tree(copy: str, final: str) -> None:
    """Every Triton entry under `copy` (being prepared) points at where it will be once renamed to
    `final` (a relocation already did this in the staging tree; a copy made elsewhere is done here)."""
    for folder, _, _ in os.walk(copy):
        if triton_entries.groups(folder):
            triton_entries.rehome_entry(folder, os.path.normpath(os.path.join(final, os.path.relpath(folder, copy))))
