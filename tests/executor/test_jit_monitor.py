"""The JIT monitor: per-step counts, the seal, warn/error after it, the JSONL log, and that it
restores the hooks it chained. The Triton hooks are driven the way Triton 3.6 calls them
(triton/runtime/jit.py `_call_hook`, compiler.py listener, CompiledKernel._init_handles)."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from execlib import ROOT

from executor import jit_monitor
from executor.jit_monitor import JitAfterSealError, Monitor

knobs = pytest.importorskip("triton").knobs


def fire_jit_miss(name="fp8_gemm_kernel", key="[('*fp8e4nv','D'),('i32','')]", warmup=False):
    """What JITFunction._do_compile does on an in-memory miss, then the compile and the launch."""
    fn = SimpleNamespace(module="executor.kernels.fp8_gemm", name=name, jit_function=None)
    info = {"key": key, "signature": {"M": "i32"}, "constants": {"BLOCK_SIZE_M": 64}, "num_warps": 4,
            "num_stages": 3, "specialization_data": '{"name": "%s"}' % name}
    knobs.runtime.jit_cache_hook(key=key, repr=f"{name}[num_warps=4]", fn=fn, compile=info,
                                 is_manual_warmup=warmup, already_compiled=False)
    knobs.compilation.listener(src=None, metadata={"name": name}, metadata_group={},
                               times=SimpleNamespace(total=1500), cache_hit=False)
    knobs.runtime.jit_post_compile_hook(key=key, repr="", fn=fn, compile=info, is_manual_warmup=warmup,
                                        already_compiled=False)
    if not warmup:
        knobs.runtime.kernel_load_start_hook(None, None, name, {}, "hash")


@pytest.fixture
def monitor(tmp_path):
    m = Monitor("warn", str(tmp_path / "misses.jsonl")).install()
    yield m
    m.uninstall()


def test_counts_per_step_before_the_seal(monitor):
    monitor.begin_step("a")
    fire_jit_miss()
    knobs.compilation.listener(src=None, metadata={"name": "k2"}, metadata_group={}, times=None, cache_hit=True)
    counts = monitor.end_step()
    assert (counts.jit_misses, counts.compiled, counts.disk_loads, counts.module_loads) == (1, 1, 1, 1)
    assert counts.kernels == {"fp8_gemm_kernel": 1} and counts.compile_ms == pytest.approx(1.5)
    monitor.begin_step("b")
    assert monitor.end_step().jit_misses == 0
    assert monitor.totals.jit_misses == 1 and monitor.post_seal_events == []


def test_after_seal_warn_reports_and_logs(monitor, tmp_path, caplog):
    monitor.seal()
    monitor.begin_step("verify/gemm/m17")
    with caplog.at_level("WARNING", logger="executor.jit_monitor"):
        fire_jit_miss(name="late_kernel")
    monitor.end_step()
    assert len(monitor.post_seal_events) == 1  # the compile and its module load are one event
    event = monitor.post_seal_events[0]
    assert event["kernel"] == "late_kernel" and event["step"] == "verify/gemm/m17"
    assert event["constants"] == {"BLOCK_SIZE_M": 64} and "late_kernel" in event["specialization_data"]
    assert "late_kernel" in caplog.text and "after warmup was sealed" in caplog.text
    lines = (tmp_path / "misses.jsonl").read_text().splitlines()
    assert [json.loads(line)["kernel"] for line in lines] == ["late_kernel"]
    assert monitor.after_seal.jit_misses == 1 and monitor.totals.jit_misses == 0


def test_after_seal_error_raises(tmp_path):
    m = Monitor("error").install()
    try:
        m.seal()
        with pytest.raises(JitAfterSealError, match="late_kernel"):
            fire_jit_miss(name="late_kernel")
        assert len(m.post_seal_events) == 1
    finally:
        m.uninstall()


def test_module_load_of_an_unlaunched_variant_is_reported(monitor):
    monitor.seal()
    knobs.runtime.kernel_load_start_hook(None, None, "preloaded_kernel", {}, "h")
    assert [e["kernel"] for e in monitor.post_seal_events] == ["preloaded_kernel"]


def test_inductor_compile_outside_jit_is_reported(monitor):
    monitor.seal()
    knobs.compilation.listener(src=None, metadata={"name": "triton_poi_fused"}, metadata_group={},
                               times=None, cache_hit=False)
    assert monitor.post_seal_events[0]["kernel"] == "triton_poi_fused"


def test_uninstall_restores_and_chains_previous_hooks():
    seen = []
    prev = lambda **kw: seen.append(kw["key"])  # noqa: E731
    knobs.runtime.jit_cache_hook = prev
    try:
        m = Monitor("warn").install()
        fire_jit_miss(key="k1")
        assert seen == ["k1"] and m.totals.jit_misses == 1
        m.uninstall()
        assert knobs.runtime.jit_cache_hook is prev
        assert m._on_module_load not in knobs.runtime.kernel_load_start_hook.calls
    finally:
        knobs.runtime.jit_cache_hook = None
    assert knobs.compilation.listener is None


def test_off_installs_nothing():
    m = Monitor("off").install()
    assert knobs.runtime.jit_cache_hook is None and m.end_step() is None
    m.seal()
    assert not m.sealed


def test_module_api(tmp_path):
    with pytest.raises(RuntimeError):
        jit_monitor.deactivate() or jit_monitor.seal()
    m = jit_monitor.activate("warn", str(tmp_path / "x.jsonl"))
    try:
        assert jit_monitor.active() is m and knobs.runtime.jit_cache_hook is not None
        jit_monitor.seal()
        assert m.sealed
    finally:
        jit_monitor.deactivate()
    assert knobs.runtime.jit_cache_hook is None


def test_torch_compile_after_seal_is_reported():
    torch = pytest.importorskip("torch")
    import torch._dynamo  # noqa: F401 - the monitor watches Dynamo only once the process has it

    m = Monitor("warn").install()
    try:
        f = torch.compile(lambda x: x * 2 + 1, backend="eager")
        m.begin_step("warm")
        f(torch.ones(4))
        assert m.end_step().dynamo_compiles >= 1
        m.seal()
        f(torch.ones(4))  # same shape: no compile
        assert m.post_seal_events == []
        f(torch.ones(4, 3))  # new rank: Dynamo recompiles
        assert [e["backend"] for e in m.post_seal_events] == ["torch.compile"]
    finally:
        m.uninstall()
        torch._dynamo.reset()


def test_deep_gemm_cache_directory_is_watched(tmp_path, monkeypatch):
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "dg"))
    monkeypatch.setitem(sys.modules, "deep_gemm", SimpleNamespace())
    m = Monitor("warn").install()
    try:
        (tmp_path / "dg" / "cache" / "kernel.abc").mkdir(parents=True)
        m.begin_step("warm")
        (tmp_path / "dg" / "cache" / "kernel.abc" / "kernel.cubin").write_text("x")
        assert m.end_step().deep_gemm_jit == 1
        m.seal()
        m.begin_step("serve")
        (tmp_path / "dg" / "cache" / "kernel.abc" / "kernel2.cubin").write_text("x")
        m.end_step()
        assert [e["backend"] for e in m.post_seal_events] == ["deep_gemm"]
    finally:
        m.uninstall()


def test_works_without_triton():
    code = ("import sys; sys.modules['triton'] = None\n"
            "from executor import jit_monitor\n"
            "m = jit_monitor.activate('error'); m.begin_step('a'); print(m.end_step().jit_misses); "
            "jit_monitor.seal(); print(m.sealed, m.watching)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["0", "True []"]
