"""vLLM's own KV-cache grouping against the engine's (planner/engine/hf/attention.py) and the
KVCacheSpec class names the plugin reads the live KV cache by (vllm_bridge/engine/from_vllm.py), in both
releases, on CPU (tests/integration/vllm_plugin/kv_groups_probe.py). Skips as the plugin tests do without
WARMUP_VLLM_ENVS (tests/integration/vllm_parity/setup_vllm.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from planner.engine.hf.attention import _kv_cache_groups
from tests.integration.vllm_parity.test_parity import RELEASES
from vllm_bridge.engine.from_vllm import LIVE_KV_KINDS

HERE = os.path.dirname(os.path.abspath(__file__))
# layer by layer, F full and S sliding: Cohere2 (3:1), Gemma 3 1B (5:1 over 26), Gemma 2 (1:1),
# Qwen2 with max_window_layers (20 full, then 8 sliding), GPT-OSS-like 12:13, all full, all sliding
PATTERNS = ("SSSF" * 8, ("SSSSSF" * 5)[:26], "SF" * 21, "F" * 20 + "S" * 8, "SF" * 12 + "F", "F" * 12, "S" * 12)
KIND = {"FullAttentionSpec": "full_attention", "SlidingWindowSpec": "sliding_window"}


@pytest.fixture(scope="module", params=sorted(RELEASES) or [None])
def vllm(request):
    if request.param is None:
        pytest.skip("WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")
    env = {**os.environ, "PYTHONPATH": RELEASES[request.param], "VLLM_LOGGING_LEVEL": "ERROR"}
    run = subprocess.run([sys.executable, os.path.join(HERE, "kv_groups_probe.py"), *PATTERNS],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_engines_groups_are_vllms(vllm, pattern):
    theirs = sorted((KIND[cls], n) for cls, n in vllm["groups"][pattern])
    mine = sorted((g.kind, g.num_layers) for g in _kv_cache_groups(4096, [c == "S" for c in pattern]))
    assert mine == theirs


def test_the_spec_classes_the_plugin_reads_are_vllms(vllm):
    assert {name for name, _ in LIVE_KV_KINDS} <= set(vllm["spec_classes"])
