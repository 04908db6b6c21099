"""The per-release plans (vllm-0.25, vllm-0.33): what each release does differently, and the
not_modelled section that review sees (plan -f table, diff, the expanded plan's plain form).

The numbers come from the releases' own code (tests/integration/vllm_parity checks them against it)."""

from __future__ import annotations

import subprocess
import sys

from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.expanded import ExpandedPlan
from planner.render import to_table
from planner.review.diff import diff_plans, render_markdown, render_text
from tests.factories import make_engine, steps_of, write_plan

EAGLE2 = {"speculative": {"method": "eagle", "num_speculative_tokens": 2},
          "scheduler": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}}


def capture(plan: str, engine):
    return steps_of(plan, engine, kind="cudagraph")[0]


def test_033_adds_decode_sizes_with_speculative_decoding():
    # Issue 16: with 2 draft tokens vLLM 0.33 captures 60 sizes where the grid has 51.
    eng = make_engine(**EAGLE2)
    assert len(capture("vllm-0.25", eng).sizes) == 51
    sizes = capture("vllm-0.33", eng).sizes
    assert len(sizes) == 60 and {3, 6, 12, 264, 504} <= set(sizes)


def test_033_adds_max_num_seqs_off_the_grid_without_speculation():
    eng = make_engine(scheduler={"max_num_seqs": 100, "max_num_batched_tokens": 8192})
    assert 100 in capture("vllm-0.33", eng).sizes and 100 not in capture("vllm-0.25", eng).sizes


def test_033_runs_warmup_kernels_before_capture_and_twice_with_speculation():
    eng = make_engine(**EAGLE2)
    kinds = [s.kind for s in steps_of("vllm-0.33", eng) if s.stage in ("warmup_kernels", "cudagraph")]
    assert kinds[-1] == "cudagraph" and kinds.count("prefill") == 2
    batches = steps_of("vllm-0.33", eng, stage="warmup_kernels")
    assert len(batches) == 26  # 13 steps a pass, the plan had 13
    greedy = [s for s in batches if s.id.startswith("warmup_kernels/greedy-")]
    assert len(greedy) == 13 and greedy[1].sampling_params == {"temperature": 0}
    assert greedy[0].requests[0].block_ids[0][0] == 1  # the second pass allocates from block 1 again
    plain = make_engine(scheduler={"max_num_seqs": 1024, "max_num_batched_tokens": 8192})
    assert not [s for s in steps_of("vllm-0.33", plain) if "greedy" in s.id]


def test_grammar_bitmask_rows_per_release():
    eng = make_engine(**EAGLE2)
    sample = [s for s in steps_of("vllm-0.33", eng, kind="sample") if s.grammar_bitmask][0]
    prefill = steps_of("vllm-0.33", eng, kind="prefill")[0]
    assert sample.grammar_bitmask.num_rows == 3 * len(prefill.requests)
    sample25 = [s for s in steps_of("vllm-0.25", eng, kind="sample") if s.grammar_bitmask][0]
    assert sample25.grammar_bitmask.num_rows == len(steps_of("vllm-0.25", eng, kind="prefill")[0].requests)


def test_033_warms_deep_gemm_for_n_multiple_of_64():
    eng = make_engine(model={"linear": [{"name": "fused_qkv_a_proj", "n": 2112, "k": 7168, "count": 61,
                                         "quant": {"method": "fp8", "weight_block_size": [128, 128]}}]})
    assert [s.n for s in steps_of("vllm-0.33", eng, kind="gemm")] == [2112]
    assert steps_of("vllm-0.25", eng, kind="gemm") == []


def test_release_plans_leave_grouped_deep_gemm_to_the_user():
    eng = make_engine(model={"moe": [{"name": "experts", "num_experts": 128, "top_k": 8, "hidden_size": 2048,
                                      "intermediate_size": 768, "count": 48,
                                      "quant": {"method": "fp8", "weight_block_size": [128, 128]}}]})
    for plan in ("vllm-0.25", "vllm-0.33"):
        assert steps_of(plan, eng, kind="grouped_gemm") == []


def test_not_modelled_in_table_plain_form_and_diff(tmp_path):
    eng = make_engine()
    new = expand(load_plan("vllm-0.33"), eng)
    assert "JIT warmup registry (vLLM's own Triton kernels)" in {g["family"] for g in new.not_modelled}
    table = to_table(new)
    assert "Not modelled (10 of what the engine warms, which this plan does not):" in table
    assert "    what to do: keep kernel_config.enable_jit_warmup on" in table
    again = ExpandedPlan.from_dict(new.to_dict())
    assert again.not_modelled == new.not_modelled
    old = expand(load_plan("vllm-0.25"), eng)
    d = diff_plans(old, new)
    assert any(line.startswith("not modelled: +JIT warmup registry") for line in d.header)
    assert "Not modelled by vllm-0.33" in render_text(d) and "Not modelled by vllm-0.33" in render_markdown(d)
    # A child plan inherits its parent's list, or replaces it.
    child = write_plan(tmp_path, "name: child\nextends: vllm-0.33\n")
    assert load_plan(child).not_modelled == load_plan("vllm-0.33").not_modelled
    none = write_plan(tmp_path, "name: none\nextends: vllm-0.33\nnot_modelled: []\n", "none.yaml")
    assert load_plan(none).not_modelled == () and "not_modelled" not in expand(load_plan(none), eng).to_dict()


def test_a_bad_not_modelled_entry_is_one_line(tmp_path):
    bad = write_plan(tmp_path, "name: bad\nextends: vllm-0.33\nnot_modelled:\n  - family: x\n    why: y\n")
    run = subprocess.run([sys.executable, "-m", "planner.cli", "plan", bad, "--engine", "llama-3.1-8b-fp8-h100"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert run.stderr.startswith("warmup: error: ") and "not_modelled" in run.stderr and "action" in run.stderr
