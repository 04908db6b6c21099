"""vLLM's own calls of FlashInfer modules the pool builds (vllm_bridge/warmup/flashinfer_waits.py): a call
that finds FlashInfer's lock held by another process is a wait for the pool, timed and logged; the
line on what FlashInfer's prebuilt JIT cache would save."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

filelock = pytest.importorskip("filelock")

from vllm_bridge.warmup.flashinfer_waits import FlashInferWaits, held_elsewhere, prebuilt_line  # noqa: E402

FAKE_CORE = '''
CALLS = []

class JitSpec:
    def __init__(self, name, lock_path):
        self.name, self.lock_path = name, lock_path
    def build_and_load(self):
        from filelock import FileLock
        with FileLock(self.lock_path):   # as FlashInfer's: the build and the load under the module's lock
            CALLS.append(self.name)
        return "module"
'''

HOLD = "import sys, time; from filelock import FileLock\nwith FileLock(sys.argv[1]):\n    print('held', flush=True); time.sleep(float(sys.argv[2]))"


@pytest.fixture
def fake_flashinfer(tmp_path, monkeypatch):
    pkg = tmp_path / "pkgs" / "flashinfer" / "jit"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text(FAKE_CORE)
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    for name in [m for m in sys.modules if m == "flashinfer" or m.startswith("flashinfer.")]:
        monkeypatch.delitem(sys.modules, name)
    import flashinfer.jit.core as core

    return core


def hold(lock, seconds):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_call_that_finds_the_pools_build_under_way_is_a_timed_wait(fake_flashinfer, tmp_path):
    lock = tmp_path / "sampling.lock"
    waits = FlashInferWaits()
    assert waits.install() and waits.line() is None
    assert fake_flashinfer.JitSpec("gemm", str(tmp_path / "gemm.lock")).build_and_load() == "module"
    assert waits.waits == []                                   # free lock: no wait for the pool
    pool = hold(lock, 1.0)
    began = time.perf_counter()
    assert fake_flashinfer.JitSpec("sampling", str(lock)).build_and_load() == "module"
    assert time.perf_counter() - began >= 0.5
    pool.wait(10)
    assert [w["module"] for w in waits.waits] == ["sampling"] and waits.waits[0]["waited_s"] >= 0.5
    assert waits.line().startswith("vLLM waited for the pool's FlashInfer build of sampling ")
    waits.uninstall()
    assert "build_and_load" in vars(fake_flashinfer.JitSpec) and fake_flashinfer.CALLS == ["gemm", "sampling"]
    assert fake_flashinfer.JitSpec.build_and_load.__qualname__ == "JitSpec.build_and_load"  # FlashInfer's again


def test_held_elsewhere_takes_nothing(tmp_path):
    lock = tmp_path / "m.lock"
    assert held_elsewhere(str(lock)) is False and held_elsewhere(None) is False
    proc = hold(lock, 1.0)
    assert held_elsewhere(str(lock)) is True
    proc.wait(10)
    assert held_elsewhere(str(lock)) is False


def test_the_prebuilt_cache_line_names_what_the_pool_built(monkeypatch):
    records = [{"backend": "flashinfer_jit", "key": "flashinfer.jit[sampling]", "status": "ok", "compiled": 1,
                "wall_s": 118.44},
               {"backend": "flashinfer_jit", "key": "flashinfer.jit[gemm]", "status": "ok", "compiled": 0, "wall_s": 0.1},
               {"backend": "deep_gemm_vllm", "key": "dg", "status": "ok", "compiled": 1, "wall_s": 4.0}]
    monkeypatch.setattr("vllm_bridge.warmup.flashinfer_waits.prebuilt_cache_installed", lambda: False)
    assert prebuilt_line(records) == (
        "FlashInfer's prebuilt JIT cache (flashinfer-jit-cache, on FlashInfer's own wheel index) is not installed: "
        "the pool built its modules here (sampling 118.4 s); with it, nothing would be built")
    monkeypatch.setattr("vllm_bridge.warmup.flashinfer_waits.prebuilt_cache_installed", lambda: True)
    assert prebuilt_line(records) is None
