"""Exact warmup, exhaustively: every call the hot path can make hits a planned compile key.

For every shipped engine and the built-in plans in `exact` mode, each M in
1..max_tokens of every dense GEMM shape, each producible M_sum of every grouped GEMM
weight and each token count of every attention key is mapped to the key the executor's
kernels would launch (executor.kernels, the functions they launch through), and must be
one of the plan's keys. Also with tuned tables (the kernels and the planner read the same
files) and for the sparse-buckets plan that left M=1209 cold on an H100 (2026-11-22).
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")

from planner.engine.config import load_engine  # noqa: E402
from planner.plan.authored import load_plan  # noqa: E402
from planner.plan.expand import expand  # noqa: E402
from planner.resources import builtin_engines  # noqa: E402

from execlib import ROOT  # noqa: E402
from executor.kernels import fp8_gemm, grouped_gemm, prefill_attention  # noqa: E402

# A table shaped like the H100 tuning of the down projection on 2026-11-22: bucket 1024
# selects a config (8 warps) that none of M = 1, 2, 16, 8192 selects.
DOWN_PROJ_TABLE = {
    "1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4},
    "16": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3},
    "256": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 8, "num_warps": 4, "num_stages": 4},
    "1024": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 8, "num_warps": 8, "num_stages": 3},
    "8192": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 8, "num_warps": 4, "num_stages": 3},
}


@pytest.fixture
def tables(tmp_path, monkeypatch):
    """An empty tuned-table directory that planner and kernels both read."""
    root = tmp_path / "kernel-configs"
    root.mkdir()
    monkeypatch.setenv("WARMUP_KERNEL_CONFIG_DIR", str(root))
    yield root
    fp8_gemm.clear_table_cache()



def plan_steps(plan: str, engine_name: str) -> list:
    return expand(load_plan(plan), load_engine(engine_name)).steps


def table_device(engine_name: str) -> str:
    """Whose tuned tables the kernels read: the engine's device, as `warmup execute` passes it
    (Options.table_device)."""
    return load_engine(engine_name).data["device"]["name"]


def launched_gemm_key(step, m: int, device: str) -> str:
    n, k = step.n, step.k
    if step.kind == "gemm":
        table = fp8_gemm.lookup_table(fp8_gemm.KERNEL_NAME, n, k, table_device=device)
        return fp8_gemm.specialization_key(m, n, k, table=table)
    block_m = step.alignment
    table = fp8_gemm.lookup_table(grouped_gemm.KERNEL_NAME, n, k, table_device=device)
    return grouped_gemm.specialization_key(m, n, k, block_m, table=table)


def assert_every_call_planned(steps: list, device: str) -> int:
    checked = 0
    for step in steps:
        keys = set(step.compile_keys if hasattr(step, "compile_keys") else ())
        if step.kind in ("gemm", "grouped_gemm") and step.backend == "triton":
            assert len(step.compile_keys) == len(step.m_values), step.id
            assert [launched_gemm_key(step, m, device) for m in step.m_values] == step.compile_keys, step.id
            align = getattr(step, "alignment", 1)
            for m in range(align, step.max_value + 1, align):
                assert launched_gemm_key(step, m, device) in keys, (step.id, m)
                checked += 1
        elif step.kind == "attention":
            for n in range(1, step.value_range() + 1):
                key = prefill_attention.specialization_key(
                    n, step.num_heads, step.num_kv_heads, step.head_size, step.dtype,
                    step.is_causal, step.sliding_window, step.logits_soft_cap)
                assert key in keys, (step.id, n)
                checked += 1
    return checked


@pytest.mark.parametrize("engine", builtin_engines())
@pytest.mark.parametrize("plan", ["triton", "reference"])
def test_every_m_hits_a_planned_key(plan, engine, tables):
    steps = plan_steps(plan, engine)
    checked = assert_every_call_planned(steps, table_device(engine))
    if any(s.kind == "gemm" for s in steps):
        assert checked >= 8192


@pytest.mark.parametrize("engine", ["llama-3.1-8b-fp8-h100", "qwen3-30b-a3b-fp8-h100"])
def test_every_m_hits_a_planned_key_with_tuned_tables(engine, tables):
    for step in plan_steps("triton", engine):
        if step.kind == "gemm":
            name = f"fp8_gemm,N={step.n},K={step.k},device=H100.json"
            (tables / name).write_text(json.dumps(DOWN_PROJ_TABLE))
    fp8_gemm.clear_table_cache()
    steps = plan_steps("triton", engine)
    assert_every_call_planned(steps, table_device(engine))
    dense = [s for s in steps if s.kind == "gemm"]
    assert dense and all(len(s.m_values) == 5 for s in dense)  # one M per distinct table config


def test_m_1209_left_cold_by_sparse_buckets_is_planned_by_exact(tables):
    """bench/plans/sparse-buckets.yaml warms M = 1, 2, 16, 8192: with the down projection's
    table, M=1209 (nearest key 1024) launches a config none of them does; exact plans it."""
    (tables / "fp8_gemm,N=4096,K=14336,device=H100.json").write_text(json.dumps(DOWN_PROJ_TABLE))
    fp8_gemm.clear_table_cache()
    sparse = {s.id: s for s in plan_steps(os.path.join(ROOT, "bench", "plans", "sparse-buckets.yaml"), "llama-3.1-8b-fp8-h100")}
    exact = {s.id: s for s in plan_steps("triton", "llama-3.1-8b-fp8-h100")}
    step_id = "triton_gemm/gemm-n4096-k14336"
    assert list(sparse[step_id].m_values) == [1, 2, 16, 8192]
    miss = launched_gemm_key(exact[step_id], 1209, "H100")
    assert "128x128x128 g8 w8 s3" in miss
    assert miss not in sparse[step_id].compile_keys
    assert miss in exact[step_id].compile_keys
    assert exact[step_id].m_values[exact[step_id].compile_keys.index(miss)] == 641  # (256+1024)//2 + 1


def test_exact_triton_plan_has_at_most_64_calls_per_shape(tables):
    for engine in builtin_engines():
        for step in plan_steps("triton", engine):
            if step.kind in ("gemm", "grouped_gemm"):
                assert 1 <= len(step.m_values) <= 64, (engine, step.id)
