"""Triton's file cache: one directory per compile key (triton_entries.py).

- Lives in: TRITON_CACHE_DIR, else ``$TRITON_HOME/.triton/cache`` (vLLM's own Triton kernels and the
  plan's). Inductor's Triton kernels are in Inductor's cache (executor/caches/inductor.py).
- Packs: every file but the precompile pool's claims and locks; the precompile manifest is
  rewritten for the installing machine, not copied.
- Relocates: a group file ``__grp__<name>.json`` lists its entry's files by absolute path, and
  Triton opens those paths: they are pointed at the entry's place here (``ENTRY_RULES``, which the
  families holding Triton entries share). Its other files (IR, PTX, cubin, metadata) name the
  kernel's source file for debugging only; Triton finds an entry by its key.
- Is used: a kernel loaded reads its files; one compiled again is an entry of the same kernel name
  under another key. The JIT monitor counts ``triton.compile`` calls, compiled and loaded.
"""

from __future__ import annotations

import os

from . import checks, roots, triton_entries
from .family import PLAN, VLLM, Family, Monitored, PathRule, Placing, Unresolved
from .tree import Placed, collect_tree, place_children


def in_entry(rel: str, path: str) -> bool:
    """Whether the file is in a Triton cache entry (a directory holding a group file)."""
    return bool(triton_entries.groups(os.path.dirname(path)))


def is_group(rel: str, path: str) -> bool:
    return os.path.basename(path).startswith(triton_entries.GROUP_PREFIX) and in_entry(rel, path)


def rewrite_group(data: bytes, relocation, final: str) -> bytes:
    """The group's files, listed where the entry will be: its own directory here."""
    return triton_entries.rehome_group(data, os.path.dirname(final))


ENTRY_RULES = (
    PathRule(is_group, rewrite_group, "Triton opens the files its group file lists"),
    PathRule(in_entry, None, "Triton finds an entry by its key; its IR and metadata name the source for debugging"),
)


def entry_check(path: str) -> list[Unresolved]:
    """A file of a Triton entry Triton would fail on: the entry goes whole."""
    entry, name = os.path.dirname(path), os.path.basename(path)
    if not triton_entries.groups(entry):
        return []
    problem = checks.by_kind(path)
    if problem is None and name.startswith(triton_entries.GROUP_PREFIX):
        problem = checks.group_problem(path)
    return [Unresolved(entry, f"{name}: {problem}")] if problem else []


def check(root: str, path: str) -> list[Unresolved]:
    return entry_check(path)


def collect(root: str, fingerprint: dict) -> tuple[dict, list]:
    return collect_tree(root, "triton", skip=frozenset({roots.CLAIMS_DIR})), []


def place_entries(p: Placing) -> Placed:
    return place_children(p.staged, p.dest, triton_entries.rehome_entry, p.move, skip=frozenset({roots.MANIFEST_NAME}))


def identity(root: str, entry: str) -> str:
    """An entry's kernel names (a recompile writes them under another key)."""
    folder = os.path.join(root, entry)
    names = sorted(n[:-5] for n in os.listdir(folder)
                   if n.endswith(".json") and not n.startswith(triton_entries.GROUP_PREFIX)) if os.path.isdir(folder) else []
    return "triton:" + ",".join(names)


FAMILY = Family(
    name="triton", label="Triton", root=roots.triton_root, collect=collect, place=place_entries,
    paths=ENTRY_RULES, check=check, identity=identity,
    monitor=Monitored("triton", "triton", "Triton", "compiled", "disk_loads"),
    env_var="TRITON_CACHE_DIR", origins=(PLAN, VLLM))
