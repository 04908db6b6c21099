"""Lints a mutation pass found untested (issue 44 item 7): what `warmup check --logs` says of each
compile after ready that the plan leaves cold, and when it happened; the order of the findings; the
replay of requests across prefills, decodes and cleanups; the limits' edges (a step may schedule
exactly max_num_batched_tokens, a request grow to exactly max_model_len, block ids run to
num_blocks - 1)."""

from __future__ import annotations

import re

import pytest
from test_absorb import ACTIVATED, LLAMA, MONITOR_TAIL, plugin_jit_log, run, vllm_line
from test_planned_around import K192

from planner.engine.config import load_engine
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.expanded import ExpandedPlan
from planner.review import lints


def log_findings(out: str) -> list[str]:
    """The findings about the logs, the log's path cut off and the time of the compile as <when>."""
    return [re.sub(r"\(\d{4}-\d\d-\d\dT[\d:]+Z\)", "(<when>)", line.split(".jsonl:", 1)[-1].split(".log:", 1)[-1])
            for line in out.splitlines() if " (logs): " in line]


def test_a_log_finding_says_when_and_why_the_plan_leaves_the_compile_cold(tmp_path, capsys):
    """E112 for a kernel no stage warms and no not-modelled entry names, W205 with the entry's action."""
    log = plugin_jit_log(tmp_path / "plugin_jit.jsonl")
    code, out, _ = run(capsys, "check", "vllm-0.25-plugin", "--engine", LLAMA, "--logs", log)
    assert code == 1
    assert log_findings(out) == [
        ("1: Triton _my_unplanned_kernel compiled after ready (<when>): no stage of this plan warms it, and its "
         "not-modelled list does not name it"),
        "4: torch.compile torch.compile frame compiled after ready (<when>): not modelled: torch.compile warmup runs",
    ]


def test_a_log_finding_for_a_variant_says_what_the_stage_plans_instead(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text(ACTIVATED + vllm_line("Triton kernel JIT compilation during inference: _topk_topp_kernel "
                                         "(constexprs={TOPK_ENABLED=True, TOPP_ENABLED=False, VOCAB_SIZE=32000}; "
                                         f"key=k){MONITOR_TAIL}"))
    code, out, _ = run(capsys, "check", "vllm-0.25-plugin", "--engine", LLAMA, "--logs", log)
    assert code == 1
    [finding] = log_findings(out)
    assert finding.startswith("2: Triton _topk_topp_kernel compiled after ready (11-27 03:46:47): ")
    assert "stage sampler_kernels warms _topk_topp_kernel" in finding  # absorb's words for a variant


def test_findings_come_plan_wide_first_then_in_step_order_whatever_their_codes():
    """`warmup check` lists what concerns the whole plan first, then each step's findings in the order
    the steps run (a later step's E1xx after an earlier step's W2xx)."""
    engine = load_engine(K192)  # its k = 192 linears: W206 for the plan as a whole
    data = expand(load_plan("vllm-0.33"), engine).to_dict()
    steps = data["steps"]
    assert [s["id"] for s in steps[:3]] == ["deep_gemm/gemm-n192-k512", "flashinfer_autotune/autotune",
                                            "warmup_kernels/prefill"]
    steps[0]["m_values"] = []                      # E108: the GEMM does nothing
    steps[1]["num_tokens"] = 1                     # W202: autotunes below the batches
    steps[2]["total_num_scheduled_tokens"] += 1    # E109: its requests do not add up
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts)
    assert [(f.step, f.lint.code) for f in findings] == [
        ("(plan)", "W204"), ("(plan)", "W206"), ("(plan)", "W206"), ("(plan)", "W206"),
        ("deep_gemm/gemm-n192-k512", "E108"), ("flashinfer_autotune/autotune", "W202"),
        ("warmup_kernels/prefill", "E109")]


LLAMA_ENGINE = "plans/engines/llama-3.1-8b-fp8-h100.yaml"


def with_prefill_again(before_cleanup: bool, **changes):
    """vllm-0.33 on Llama with its warmup prefill run a second time (with `changes`), before or after
    the cleanup that finishes its requests: (plan, engine)."""
    engine = load_engine(LLAMA_ENGINE)
    data = expand(load_plan("vllm-0.33"), engine).to_dict()
    steps = data["steps"]
    prefill = next(s for s in steps if s["id"] == "warmup_kernels/prefill")
    cleanup = next(i for i, s in enumerate(steps) if s["id"] == "warmup_kernels/cleanup")
    steps.insert(cleanup if before_cleanup else cleanup + 1, {**prefill, "id": "warmup_kernels/prefill-again", **changes})
    return ExpandedPlan.from_dict(data), engine


def test_a_request_prefilled_again_while_it_runs_is_inconsistent():
    """One line for the step: the first request, and how many more."""
    plan, engine = with_prefill_again(before_cleanup=True)
    findings, _ = lints.run(plan, engine.facts, codes=["E109"])
    assert [(f.step, f.message) for f in findings] == [
        ("warmup_kernels/prefill-again", "request _warmup_0_ is added again while it is running (and 1023 more)")]


def test_a_request_id_finished_by_a_cleanup_can_be_prefilled_again():
    plan, engine = with_prefill_again(before_cleanup=False)
    assert lints.run(plan, engine.facts, codes=["E104", "E107", "E109"])[0] == []


def test_a_decode_of_requests_no_prefill_added_is_inconsistent():
    engine = load_engine(LLAMA_ENGINE)
    data = expand(load_plan("vllm-0.33"), engine).to_dict()
    data["steps"] = [s for s in data["steps"] if s["id"] != "warmup_kernels/prefill"]
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=["E109"])
    assert (findings[0].step, findings[0].message) == (
        "warmup_kernels/decode-1", "request _warmup_0_ is decoded but not running (no prefill added it, or a "
        "cleanup finished it) (and 1023 more)")


def llama_findings(edit, codes: list, plan: str = "vllm-0.33") -> list:
    """(step, message) of the lints `codes` on `plan` for Llama, its steps (by id) edited by `edit`."""
    engine = load_engine(LLAMA_ENGINE)
    data = expand(load_plan(plan), engine).to_dict()
    edit({s["id"]: s for s in data["steps"]})
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=codes)
    return [(f.step, f.message) for f in findings]


def test_a_decode_that_outgrows_its_blocks_holds_too_few():
    def grow(steps):
        decode = steps["warmup_kernels/decode-1"]
        decode["requests"][0]["num_scheduled_tokens"] = 20   # 2 + 20 tokens: 2 blocks of 16, it holds 1
        decode["total_num_scheduled_tokens"] += 19
    assert llama_findings(grow, ["E102"]) == [
        ("warmup_kernels/decode-1", "1 request (_warmup_0_) hold 1 block in KV group 0; the scheduler would hold 2 "
                                    "for 22 tokens (block size 16)")]


def test_a_request_holding_blocks_in_too_few_kv_groups_is_one_finding_per_step():
    def drop_groups(steps):
        steps["warmup_kernels/prefill"]["requests"][0]["block_ids"] = []
    assert llama_findings(drop_groups, ["E102"]) == [
        (step, "requests hold blocks in 0 KV cache groups, the engine has 1")
        for step in ("warmup_kernels/prefill", "warmup_kernels/decode-1", "warmup_kernels/decode-2",
                     "warmup_kernels/decode-3")]


def test_a_prefill_is_taken_for_a_decode_only_when_its_longest_request_is_decode_sized():
    def one_short(steps):
        prefill = steps["warmup_kernels/prefill"]
        prefill["requests"][0]["num_scheduled_tokens"] = 1
        prefill["total_num_scheduled_tokens"] -= 1

    def all_short(steps):
        prefill = steps["warmup_kernels/prefill"]
        for r in prefill["requests"]:
            r["num_scheduled_tokens"] = 1
        prefill["total_num_scheduled_tokens"] = len(prefill["requests"])

    assert llama_findings(one_short, ["E101"]) == []
    assert [step for step, _ in llama_findings(all_short, ["E101"])] == ["warmup_kernels/prefill"]


def test_a_block_handed_out_twice_is_named_by_the_first_reuse():
    plan, engine = with_prefill_again(before_cleanup=True)
    findings, _ = lints.run(plan, engine.facts, codes=["E104"])
    assert [(f.step, f.message) for f in findings] == [
        ("warmup_kernels/prefill-again", "1024 block ids handed out twice (1, 2, 3, 4, ...); e.g. block 1 goes to "
                                         "_warmup_0_ again")]


BUDGET, MAX_LEN, NUM_BLOCKS = 8192, 131072, 31744  # Llama's max_num_batched_tokens, max_model_len, num_blocks


def test_llamas_limits_are_the_ones_these_tests_probe():
    facts = load_engine(LLAMA_ENGINE).facts
    assert (facts.scheduler.max_num_batched_tokens, facts.model.max_model_len, facts.kv_cache.num_blocks) == \
        (BUDGET, MAX_LEN, NUM_BLOCKS)


@pytest.mark.parametrize("total, over", [(BUDGET, False), (BUDGET + 1, True)])
def test_a_step_may_schedule_exactly_max_num_batched_tokens(total, over):
    def schedule(steps):
        steps["warmup_kernels/prefill"]["total_num_scheduled_tokens"] = total
    found = llama_findings(schedule, ["E106"])
    assert found == ([("warmup_kernels/prefill", f"schedules {total} tokens, more than max_num_batched_tokens "
                                                 f"{BUDGET}")] if over else [])


@pytest.mark.parametrize("step, tokens, over", [
    ("warmup_kernels/prefill", MAX_LEN, False), ("warmup_kernels/prefill", MAX_LEN + 1, True),
    ("warmup_kernels/decode-1", MAX_LEN - 2, False), ("warmup_kernels/decode-1", MAX_LEN - 1, True),  # 2 computed
])
def test_a_request_may_grow_to_exactly_max_model_len(step, tokens, over):
    def grow(steps):
        steps[step]["requests"][0]["num_scheduled_tokens"] = tokens
    found = llama_findings(grow, ["E106"])
    assert found == ([(step, f"1 request (_warmup_0_) grow past max_model_len {MAX_LEN}")] if over else [])


@pytest.mark.parametrize("block, out", [(NUM_BLOCKS - 1, False), (NUM_BLOCKS, True), (0, False), (-1, True)])
def test_block_ids_run_from_the_null_block_to_num_blocks_less_one(block, out):
    """Block 0 is the null block (E103's concern), not out of range; num_blocks and negative ids are."""
    def give(steps):
        steps["warmup_kernels/prefill"]["requests"][0]["block_ids"] = [[block]]
    found = llama_findings(give, ["E105"])
    assert found == ([("warmup_kernels/prefill", f"1 block id outside 1..{NUM_BLOCKS - 1} (num_blocks "
                                                 f"{NUM_BLOCKS}): {block}")] if out else [])


@pytest.mark.parametrize("tokens, over", [(BUDGET, False), (BUDGET + 1, True)])
def test_an_attention_step_may_run_exactly_max_num_batched_tokens(tokens, over):
    step = "prefill_attention/attention-h32-kv8-d128-t1"

    def run_tokens(steps):
        steps[step]["num_tokens"] = tokens
    found = llama_findings(run_tokens, ["E106"], plan="triton")
    assert found == ([(step, f"runs {tokens} tokens, more than max_num_batched_tokens {BUDGET}")] if over else [])


def test_more_running_requests_than_max_num_seqs_is_too_many():
    """A second prefill of 1024 new requests, each step within max_num_seqs (1024), 2048 running."""
    plan, engine = with_prefill_again(before_cleanup=True)
    data = plan.to_dict()
    again = next(s for s in data["steps"] if s["id"] == "warmup_kernels/prefill-again")
    for i, r in enumerate(again["requests"]):
        r["req_id"], r["block_ids"] = f"again-{i}", [[NUM_BLOCKS - 1 - i]]
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=["E107"])
    assert [(f.step, f.message) for f in findings] == [
        ("warmup_kernels/prefill-again", "2048 requests are running, more than max_num_seqs 1024")]


def test_two_replay_problems_of_a_step_are_one_line_and_one_more():
    plan, engine = with_prefill_again(before_cleanup=True)
    data = plan.to_dict()
    again = next(s for s in data["steps"] if s["id"] == "warmup_kernels/prefill-again")
    again["requests"], again["total_num_scheduled_tokens"] = again["requests"][:2], 4
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=["E109"])
    assert [(f.step, f.message) for f in findings] == [
        ("warmup_kernels/prefill-again", "request _warmup_0_ is added again while it is running (and 1 more)")]


def test_a_prefill_request_may_not_schedule_more_than_the_prompt():
    def longer(steps):
        steps["warmup_kernels/prefill"]["requests"][0]["num_scheduled_tokens"] = 3
        steps["warmup_kernels/prefill"]["total_num_scheduled_tokens"] += 1
    assert llama_findings(longer, ["E109"])[0] == (
        "warmup_kernels/prefill", "1 request (_warmup_0_) schedule more tokens than the 2-token prompt")


@pytest.mark.parametrize("spec, bad", [(0, False), (1, True)])
def test_a_decode_must_schedule_a_verified_token_beyond_its_drafts(spec, bad):
    def drafts(steps):
        steps["warmup_kernels/decode-1"]["requests"][0]["num_spec_tokens"] = spec  # of 1 scheduled token
    found = llama_findings(drafts, ["E109"])
    assert found == ([("warmup_kernels/decode-1", "1 request (_warmup_0_) schedule no verified token: "
                                                  "num_spec_tokens must be < num_scheduled_tokens")] if bad else [])


def test_a_decode_continues_from_the_tokens_its_request_has_computed():
    def skip_ahead(steps):
        steps["warmup_kernels/decode-1"]["requests"][0]["num_computed_tokens"] = 5
    assert llama_findings(skip_ahead, ["E109"])[0] == (
        "warmup_kernels/decode-1", "request _warmup_0_ continues from 5 computed tokens, but has computed 2")


def test_blocks_a_decode_brings_in_a_new_kv_group_are_held_from_then_on():
    """A request prefilled with no blocks (a finding) that a decode gives its group's first block holds
    blocks in every group from that decode on."""
    def late_blocks(steps):
        steps["warmup_kernels/prefill"]["requests"][0]["block_ids"] = []
        steps["warmup_kernels/decode-1"]["requests"][0]["new_block_ids"] = [[NUM_BLOCKS - 1]]
    assert llama_findings(late_blocks, ["E102"]) == [
        ("warmup_kernels/prefill", "requests hold blocks in 0 KV cache groups, the engine has 1")]


QWEN_ENGINE = "plans/engines/qwen3-30b-a3b-fp8-h100.yaml"
W13 = "triton_gemm/grouped_gemm-w13-e128-n1536-k2048"
# Qwen3-30B-A3B: 8192 tokens x top_k 8 = 65536 routed rows, each of its 128 experts padded by up to
# 127 rows to the alignment of 128: the largest M_sum is 65536 + 128 * 127 = 81792 (a multiple of 128)
LARGEST_M_SUM = 81792


def qwen_triton_findings(step_id: str, codes: list, **fields) -> list:
    engine = load_engine(QWEN_ENGINE)
    data = expand(load_plan("triton"), engine).to_dict()
    next(s for s in data["steps"] if s["id"] == step_id).update(fields)
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=codes)
    return [(f.step, f.message) for f in findings]


def test_a_grouped_gemm_may_run_up_to_every_token_routed_and_every_expert_padded():
    assert qwen_triton_findings(W13, ["E110"], m_values=[128, LARGEST_M_SUM]) == []
    assert qwen_triton_findings(W13, ["E110"], m_values=[128, LARGEST_M_SUM + 128]) == [
        (W13, f"1 M-value outside [1, {LARGEST_M_SUM}] ({LARGEST_M_SUM + 128}): above the largest M_sum "
              f"{LARGEST_M_SUM} (8192 tokens x top_k 8, padded)")]


def test_a_gemm_m_of_zero_is_out_of_range():
    step = "triton_gemm/gemm-n5120-k2048"
    assert qwen_triton_findings(step, ["E110"], m_values=[0, 1]) == [
        (step, "1 M-value outside [1, 8192] (0): below 1")]


def test_the_triton_block_fp8_gemm_takes_any_n_and_k_in_whole_scale_blocks():
    step = "triton_gemm/gemm-n5120-k2048"
    assert qwen_triton_findings(step, ["E111"], n=5121) == []
    assert qwen_triton_findings(W13, ["E111"], n=1537) == []  # its grouped GEMM too
    assert qwen_triton_findings(step, ["E111"], k=2049) == [
        (step, "fp8_gemm cannot take this shape: k=2049 is not a multiple of 128")]


def with_copies(step_id: str, *m_values: list) -> list:
    """W203 on Qwen's triton plan with copies of one GEMM step (one per M-value list) after it."""
    engine = load_engine(QWEN_ENGINE)
    data = expand(load_plan("triton"), engine).to_dict()
    at = next(i for i, s in enumerate(data["steps"]) if s["id"] == step_id)
    for i, values in enumerate(m_values):
        data["steps"].insert(at + 1 + i, {**data["steps"][at], "id": f"{step_id}-copy{i}", "m_values": values})
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=["W203"])
    return [(f.step, f.message) for f in findings]


def test_a_gemm_step_duplicates_another_only_where_their_m_values_meet():
    step = "triton_gemm/gemm-n5120-k2048"
    assert with_copies(step, [2, 3]) == []   # its M-values end ... 49, 193, 385: none of 2, 3
    assert with_copies(step, [49, 50]) == [(f"{step}-copy0", f"duplicates {step}: 1 of its M-values run there too (49)")]


def test_a_step_is_named_a_duplicate_once_however_many_steps_it_repeats():
    step = "triton_gemm/gemm-n5120-k2048"
    assert with_copies(step, [49], [49]) == [
        (f"{step}-copy0", f"duplicates {step}: 1 of its M-values run there too (49)"),
        (f"{step}-copy1", f"duplicates {step}: 1 of its M-values run there too (49)")]
