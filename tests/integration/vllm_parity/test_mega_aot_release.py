"""vllm_bridge/mega_aot.py against each release's own source (WARMUP_VLLM_ENVS,
tests/integration/vllm_parity/setup_vllm.sh): the names it asks vLLM's envs for, the first torch
whose standalone_compile vLLM hands the mega artifact's `aot` to, and where vLLM saves an AOT-compiled
model (the cache rule looks for one)."""

from __future__ import annotations

import os
import re

import pytest

from planner.engine.releases import supported
from tests.integration.vllm_parity.test_fixes_rows import source
from tests.integration.vllm_parity.test_parity import RELEASES, env_key
from vllm_bridge import mega_aot

pytestmark = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")


@pytest.mark.parametrize("version", [v for v in supported() if env_key(v) in RELEASES] or ["none"])
def test_the_release_has_the_switches_mega_aot_reads_and_takes_it_from_the_same_torch(version):
    envs = source(RELEASES[env_key(version)], os.path.join("vllm", "envs.py"))
    for name in ("def use_mega_aot_artifact(", "def use_aot_compile(", '"VLLM_USE_STANDALONE_COMPILE"',
                 f'"{mega_aot.VARIABLE}"', '"VLLM_CACHE_ROOT"', '"VLLM_DISABLE_COMPILE_CACHE"'):
        assert name in envs, name
    interface = source(RELEASES[env_key(version)], os.path.join("vllm", "compilation", "compiler_interface.py"))
    [first] = re.findall(r'supports_aot = is_torch_equal_or_newer\("(\d+)\.(\d+)', interface)
    assert tuple(map(int, first)) == mega_aot.MIN_TORCH


@pytest.mark.parametrize("version", [v for v in supported() if env_key(v) in RELEASES] or ["none"])
def test_the_release_saves_its_aot_model_where_the_cache_rule_looks(version):
    """decorators.py: VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<hash>/rank_<rank>_<dp>/model."""
    decorators = source(RELEASES[env_key(version)], os.path.join("vllm", "compilation", "decorators.py"))
    assert re.search(r'envs\.VLLM_CACHE_ROOT,\s*"torch_compile_cache",\s*"torch_aot_compile",\s*hash_key', decorators)
    assert 'f"rank_{rank}_{dp_rank}"' in decorators
    assert 'os.path.join(cache_dir, "model")' in decorators
    assert mega_aot.AOT_ARTIFACTS == os.path.join("torch_compile_cache", "torch_aot_compile", "*", "rank_*", "model")
