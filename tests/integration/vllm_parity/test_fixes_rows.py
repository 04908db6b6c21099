"""The release rows' start-up fixes (planner/engine/releases.py, missing_start_up_fixes) against each release's
own source, with the releases of WARMUP_VLLM_ENVS (tests/integration/vllm_parity/setup_vllm.sh)."""

from __future__ import annotations

import os

import pytest

from planner.engine.releases import supported
from tests.integration.vllm_parity.test_parity import RELEASES, env_key
from vllm_bridge.releases import RELEASES as ROWS

pytestmark = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")


def source(paths: str, relative: str) -> str:
    """A file of the release whose sys.path entries are `paths`."""
    for root in paths.split(os.pathsep):
        path = os.path.join(root, relative)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return f.read()
    raise AssertionError(f"{relative} is in none of {paths}")


@pytest.mark.parametrize("version", [v for v in supported() if env_key(v) in RELEASES] or ["none"])
def test_a_release_lacks_the_capture_gc_fix_exactly_where_its_runner_captures_without_it(version):
    """gc_freeze_capture is missing where Model Runner V2's capture runs without vLLM's
    freeze_gc_for_cudagraph_capture (vLLM 0.33.0 has it; 0.25.0 captures with the collector on)."""
    text = source(RELEASES[env_key(version)], os.path.join("vllm", "v1", "worker", "gpu", "model_runner.py"))
    assert ("gc_freeze_capture" in ROWS[version].missing_fixes) == ("freeze_gc_for_cudagraph_capture" not in text)
