"""Issue 37 item 3: an engine vLLM serves always gets a plan. A block-FP8 linear whose K is not a
whole number of FP8 blocks (k = 192 with [128, 128] blocks) is served by vLLM where tensor
parallelism does not split K; no GEMM kernel the plans model takes it, so every plan plans around
it: no GEMM step for it, one not-modelled entry naming it, and lint W206 in `warmup check`. The
same for an MoE layer whose hidden size (w13's K) the grouped GEMM stages do not take."""

from __future__ import annotations

import pytest
import yaml

from planner.cli import main
from planner.engine.config import load_engine
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.steps import GemmLike
from planner.review import lints
from tests.factories import make_engine

K192 = "tests/fixtures/engines/k192-fp8-h100.yaml"
AROUND = ["qkv_proj", "o_proj", "gate_up_proj"]      # k = 192; down_proj (k = 512) is whole blocks
PLANS = ["vllm-0.25", "vllm-0.25-plugin", "vllm-0.33", "vllm-head", "vllm", "triton", "triton-tune", "reference"]
FAMILY = "block-FP8 GEMMs of a K that is not whole FP8 blocks"


def gap_of(expanded) -> dict | None:
    return next((g for g in expanded.not_modelled if g["family"] == FAMILY), None)


@pytest.mark.parametrize("plan", PLANS)
def test_every_plan_plans_around_a_k_no_kernel_takes_and_names_the_layers(plan):
    expanded = expand(load_plan(plan), load_engine(K192))
    gemms = [s for s in expanded.steps if isinstance(s, GemmLike)]
    assert all(s.k % 128 == 0 for s in gemms) and not any(set(s.layers) & set(AROUND) for s in gemms)
    gap = gap_of(expanded)
    assert gap is not None, [g["family"] for g in expanded.not_modelled]
    assert [g["family"] for g in expanded.not_modelled].count(FAMILY) == 1   # one entry, however many stages
    for name in AROUND:
        assert f"linear {name} (n=" in gap["why"] and ", k=192)" in gap["why"]
    assert "down_proj" not in gap["why"]


def test_the_whole_block_layer_beside_them_is_still_warmed():
    expanded = expand(load_plan("triton"), load_engine(K192))
    assert [(s.n, s.k, s.layers) for s in expanded.steps if isinstance(s, GemmLike)] == [(192, 512, ("down_proj",))]


def test_validate_plan_and_check_accept_it_and_check_names_each_layer(capsys, tmp_path):
    assert main(["validate", K192]) == 0
    out_file = tmp_path / "plan.yaml"
    assert main(["plan", "vllm-0.33", "-e", K192, "-o", str(out_file)]) == 0
    saved = yaml.safe_load(out_file.read_text())
    assert [g["family"] for g in saved["not_modelled"]].count(FAMILY) == 1
    capsys.readouterr()
    assert main(["check", "vllm-0.33", "-e", K192]) == 0   # warnings only
    out = capsys.readouterr().out
    named = [line for line in out.splitlines() if line.startswith("WARNING W206")]
    assert [line.split("linear ")[1].split(" ")[0] for line in named] == AROUND
    assert "k=192) is planned around" in named[0]


def test_the_lint_is_silent_where_every_k_is_whole_blocks():
    engine = load_engine("plans/engines/llama-3.1-8b-fp8-h100.yaml")
    findings, _ = lints.run(expand(load_plan("vllm-0.33"), engine), engine.facts, codes=["W206"])
    assert findings == [] and gap_of(expand(load_plan("triton"), engine)) is None


def test_an_moe_hidden_size_the_grouped_gemms_do_not_take_is_planned_around_by_them():
    engine = make_engine(model={
        "vocab_size": 1000, "max_model_len": 4096, "hidden_size": 192, "num_layers": 2,
        "moe": [{"name": "experts", "num_experts": 8, "top_k": 2, "hidden_size": 192, "intermediate_size": 256,
                 "quant": {"method": "fp8", "weight_block_size": [128, 128]}}]})
    expanded = expand(load_plan("triton"), engine)
    grouped = [s for s in expanded.steps if isinstance(s, GemmLike) and s.layers == ("experts",)]
    assert [(s.weight, s.k) for s in grouped] == [("w2", 256)]          # w13's K = 192 is left out...
    assert "moe experts (n=512, hidden_size=192)" in gap_of(expanded)["why"]   # ...and named
