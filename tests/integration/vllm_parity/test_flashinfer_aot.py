"""FlashInfer's own loader is the judge of a bundle's FlashInfer modules (issue 35 item 1): with
vLLM 0.25.0's FlashInfer 0.6.13 (WARMUP_VLLM_ENVS, tests/integration/vllm_parity/setup_vllm.sh), the
directories executor/caches/flashinfer_jit.py finds without importing FlashInfer are the ones
FlashInfer computes, and a module a bundle installed is loaded by ``JitSpec.build_and_load`` from
where it was placed, without FlashInfer's build step running and without a library appearing in
the JIT workspace. The load itself (tvm_ffi, a GPU library) is recorded, not made."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from executor.bundle import startup
from executor.caches.registry import CacheRoots
from tests.integration.vllm_parity.test_parity import RELEASES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "tests", "executor"))  # its modules import each other by name
from test_bundle_flashinfer import built_module  # noqa: E402
from test_startup_bundle import environ, fill_startup, vllm_fp  # noqa: E402


def release_path() -> str | None:
    """vLLM 0.25.0's sys.path (its FlashInfer 0.6.13 beside it) from WARMUP_VLLM_ENVS."""
    return RELEASES.get("0.25")


pytestmark = pytest.mark.skipif(release_path() is None, reason="WARMUP_VLLM_ENVS has no 0.25 release "
                                "(tests/integration/vllm_parity/setup_vllm.sh)")


def test_flashinfer_loads_an_installed_module_as_prebuilt_and_builds_nothing(tmp_path, monkeypatch):
    for key in ("TRITON_CACHE_DIR", "DG_JIT_CACHE_DIR", "FLASHINFER_CUDA_ARCH_LIST"):
        monkeypatch.delenv(key, raising=False)
    from executor.caches import flashinfer_jit as fim
    monkeypatch.setattr(fim, "flashinfer_version", lambda: "0.6.13")
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "build" / "ws"))
    built_module(tmp_path / "build" / "ws", "sampling")
    roots = fill_startup(tmp_path / "build").replace(flashinfer_jit=str(tmp_path / "build" / "aot"))
    startup.build(str(tmp_path / "b.warmup"), roots, vllm_fp(), startup.Origin())
    aot = tmp_path / "serve" / "aot"
    startup.install(str(tmp_path / "b.warmup"), CacheRoots.resolve(environ(tmp_path / "serve"))
                    .replace(flashinfer_jit=str(aot)), vllm_fp())

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, release_path()]), "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
           "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "serve" / "ws")}
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "integration", "vllm_parity", "flashinfer_aot_oracle.py")],
                         input=json.dumps({"aot": str(aot)}), capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["ours"] == seen["flashinfer"]
    assert seen["is_aot"] is True
    assert seen["loaded"] == str(aot / "sampling" / "sampling.so")
    assert seen["built"] == [] and seen["workspace_library"] is False
