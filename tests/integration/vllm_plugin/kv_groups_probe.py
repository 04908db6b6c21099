"""vLLM's own KV-cache grouping of a layer pattern, on CPU: the groups
_get_kv_cache_groups_uniform_page_size (vllm/v1/core/kv_cache_utils.py) makes of full and
sliding-window layers (0.33 keeps it in kv_cache_planning.py), and which KVCacheSpec classes the
release has.

    python3 kv_groups_probe.py PATTERN...    # PATTERN: a string of F (full) and S (sliding), layer by layer

Prints one JSON line: {"groups": {PATTERN: [[kind, num_layers], ...]}, "spec_classes": [...]}.
"""

from __future__ import annotations

import json
import sys

import torch
from vllm.v1 import kv_cache_interface as kv


def grouping():
    """The function where the release keeps it: kv_cache_utils (0.25), kv_cache_planning (0.33)."""
    from vllm.v1.core import kv_cache_utils
    found = getattr(kv_cache_utils, "_get_kv_cache_groups_uniform_page_size", None)
    if found is None:
        from vllm.v1.core import kv_cache_planning
        found = kv_cache_planning._get_kv_cache_groups_uniform_page_size
    return found


def groups_of(pattern: str) -> list:
    full = kv.FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
    sliding = kv.SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16,
                                   sliding_window=4096)
    specs = {f"model.layers.{i}.self_attn.attn": full if c == "F" else sliding for i, c in enumerate(pattern)}
    made = grouping()(specs)
    return [[type(g.kv_cache_spec).__name__, len([n for n in g.layer_names if n in specs])] for g in made]


def main(patterns) -> None:
    classes = sorted(name for name, value in vars(kv).items() if isinstance(value, type) and name.endswith("Spec"))
    print(json.dumps({"groups": {p: groups_of(p) for p in patterns}, "spec_classes": classes}))


if __name__ == "__main__":
    main(sys.argv[1:])
