"""What vLLM learnt of a model class (vllm/model_executor/models/registry.py): one JSON file per class
in ``$VLLM_CACHE_ROOT/modelinfos``, with the hash of the model's source file, which vLLM checks before
it trusts the entry. It saves the subprocess that imports the model class (15-30 s of every cold
start on the H100, before any worker exists). vLLM reads it while it resolves the architecture,
long before ``load_model``: the plugin places it at ``register`` (``early``).

Packs: every file. Relocates: nothing (it names no path). Checks: each file parses (vLLM would
only ignore one that does not).
"""

from __future__ import annotations

import os

from . import checks
from .family import Family, Placing
from .tree import Placed, collect_tree, place_tree


def root(env) -> str:
    return os.path.join(env.vllm_cache_root, "modelinfos")


def collect(root_dir: str, fingerprint: dict) -> tuple[dict, list]:
    return collect_tree(root_dir, "vllm_modelinfo"), []


def place(p: Placing) -> Placed:
    return place_tree(p.staged, p.dest, p.move)


FAMILY = Family(name="vllm_modelinfo", label="vLLM model info", root=root, collect=collect, place=place,
                check=checks.file_check, early=True)
