"""vLLM's FlashInfer autotune cache (vllm/model_executor/warmup/flashinfer_autotune_cache.py): the
tactics FlashInfer's autotuner chose, as JSON.

- Lives in: VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR, else ``$VLLM_CACHE_ROOT/flashinfer_autotune_cache``.
- Packs: every file. Relocates: nothing (tactics name no path; a file that named one would not be
  installed). Checks: each JSON file parses.
"""

from __future__ import annotations

import os

from . import checks
from .family import Family, Placing
from .tree import Placed, collect_tree, place_tree


def root(env) -> str:
    return env.environ.get("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR") or os.path.join(env.vllm_cache_root,
                                                                               "flashinfer_autotune_cache")


def collect(root_dir: str, fingerprint: dict) -> tuple[dict, list]:
    return collect_tree(root_dir, "flashinfer_autotune"), []


def place(p: Placing) -> Placed:
    return place_tree(p.staged, p.dest, p.move)


FAMILY = Family(name="flashinfer_autotune", label="FlashInfer autotune", root=root, collect=collect, place=place,
                check=checks.file_check)
