"""Tuned kernel tables as an input of planning: they shape exact plans, show in `warmup diff`
as compile keys, and make a saved plan stale when they change (planner only, no GPU)."""

from __future__ import annotations

import json

import pytest

from planner import api as stale
from planner.engine.config import load_engine
from planner.errors import PlanError
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.review import diff

ENGINE = "llama-3.1-8b-fp8-h100"
DOWN = "fp8_gemm,N=4096,K=14336,device=H100.json"


def config(block_m, block_n, group_m, warps, stages):
    return {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": block_n, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": group_m,
            "num_warps": warps, "num_stages": stages}


@pytest.fixture
def tables(tmp_path, monkeypatch):
    monkeypatch.setenv("WARMUP_KERNEL_CONFIG_DIR", str(tmp_path))
    return tmp_path


def plan_now():
    return expand(load_plan("triton"), load_engine(ENGINE))


def down_proj(plan):
    return next(s for s in plan.steps if s.id == "triton_gemm/gemm-n4096-k14336")


def test_a_table_shapes_the_exact_plan_and_its_digest(tables):
    before = plan_now()
    (tables / DOWN).write_text(json.dumps({"1": config(16, 64, 1, 4, 3), "1024": config(128, 128, 8, 8, 3)}))
    after = plan_now()
    assert down_proj(before).m_values == (1, 33, 257)          # the default configs' thresholds
    assert down_proj(after).m_values == (1, 513)               # the table's two entries
    assert before.inputs["kernel_configs"] != after.inputs["kernel_configs"]
    assert DOWN in after.inputs["kernel_config_tables"]


def test_warmup_diff_names_the_added_and_removed_compile_keys(tables):
    before = plan_now()
    (tables / DOWN).write_text(json.dumps({"1": config(16, 64, 1, 4, 3), "1024": config(128, 128, 8, 8, 3)}))
    text = diff.render_text(diff.diff_plans(before, plan_now()))
    assert ("gemm n=4096 k=14336: +0 compile keys, -1 compile key "
            "(fp8_gemm[64x128x128 g8 w4 s3](M=i32 N=i32D K=i32D Ks=i32D))") in text
    assert "gemm n=4096 k=14336: +1 M-values (513), -2 (33, 257)" in text
    assert text.rstrip().endswith("Plan: +0 steps, -0 steps, ~1 changed; GEMM calls 12 -> 11")


def test_a_changed_table_makes_the_saved_plan_stale(tables):
    (tables / DOWN).write_text(json.dumps({"1": config(16, 64, 1, 4, 3)}))
    saved = plan_now()
    stale.check_fresh(saved, load_engine(ENGINE), load_plan("triton"))  # fresh: nothing changed
    (tables / DOWN).write_text(json.dumps({"1": config(16, 128, 1, 4, 4)}))
    with pytest.raises(PlanError, match="the tuned kernel config tables changed since this plan was made"):
        stale.check_fresh(saved, load_engine(ENGINE), load_plan("triton"))
