"""synthetic_batches: vLLM's warmup_kernels formulas on their edge cases."""

import pytest
from factories import make_engine, plain_steps_of, write_plan

from planner.errors import PlanError
from planner.plan.stages.batches import decode_subsets, sampling_features

SPEC = {"speculative": {"method": "eagle", "num_speculative_tokens": 2}}


def batches(plan, engine):
    return {s["id"].split("/")[1]: s for s in plain_steps_of(plan, engine, stage="warmup_kernels")}


def test_seed_formulas_without_speculation():
    s = batches("vllm", make_engine())
    prefill, decode = s["prefill"], s["decode-1"]
    # prompt_len 2; num_reqs = min(256 seqs, 2048 // 2, (1000 - 1) // cdiv(3, 16)) = 256
    assert len(prefill["requests"]) == 256
    assert prefill["prompt_token_ids"] == [0, 1]
    assert prefill["total_num_scheduled_tokens"] == 512
    assert [r["block_ids"] for r in prefill["requests"][:3]] == [[[1]], [[2]], [[3]]]
    assert prefill["requests"][-1]["block_ids"] == [[256]]
    assert all(r["num_scheduled_tokens"] == 1 and r["num_spec_tokens"] == 0 for r in decode["requests"])
    assert all(r["new_block_ids"] is None for r in decode["requests"])  # 3 tokens fit one 16-block
    assert list(s) == ["prefill", "sample", "decode-1", "sample-2", "cleanup"]
    assert s["cleanup"]["finished_req_ids"][0] == "_warmup_0_" and len(s["cleanup"]["finished_req_ids"]) == 256


def test_grammar_bitmask_and_sampling_features():
    s = batches("vllm", make_engine())
    assert s["sample"]["grammar_bitmask"] == {"num_rows": 256, "width": 1000, "fill": -1}  # cdiv(32000, 32)
    assert s["sample-2"]["grammar_bitmask"] is None
    assert {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "logit_bias", "bad_words",
            "logprobs", "prompt_logprobs", "min_tokens"} <= set(s["sample"]["features"])
    assert "greedy" not in s["sample"]["features"]


def test_pr_40746_prompt_len_with_speculation():
    s = batches("vllm", make_engine(**SPEC))
    prefill, decode = s["prefill"], s["decode-1"]
    # prompt_len = 2 + k = 4 > decode_query_len 3: never classified as uniform decode.
    assert prefill["requests"][0]["num_scheduled_tokens"] == 4
    # num_reqs = min(256, 2048 // max(4, 3), 999 // cdiv(4 + 1 + 2, 16)) = 256
    assert len(prefill["requests"]) == 256
    assert {(r["num_scheduled_tokens"], r["num_spec_tokens"]) for r in decode["requests"]} == {(3, 2)}


def test_one_request():
    s = batches("vllm", make_engine(scheduler={"max_num_seqs": 1}))
    assert [r["req_id"] for r in s["prefill"]["requests"]] == ["_warmup_0_"]
    assert s["sample"]["grammar_bitmask"]["num_rows"] == 1


def test_tiny_kv_cache_keeps_one_request():
    # (num_blocks - 1) // blocks_per_req: 1 block left -> 1 request; none left -> still max(1, 0) = 1.
    assert len(batches("vllm", make_engine(kv_cache={"num_blocks": 2}))["prefill"]["requests"]) == 1
    tiny = batches("vllm", make_engine(kv_cache={"num_blocks": 1}))["prefill"]
    assert len(tiny["requests"]) == 1 and tiny["requests"][0]["block_ids"] == [[1]]
    assert len(batches("vllm", make_engine(kv_cache={"num_blocks": 11}))["prefill"]["requests"]) == 10


def test_several_kv_groups_with_different_block_sizes():
    engine = make_engine(kv_cache={"num_blocks": 100, "groups": [{"block_size": 16}, {"block_size": 2}]})
    s = batches("vllm", engine)
    # prefill 2 tokens: [1, 1] blocks; decode_len 3: [1, 2]; max_blocks_per_req = 3 -> 99 // 3 = 33 requests
    reqs = s["prefill"]["requests"]
    assert len(reqs) == 33
    assert reqs[0]["block_ids"] == [[1], [2]] and reqs[1]["block_ids"] == [[3], [4]]
    decode = s["decode-1"]["requests"]
    assert decode[0]["new_block_ids"] == [[], [67]] and decode[32]["new_block_ids"] == [[], [99]]
    assert s["prefill"]["num_common_prefix_blocks"] == [0, 0]


def test_pooling_model_prefills_only():
    s = batches("vllm", make_engine(model={"runner": "pooling"}))
    assert list(s) == ["prefill", "cleanup"]


def test_non_last_pipeline_rank_has_no_grammar_bitmask():
    s = batches("vllm", make_engine(parallel={"pipeline_parallel_size": 2, "pipeline_rank": 0}))
    assert s["sample"]["grammar_bitmask"] is None
    s = batches("vllm", make_engine(parallel={"pipeline_parallel_size": 2, "pipeline_rank": 1}))
    assert s["sample"]["grammar_bitmask"] is not None


def test_head_decode_subsets_and_lookahead():
    engine = make_engine(**SPEC, kv_cache={"groups": [{"block_size": 4}]})
    s = batches("vllm-head", engine)
    decodes = [v for k, v in s.items() if k.startswith("decode")]
    shapes = [[(r["req_id"], r["num_scheduled_tokens"]) for r in d["requests"]] for d in decodes]
    assert len(decodes) == 5
    assert shapes[1] == [("_warmup_0_", 3), ("_warmup_1_", 1)]
    assert shapes[2] == [("_warmup_0_", 1), ("_warmup_1_", 1)]
    assert shapes[3] == [("_warmup_0_", 3)] and shapes[4] == [("_warmup_0_", 1)]
    # prompt_len = q + 1 = 4; lookahead 2 (eagle): prefill holds cdiv(4 + 2, 4) = 2 blocks
    assert s["prefill"]["requests"][0]["block_ids"] == [[1, 2]]
    # decode_len = 4 + 5 * 3 = 19 -> cdiv(21, 4) = 6 blocks per request -> num_reqs = 999 // 6 = 166
    assert len(s["prefill"]["requests"]) == 166
    # request 0 after the first decode: 7 tokens computed + 2 lookahead -> cdiv(9, 4) = 3 blocks: 1 new
    first = decodes[0]["requests"][0]
    assert first["num_computed_tokens"] == 4 and len(first["new_block_ids"][0]) == 1


def test_head_without_speculation_has_three_decode_steps():
    s = batches("vllm-head", make_engine())
    assert [k for k in s if k.startswith("decode")] == ["decode-1", "decode-2", "decode-3"]
    assert s["prefill"]["requests"][0]["num_scheduled_tokens"] == 2


def test_head_pooling_counts_one_decode_step():
    s = batches("vllm-head", make_engine(model={"runner": "pooling"}, kv_cache={"num_blocks": 11,
                                                                              "groups": [{"block_size": 2}]}))
    # decode_len = 2 + 1 * 1 = 3 -> 2 blocks -> 10 // 2 = 5 requests
    assert len(s["prefill"]["requests"]) == 5 and list(s) == ["prefill", "cleanup"]


def test_cross_attention_and_mamba_groups_with_reservation():
    engine = make_engine(model={"max_encoder_len": 100}, kv_cache={"groups": [
        {"block_size": 16, "kind": "cross_attention"},
        {"block_size": 16, "kind": "mamba", "mamba_cache_mode": "align", "num_speculative_blocks": 1}]})
    prefill = batches("vllm-head", engine)["prefill"]
    assert [len(g) for g in prefill["requests"][0]["block_ids"]] == [7, 2]  # cdiv(100, 16); cdiv(2, 16) + 1


def test_block_ids_never_repeat_and_skip_null_block():
    engine = make_engine(**SPEC, kv_cache={"num_blocks": 5000, "groups": [{"block_size": 4}, {"block_size": 8}]})
    for plan in ("vllm", "vllm-head"):
        ids = []
        for s in batches(plan, engine).values():
            for r in s.get("requests", []):
                for group in r.get("block_ids") or r.get("new_block_ids") or []:
                    ids += group
        assert 0 not in ids and len(ids) == len(set(ids)) and max(ids) <= 4999


def test_plan_override_of_num_reqs(tmp_path):
    plan = write_plan(tmp_path, """
        name: small
        extends: vllm
        stages:
          - name: warmup_kernels
            with: {num_reqs: 3}
    """)
    assert len(batches(plan, make_engine())["prefill"]["requests"]) == 3


# The blocks a request holds per KV group, the greedy pass, which sampler paths a step's parameters
# exercise, the lists' limits (issue 44 item 7).

def test_a_mamba_group_reserves_lookahead_unless_its_cache_is_aligned():
    """vLLM's _reserved_block_count: a Mamba group (mode all) holds the token range plus the
    speculator's lookahead plus its speculative blocks; an aligned one the token range plus them."""
    engine = make_engine(**SPEC, kv_cache={"groups": [
        {"block_size": 4, "kind": "mamba", "mamba_cache_mode": "all", "num_speculative_blocks": 1},
        {"block_size": 4, "kind": "mamba", "mamba_cache_mode": "align", "num_speculative_blocks": 1}]})
    prefill = batches("vllm-head", engine)["prefill"]
    # prompt_len 4 (q + 1), lookahead 2: cdiv(4 + 2, 4) + 1 = 3; aligned: cdiv(4, 4) + 1 = 2
    assert [len(g) for g in prefill["requests"][0]["block_ids"]] == [3, 2]


def test_the_greedy_pass_samples_at_temperature_zero():
    """vLLM 0.33 under speculative decoding runs warmup_kernels again with SamplingParams(temperature=0)."""
    steps = batches("vllm-0.33", make_engine(**SPEC))
    greedy = [name for name in steps if name.startswith("greedy-")]
    assert greedy[0] == "greedy-prefill" and greedy[-1] == "greedy-cleanup"
    assert steps["greedy-sample"]["sampling_params"] == {"temperature": 0}
    assert steps["greedy-sample"]["features"] == ["greedy"]


@pytest.mark.parametrize("params, features", [
    ({}, []),
    ({"temperature": 0}, ["greedy"]),
    ({"temperature": 1.0}, []),
    ({"temperature": 0.5}, ["temperature"]),
    ({"top_k": 0}, []),
    ({"top_k": -1}, []),  # vLLM's "off"
    ({"top_k": 1}, ["top_k"]),
    ({"top_p": 1.0}, []),
    ({"top_p": 0.99}, ["top_p"]),
    ({"min_p": 0.0}, []),
    ({"min_p": 0.01}, ["min_p"]),
    ({"min_tokens": 0}, []),
    ({"min_tokens": 1}, ["min_tokens"]),
    ({"repetition_penalty": 1.0}, []),
    ({"frequency_penalty": 0.0, "presence_penalty": 0.0}, []),
    ({"frequency_penalty": -0.5, "presence_penalty": 0.5}, ["frequency_penalty", "presence_penalty"]),
    ({"logprobs": 0, "prompt_logprobs": 0}, ["logprobs", "prompt_logprobs"]),
])
def test_a_sampler_path_is_exercised_exactly_when_its_parameter_leaves_the_neutral_value(params, features):
    assert sampling_features(params) == features


@pytest.mark.parametrize("num_reqs, k, subsets", [
    (1, 0, [[(0, False)]]),
    (1, 2, [[(0, True)], [(0, False)]]),
    (1, 1, [[(0, True)], [(0, False)]]),  # one draft token is speculation too
    (2, 0, [[(0, False), (1, False)], [(0, False), (1, False)], [(0, False)]]),
    (2, 2, [[(0, True), (1, True)], [(0, True), (1, False)], [(0, False), (1, False)], [(0, True)], [(0, False)]]),
])
def test_decode_subsets_at_one_and_two_requests(num_reqs, k, subsets):
    """PR #49903's subsets: all requests; a spec / non-spec pair and a non-spec pair where there are two;
    one request with drafts and one without: none names a request the batch does not have."""
    assert decode_subsets("subsets", num_reqs, {"num_speculative_tokens": k}) == subsets


def test_a_batch_of_one_request_decodes_with_and_without_drafts():
    steps = batches("vllm-head", make_engine(**SPEC, scheduler={"max_num_seqs": 1}))
    decodes = [[(r["req_id"], r["num_spec_tokens"]) for r in s["requests"]] for name, s in steps.items()
               if name.startswith("decode")]
    assert decodes == [[("_warmup_0_", 2)], [("_warmup_0_", 0)]]


def test_a_greedy_pass_that_is_not_true_or_false_is_refused_at_its_line(tmp_path):
    plan = write_plan(tmp_path, """
        name: greedy-three
        extends: vllm-0.33
        stages:
          - name: warmup_kernels
            with: {greedy_pass: 3}
    """)
    with pytest.raises(PlanError, match=r"greedy_pass.*expected true or false, got 3"):
        batches(plan, make_engine(**SPEC))


def overriding(tmp_path, **params):
    body = ", ".join(f"{k}: {v}" for k, v in params.items())
    return write_plan(tmp_path, f"""
        name: absurd
        extends: vllm
        stages:
          - name: warmup_kernels
            with: {{{body}}}
    """)


def test_a_prompt_longer_than_a_list_may_be_is_refused_before_it_is_built(tmp_path):
    with pytest.raises(PlanError, match=r"prompt_len.*each prompt.* 2,?000,?000 entries"):
        batches(overriding(tmp_path, prompt_len=2_000_000, num_reqs=1), make_engine())


def test_block_ids_for_more_than_a_list_may_hold_are_refused(tmp_path):
    """3 requests of 8,000,000 tokens in blocks of 16: 1,500,000 block ids, more than 1 << 20."""
    with pytest.raises(PlanError, match=r"decode_len.*the block ids of the batch.* 1,?500,?000 entries"):
        batches(overriding(tmp_path, decode_len=8_000_000, num_reqs=3), make_engine())
