"""Inductor's cache, where it is outside vLLM's torch.compile cache: TORCHINDUCTOR_CACHE_DIR, else
``<tmp>/torchinductor_<user>``.

- Lives in: the directory Inductor started with. vLLM's AOT compile later points
  TORCHINDUCTOR_CACHE_DIR inside its torch.compile cache (packed with that family). Inductor's
  Triton kernels go to TRITON_CACHE_DIR, which Inductor sets under its cache directory of the
  moment where nobody set it (its first kernel's CachingAutotuner); the vLLM plugin sets it first,
  at load_model, to Triton's own directory (vllm_bridge/warmup/executor_options.py, pin_triton_cache).
- Packs: every file but locks.
- Relocates: its Triton entries' group files (executor/caches/triton.py), and the paths its FX graph
  and AOTAutograd entries (pickles) hold: each kernel's autotuner keeps the absolute path of its
  ``.best_config``, which Inductor opens (executor/caches/torch_artifacts.py). Inductor finds
  everything else by the hash of its source or key (``<2 chars>/<hash>.<ext>``); paths inside are in
  comments ("kernel path: ...") and repro strings, which nothing follows.
- Is used: a kernel loaded reads its files; Inductor's by-products of a cold compile (its Python
  modules, say) are never read by a start that loads the compiled graph whole.
"""

from __future__ import annotations

import re

from . import checks, roots, torch_artifacts, triton
from .family import Family, PathRule, Placing, Unresolved
from .tree import Placed, collect_tree, place_tree

# Inductor's own layout: <2 chars>/<hash>.<ext> (PyCodeCache, CppCodeCache, their .best_config), its
# FX graph and AOTAutograd entries, its Triton cache, its locks.
LAYOUT = re.compile(r"^(fxgraph|aotautograd|triton|locks|[0-9a-z]{2})/")
ENTRIES = re.compile(r"^(fxgraph|aotautograd)/")
WHY = "Inductor finds it by its key or the hash of its source; paths inside are comments and repro strings"


def in_layout(rel: str) -> bool:
    return bool(LAYOUT.match(rel))


def is_entry(rel: str) -> bool:
    """An FX graph or AOTAutograd cache entry: a pickle whose objects hold paths Inductor opens."""
    return bool(ENTRIES.match(rel))


def rewrite_pickled(data: bytes, relocation, final: str) -> bytes:
    return torch_artifacts.rewrite(data, relocation.moved, tuple(r.encode() for r in relocation.foreign_roots()))


ENTRY_WHY = "Inductor opens the paths its pickled objects hold (each kernel's .best_config)"
PATHS = (*triton.ENTRY_RULES, PathRule(lambda rel, path: is_entry(rel), rewrite_pickled, ENTRY_WHY),
         PathRule(lambda rel, path: in_layout(rel), None, WHY))


def check(root: str, path: str) -> list[Unresolved]:
    return triton.entry_check(path) or checks.file_check(root, path)


def collect(root: str, fingerprint: dict) -> tuple[dict, list]:
    return collect_tree(root, "inductor"), []


def place(p: Placing) -> Placed:
    return place_tree(p.staged, p.dest, p.move)


FAMILY = Family(name="inductor", label="Inductor", root=roots.inductor_root, collect=collect, place=place,
                paths=PATHS, check=check)
