"""serving_paths (planner/plan/stages/serving_paths.py): every path a served request takes, planned
as vLLM's scheduler would send it, within the engine's limits, deterministic."""

from __future__ import annotations

import pytest

from factories import make_engine, write_plan
from planner.api import expand, load_engine, load_plan
from planner.errors import PlanError
from planner.plan.stages.serving_paths import SAMPLING_MODES, SKIPPED, decode_threshold
from planner.plan.steps import Cleanup, Decode, Prefill, Sample
from planner.review import lints
from kernel_model.dynamo_shapes import every_size_key, size_key

PLUGIN = "vllm-0.25-plugin"
STAGE = "serving_paths"


def stage_plan(tmp_path, **params) -> str:
    """A plan of the stage alone, with these parameters (values as YAML writes them)."""
    lines = ["name: serving-only", 'vllm_release: "0.25.0"', "stages:", "  - name: serving_paths",
             "    kind: serving_paths", "    with:" + ("" if params else " {}")]
    lines += [f"      {k}: {v}" for k, v in params.items()]
    return write_plan(tmp_path, "\n".join(lines) + "\n")


def expanded(engine, plan: str = PLUGIN):
    return expand(load_plan(plan), engine)


def paths(engine, plan: str = PLUGIN) -> list:
    return [s for s in expanded(engine, plan).steps if s.stage == STAGE]


def prefill(steps, name: str) -> Prefill:
    return next(s for s in steps if s.id == f"{STAGE}/{name}")


def test_each_sampling_mode_is_a_lone_request_with_a_decode_at_batch_1():
    steps = paths(load_engine("llama-3.1-8b-fp8-h100"))
    for mode, params in SAMPLING_MODES:
        step = prefill(steps, f"{mode}-prefill")
        assert [dict(r.sampling_params) for r in step.requests] == [params], mode
        assert step.total_num_scheduled_tokens == 17  # not a multiple of 16
        decode = prefill(steps, f"{mode}-decode")
        assert isinstance(decode, Decode) and len(decode.requests) == 1
        assert decode.requests[0].num_computed_tokens == 17


def test_n2_arrives_as_two_children_and_the_mixed_batch_mixes_greedy_with_top_k_top_p():
    steps = paths(load_engine("llama-3.1-8b-fp8-h100"))
    n2 = prefill(steps, "n2-prefill")
    # ParentRequest.get_child_info: ids "{index}_{parent}", each with n = 1 (no n in the params).
    assert [r.req_id for r in n2.requests] == ["0__warmup_n2_", "1__warmup_n2_"]
    assert all(dict(r.sampling_params) == {"temperature": 0.6} for r in n2.requests)
    mixed = prefill(steps, "mixed-prefill")
    params = [dict(r.sampling_params) for r in mixed.requests]
    assert {"temperature": 0} in params and any("top_k" in p and "top_p" in p for p in params)
    sample = prefill(steps, "mixed-prefill-sample")
    assert isinstance(sample, Sample) and {"greedy", "top_k", "top_p"} <= set(sample.features)


def test_mla_engine_gets_prefills_and_context_above_every_decode_threshold():
    steps = paths(load_engine("deepseek-v3-fp8-tp8-h200"))
    threshold = decode_threshold(0)
    assert threshold == 512  # FLASH_ATTN_MLA's reorder_batch_threshold in vLLM 0.25
    long = prefill(steps, "long-prefill-prefill")
    assert long.requests[0].num_scheduled_tokens > threshold
    # The chunked prefill's second chunk: a running request with context, above the threshold.
    first, second = prefill(steps, "chunked-prefill-prefill"), prefill(steps, "chunked-prefill-prefill-2")
    r = first.requests[0]
    assert r.num_scheduled_tokens < len(first.prompt_token_ids)
    (cont,) = second.requests
    assert cont.num_computed_tokens == r.num_scheduled_tokens > 0
    assert cont.num_scheduled_tokens > threshold and cont.num_output_tokens == 0
    assert cont.num_computed_tokens + cont.num_scheduled_tokens == len(first.prompt_token_ids)
    hit = prefill(steps, "prefix-hit-prefill-hit").requests[0]
    assert hit.num_computed_tokens > 0 and hit.num_scheduled_tokens > threshold


def test_prefix_hit_starts_with_the_live_donors_computed_blocks():
    engine = load_engine("deepseek-v3-fp8-tp8-h200")
    steps = paths(engine)
    block_size = engine.facts.kv_cache.groups[0].block_size
    donor = prefill(steps, "prefix-hit-prefill").requests[0]
    hit_step = prefill(steps, "prefix-hit-prefill-hit")
    hit = hit_step.requests[0]
    assert hit.num_computed_tokens % block_size == 0 and hit.num_computed_tokens <= donor.num_scheduled_tokens
    shared = hit.num_computed_tokens // block_size
    assert hit.block_ids[0][:shared] == donor.block_ids[0][:shared]
    assert not set(hit.block_ids[0][shared:]) & set(donor.block_ids[0])
    # The donor's prompt is the hit's first tokens, and the donor is still running.
    assert tuple(range(donor.num_scheduled_tokens)) == hit_step.prompt_token_ids[:donor.num_scheduled_tokens]
    between = steps[steps.index(prefill(steps, "prefix-hit-prefill")):steps.index(hit_step)]
    assert not any(isinstance(s, Cleanup) and donor.req_id in s.finished_req_ids for s in between)


@pytest.mark.parametrize("engine_name", ["llama-3.1-8b-fp8-h100", "deepseek-v3-fp8-tp8-h200",
                                         "mixtral-8x7b-tp2-h100", "qwen3-30b-a3b-fp8-h100"])
def test_limits_block_ids_and_cleanup(engine_name):
    engine = load_engine(engine_name)
    plan = expanded(engine)
    facts = engine.facts
    running: set = set()
    for step in (s for s in plan.steps if s.stage == STAGE):
        if isinstance(step, (Prefill, Decode)):
            assert step.total_num_scheduled_tokens <= facts.scheduler.max_num_batched_tokens
            assert len(step.requests) <= facts.scheduler.max_num_seqs
            groups = [r.block_ids if isinstance(step, Prefill) else (r.new_block_ids or ()) for r in step.requests]
            assert all(0 < b < facts.kv_cache.num_blocks for g in groups for ids in g for b in ids)
            running |= {r.req_id for r in step.requests}
        elif isinstance(step, Cleanup):
            running -= set(step.finished_req_ids)
    assert not running, "every request of the stage is finished"
    findings, _ = lints.run(plan, facts)
    assert [f.line() for f in findings if f.step.startswith(STAGE)] == []


def test_speculative_decoding_decodes_with_drafts_and_reserves_the_lookahead():
    engine = make_engine(speculative={"method": "mtp", "num_speculative_tokens": 3})
    plan = expanded(engine)
    decodes = [s for s in plan.steps if s.stage == STAGE and s.id.endswith("-decode")]
    assert decodes and all(r.num_spec_tokens == 3 and r.num_scheduled_tokens == 4
                           for s in decodes for r in s.requests)
    findings, _ = lints.run(plan, engine.facts, codes=["E102", "E104", "E109"])
    assert findings == []


def corrected_batch_sizes(steps) -> list:
    """(the step before's batch size, this step's) for each step where vLLM 0.25's V1 runner runs
    update_num_computed_tokens_for_batch_change: a request of this step was in the persistent batch
    the step before left (GPUModelRunner._update_states removes every request a step does not
    schedule, so a step that schedules nothing or only new requests leaves none behind)."""
    pairs, before = [], []
    for step in steps:
        if isinstance(step, Cleanup):
            before = []
        elif isinstance(step, (Prefill, Decode)):
            now = [r.req_id for r in step.requests]
            if isinstance(step, Decode) and set(now) & set(before):
                pairs.append((len(before), len(now)))
            before = now
    return pairs


@pytest.mark.parametrize("speculative", [None, {"method": "mtp", "num_speculative_tokens": 2}])
def test_batch_change_gives_the_corrected_batch_every_size_key(speculative):
    """update_num_computed_tokens_for_batch_change (V1 runner, async speculative decoding) is a
    torch.compile(dynamic=True) graph of the previous and this batch's sizes: every key Dynamo can
    give two sizes (kernel_model/dynamo_shapes.py) must run before ready, each in a step that keeps
    a request of the step before (else the runner never calls it)."""
    engine = make_engine(**({"speculative": speculative} if speculative else {}))
    steps = [s for s in paths(engine) if s.id.startswith(f"{STAGE}/batch-change-")]
    keys = {size_key(pair) for pair in corrected_batch_sizes(steps)}
    assert keys == every_size_key(2)
    k = speculative["num_speculative_tokens"] if speculative else 0
    running: dict = {}
    for step in steps:  # each decode continues its requests where the step before left them
        if isinstance(step, Prefill):
            running.update({r.req_id: r.num_scheduled_tokens for r in step.requests})
        elif isinstance(step, Decode):
            for r in step.requests:
                assert (r.num_computed_tokens, r.num_scheduled_tokens, r.num_spec_tokens) == (running[r.req_id], 1 + k, k)
                assert r.num_output_tokens == r.num_computed_tokens - 17 + 1
                running[r.req_id] += 1 + k
        elif isinstance(step, Cleanup):
            for rid in step.finished_req_ids:
                del running[rid]
    assert not running


def test_batch_change_is_left_out_and_named_below_three_sequences():
    engine = make_engine(scheduler={"max_num_seqs": 2})
    plan = expanded(engine)
    assert not any(s.id.startswith(f"{STAGE}/batch-change-") for s in plan.steps)
    assert any("batch-change (max_num_seqs 2 never holds a batch of 3)" in g["why"]
               for g in plan.not_modelled if g["family"] == SKIPPED)


def test_deterministic():
    engine = load_engine("deepseek-v3-fp8-tp8-h200")
    first = [s.to_dict() for s in paths(engine)]
    assert first == [s.to_dict() for s in paths(engine)]


def test_what_the_engine_cannot_hold_is_left_out_and_named():
    engine = make_engine(scheduler={"max_num_seqs": 1})
    plan = expanded(engine)
    ids = {s.id for s in plan.steps if s.stage == STAGE}
    assert f"{STAGE}/greedy-prefill" in ids and f"{STAGE}/long-prefill-prefill" in ids
    assert not any(name in i for i in ids for name in ("n2-", "mixed-", "prefix-hit-"))
    (gap,) = [g for g in plan.not_modelled if g["family"] == SKIPPED]
    assert "n2 (" in gap["why"] and "mixed (" in gap["why"] and "prefix-hit (" in gap["why"]


def test_sliding_window_groups_skip_the_prefix_hit_and_chunked_prefill():
    engine = make_engine(kv_cache={"num_blocks": 1000, "groups": [{"block_size": 16},
                                                                  {"block_size": 16, "kind": "sliding_window"}]})
    plan = expanded(engine)
    ids = {s.id for s in plan.steps if s.stage == STAGE}
    assert f"{STAGE}/long-prefill-prefill" in ids
    assert not any("prefix-hit" in i or "chunked" in i for i in ids)
    assert all(len(r.block_ids) == 2 for s in plan.steps if s.stage == STAGE and isinstance(s, Prefill)
               for r in s.requests)


def test_small_max_model_len_and_kv_cache_skip_rather_than_overflow():
    engine = make_engine(model={"max_model_len": 40}, kv_cache={"num_blocks": 4, "groups": [{"block_size": 16}]})
    plan = expanded(engine)
    steps = [s for s in plan.steps if s.stage == STAGE]
    assert steps, "the lone modes fit"
    assert lints.run(plan, engine.facts, codes=["E105", "E106"])[0] == []
    (gap,) = [g for g in plan.not_modelled if g["family"] == SKIPPED]
    assert "long-prefill (" in gap["why"] and "max_model_len 40" in gap["why"]


def test_pooling_model_has_no_serving_paths():
    assert paths(make_engine(model={"runner": "pooling"})) == []


def test_parameters_shape_the_stage(tmp_path):
    steps = paths(make_engine(), stage_plan(tmp_path, prompt_len=33, long_prompt_len=100))
    assert prefill(steps, "greedy-prefill").total_num_scheduled_tokens == 33
    assert prefill(steps, "long-prefill-prefill").total_num_scheduled_tokens == 100


@pytest.mark.parametrize("params, message", [
    ({"prompt_len": 1}, r"plan\.yaml:\d+: .*prompt_len.*must be >= 2"),
    ({"long_prompt_len": 5}, r"plan\.yaml:\d+: .*long_prompt_len.*must be >= 17"),
    ({"long_prompt_len": 5000}, r"plan\.yaml:\d+: .*long_prompt_len.*more than max_num_batched_tokens 2048"),
    ({"prompt_len": "\"'x'\""}, r"plan\.yaml:\d+: .*prompt_len.*expected an integer"),
    ({"prompt_len": "x"}, r"plan\.yaml:\d+: .*prompt_len.*unknown name 'x'"),
])
def test_bad_parameters_are_one_line_errors(tmp_path, params, message):
    with pytest.raises(PlanError, match=message) as caught:
        paths(make_engine(), stage_plan(tmp_path, **params))
    assert "\n" not in str(caught.value)


def test_block_reuse_outside_a_prefix_hit_is_still_an_error():
    """E104 lets a prefix-cache hit share the donor's leading blocks, and nothing else."""
    engine = load_engine("llama-3.1-8b-fp8-h100")
    plan = expanded(engine)
    steps = list(plan.steps)
    i = next(i for i, s in enumerate(steps) if s.id == f"{STAGE}/prefix-hit-prefill-hit")
    hit = steps[i].requests[0]
    # The same blocks without num_computed_tokens: a new request on blocks another one holds.
    whole = len(steps[i].prompt_token_ids)
    steps[i] = steps[i].replace(requests=(hit._replace(num_computed_tokens=0, num_scheduled_tokens=whole),),
                                total_num_scheduled_tokens=whole)
    findings, _ = lints.run(plan._replace(steps=tuple(steps)), engine.facts, codes=["E104"])
    assert [f.step for f in findings] == [steps[i].id]
