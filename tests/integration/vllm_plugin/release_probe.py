"""One probe script run against each installed vLLM release (WARMUP_VLLM_ENVS): its last line of output
read as JSON. The premises tests of vllm_bridge's modules share it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.vllm_parity.test_parity import RELEASES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def releases_fixture(probe: str):
    """A module-scoped fixture: the probe's JSON for each release (a skip without WARMUP_VLLM_ENVS). The
    probe imports the release's vLLM and this repository's packages."""

    @pytest.fixture(scope="module", params=sorted(RELEASES) or [None])
    def vllm(request):
        if request.param is None:
            pytest.skip("WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")
        env = {**os.environ, "PYTHONPATH": f"{ROOT}:{RELEASES[request.param]}", "VLLM_LOGGING_LEVEL": "ERROR"}
        run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        return json.loads(run.stdout.splitlines()[-1])

    return vllm
