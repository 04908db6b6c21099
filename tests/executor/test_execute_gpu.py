"""The executor on a CUDA GPU (skipped elsewhere; bench/gpu_all.sh runs these with `-m gpu`):
the monitor sees real compiles and catches an unwarmed variant after the seal, a warm run
compiles nothing, the hot-path check finds no compile, and a CUDA OOM is a step failure."""

from __future__ import annotations


import pytest
from execlib import TINY, TUNED_PLAN, by_id, load_report, run_subprocess

from planner.plan.expanded import ExpandedPlan
from planner.plan.steps import Gemm

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.gpu  # skipped without CUDA by tests/conftest.py


def test_monitor_counts_real_compiles_and_catches_a_late_variant():
    from executor.jit_monitor import Monitor
    from executor.kernels import configs
    from executor.kernels import fp8_gemm as g

    inputs = g.alloc_gemm_inputs(64, 384, 256, "cuda")
    warm = configs.make_config(32, 32, 4, 2, 3)
    late = configs.make_config(32, 32, 4, 2, 2)
    m = Monitor("warn").install()
    try:
        m.begin_step("warm")
        g.fp8_gemm(*inputs.args(), out=inputs.out, config=warm)
        torch.cuda.synchronize()
        counts = m.end_step()
        assert counts.jit_misses == 1 and counts.compiled + counts.disk_loads == 1 and counts.module_loads == 1
        m.seal()
        for rows in (1, 17, 48):  # M is not specialized: no compile
            part = inputs.rows(rows)
            g.fp8_gemm(*part.args(), out=part.out, config=warm)
        torch.cuda.synchronize()
        assert m.post_seal_events == []
        g.fp8_gemm(*inputs.args(), out=inputs.out, config=late)
        torch.cuda.synchronize()
        assert len(m.post_seal_events) == 1 and "fp8_gemm" in m.post_seal_events[0]["kernel"]
    finally:
        m.uninstall()


def test_cold_then_warm_run_and_hot_path_check(tmp_path):
    env = {"TRITON_CACHE_DIR": str(tmp_path / "triton"), "WARMUP_KERNEL_CONFIG_DIR": str(tmp_path / "tables")}
    env.pop("TRITON_INTERPRET", None)
    cold, warm = tmp_path / "cold.json", tmp_path / "warm.json"
    proc = run_subprocess([TUNED_PLAN, "--engine", TINY, "--verify", "300", "--report", str(cold)],
                          {**env, "TRITON_INTERPRET": "0"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = load_report(cold)
    stages = {s["stage"]: s for s in rep["stages"]}
    assert stages["autotune"]["compiled"] > 0 and stages["triton_gemm"]["compiled"] > 0
    assert rep["verify"]["post_seal_compiles"] == 0 and rep["verify"]["calls"] == 300
    proc = run_subprocess([TUNED_PLAN, "--engine", TINY, "--verify", "300", "--report", str(warm)],
                          {**env, "TRITON_INTERPRET": "0"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = load_report(warm)
    assert sum(s["compiled"] for s in rep["stages"]) == 0
    assert sum(s["disk_loads"] for s in rep["stages"]) > 0
    assert by_id(rep)["autotune/autotune"]["details"]["loaded"] == 2
    assert rep["verify"]["post_seal_compiles"] == 0


def one_plan(name: str, *steps) -> ExpandedPlan:
    return ExpandedPlan(plan=name, engine="none", planner_version="0", digest="", inputs={}, steps=steps)


def test_cuda_oom_of_an_oversized_step_is_a_step_failure():
    from executor.run import Options, execute

    def gemm(name, n, k):
        return Gemm(f"s/{name}", "s", kernel="fp8_gemm", backend="triton", n=n, k=k, block_size=(128, 128),
                    m_values=(1, 2, 3, 4))

    plan = one_plan("oom", gemm("huge", 1 << 20, 1 << 18), gemm("small", 256, 256))  # 256 GiB of fp8 weight
    rep = execute(plan, None, Options(on_error="continue"))
    steps = by_id(rep.to_dict())
    assert steps["s/huge"]["status"] == "failed" and steps["s/huge"].get("oom") is True
    assert "OutOfMemoryError" in steps["s/huge"]["error"]
    assert steps["s/small"]["status"] == "ok" and steps["s/small"]["kernel_calls"] == 4


def test_error_mode_raises_from_the_launch_of_a_late_variant():
    from executor.jit_monitor import JitAfterSealError, Monitor
    from executor.kernels import configs
    from executor.kernels import fp8_gemm as g

    inputs = g.alloc_gemm_inputs(32, 256, 128, "cuda")
    m = Monitor("error").install()
    try:
        m.seal()
        with pytest.raises(JitAfterSealError, match="fp8_gemm"):
            g.fp8_gemm(*inputs.args(), out=inputs.out, config=configs.make_config(16, 32, 2, 2, 2))
    finally:
        m.uninstall()


@pytest.mark.parametrize("kernel", ["scaled_mm", "bf16_matmul"])
def test_torch_backend_cublas_paths(kernel):
    from executor.run import Options, execute

    step = Gemm(f"s/{kernel}", "s", kernel=kernel, backend="torch", n=256, k=256, m_values=(1, 16, 17, 64))
    rep = execute(one_plan("torch", step), None, Options()).to_dict()
    assert rep["steps"][0]["status"] == "ok", rep["steps"][0]["error"]
    assert rep["steps"][0]["kernel_calls"] == 4
