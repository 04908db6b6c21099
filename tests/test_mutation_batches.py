"""Issue 44 item 7: the synthetic batches (planner/plan/stages/batches.py), where the mutation pass found
no test that would notice a planted bug: the blocks a request holds per KV group, the greedy pass, which
sampler paths a step's parameters exercise."""

from __future__ import annotations

import pytest
from factories import make_engine, write_plan
from test_batches import SPEC, batches

from planner.errors import PlanError
from planner.plan.stages.batches import decode_subsets, sampling_features


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
