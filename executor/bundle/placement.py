"""Placing a checked, staged bundle into one machine's cache roots: relocate, place, check.

Both installs use it, a plan's bundle (executor/bundle/ops.py) and a vLLM start-up's
(executor/bundle/startup.py). For each family the bundle holds, in the table's order
(executor/caches/registry.py):

1. relocate: the staged files that name the building machine's cache paths are made this
   machine's, or kept where no loader follows those paths, or taken out (executor/caches/relocate.py);
2. place: the family's own placement, each entry whole and never over one that is there;
3. check: every file this install placed is checked as its loader will take it; what would make a
   loader fail is removed (executor/caches/checks.py), and its library compiles that piece itself.

Each member taken out or removed is one line (``Installation.problem_lines``). The precompile
manifest is then written for this machine, so that a warm start skips the pool.
"""

from __future__ import annotations

import os
import shutil
from typing import NamedTuple

from .. import precompile
from ..caches import registry
from ..caches.family import Placing
from ..caches.registry import CacheRoots
from ..caches.relocate import Relocation, relocate_family
from ..caches.targets import cannot_write
from ..caches.tree import Placed, files_under, journal, undo


class Installation(NamedTuple):
    """What one install did, per family."""

    families: dict                 # family -> Placed
    manifest_keys: int = 0         # keys in the precompile manifest after the install
    relocated: dict = {}           # family -> relocate.Outcome
    unresolved: dict = {}          # family -> (Unresolved, ...): removed, or taken out of their file
    installed: object = None       # usage.Installed: the record of what was placed (None: nothing by this process)

    def problem_lines(self) -> list[str]:
        """One line per member not installed and per placed file or entry a loader would fail on."""
        lines = [line for family, outcome in self.relocated.items() for line in outcome.lines(family)]
        for family, items in self.unresolved.items():
            lines += [f"{family}: {u.path} {'removed' if u.removes else 'entry taken out'}: {u.why}" for u in items]
        return lines

    def describe(self) -> str:
        """One line: per family the entries placed and those already there, and the problems' count."""
        parts = [f"{family} {p.new} new ({p.kept} already there)" for family, p in self.families.items()]
        moved = sum(len(o.rewritten) for o in self.relocated.values())
        problems = len(self.problem_lines())
        tail = (f"; {moved} files relocated to this machine's paths" if moved else "") + \
               (f"; {problems} not installed or removed (listed)" if problems else "")
        return f"installed: {', '.join(parts) or 'nothing'}; {self.manifest_keys} keys in the precompile manifest{tail}"


def families(manifest) -> set:
    return {f.path.split("/")[0] for f in manifest.files}


def place_all(manifest, staged: str, roots: CacheRoots, names: dict, include_dir: str | None,
              wanted: set | None = None, move: bool = False) -> Installation:
    """Each held family (of `wanted`) from `staged` into its root (`move`: the staged copy is ours to
    rename). All or nothing: an install that fails half-way (a full disk) removes what it placed,
    which no record lists yet, and a cache that cannot be written is one line (WriteError)."""
    with journal() as placed:
        try:
            return _place_all(manifest, staged, roots, names, include_dir, wanted, move)
        except OSError as e:
            undo(placed)
            raise cannot_write(e, note=removed(placed)) from None
        except BaseException:
            undo(placed)
            raise


def removed(placed: list) -> str:
    """What a failed install says of what it had placed (and removed)."""
    if not placed:
        return "nothing was placed"
    if len(placed) == 1:
        return "the 1 entry this install had placed was removed"
    return f"the {len(placed)} entries this install had placed were removed"


def _place_all(manifest, staged: str, roots: CacheRoots, names: dict, include_dir: str | None,
               wanted: set | None, move: bool) -> Installation:
    held = families(manifest) if wanted is None else families(manifest) & wanted
    relocation = Relocation.of(manifest.roots, {f: roots.get(f) for f in held})
    placed, relocated, unresolved = {}, {}, {}
    for family in registry.FAMILIES:
        if family.name not in held:
            continue
        src, dest = os.path.join(staged, family.name), roots[family.name]
        relocated[family.name] = relocate_family(family, src, dest, relocation)
        placed[family.name] = family.place(Placing(src, dest, manifest, names, include_dir, move))
        unresolved[family.name] = check_placed(family, roots.directory(family.name), placed[family.name])
    return Installation(placed, _write_precompile_manifest(manifest, roots, held), relocated,
                        {f: u for f, u in unresolved.items() if u})


def check_placed(family, root: str, placed: Placed) -> tuple:
    """The family's check of every file this install placed; what fails is removed."""
    if family.check is None:
        return ()
    found = {}
    for path in placed.paths:
        for file in files_under(path):
            for item in family.check(root, file):
                found.setdefault((item.path, item.why), item)
    for item in found.values():
        if item.removes:
            _remove(item.path)
    return tuple(found.values())


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


def _write_precompile_manifest(manifest, roots: CacheRoots, held: set) -> int:
    """The keys the bundle holds, for this machine's fingerprint, so that a warm start skips the pool."""
    if not manifest.keys or not roots.get("triton") or not held & {"triton", "deep_gemm"}:
        return 0
    add = {backend: set(keys) for backend, keys in manifest.keys.items()}
    return precompile.update_manifest(precompile.manifest_path(roots["triton"]), add,
                                      deep_gemm_root=roots.get("deep_gemm"))
