"""serving_paths' steps as vLLM 0.25.0 receives them, on CPU (tests/integration/vllm_plugin/serving_paths_probe.py):
vLLM's own classes and functions say which sampler and attention paths each step takes.

Like the plugin tests: WARMUP_VLLM_ENVS (tests/integration/vllm_parity/setup_vllm.sh) names the releases;
without 0.25 these tests skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from planner.plan.stages.serving_paths import decode_threshold
from tests.integration.vllm_parity.test_parity import RELEASES

HERE = os.path.dirname(os.path.abspath(__file__))
PLAN, ENGINE = "vllm-0.25-plugin", "deepseek-v3-fp8-tp8-h200"  # an MLA engine
# The skip reasons tests/skip_policy.py allows.
pytestmark = pytest.mark.skipif("0.25" not in RELEASES, reason=(
    "WARMUP_VLLM_ENVS has no 0.25 release" if RELEASES else "WARMUP_VLLM_ENVS not set") + " (tests/integration/vllm_parity/setup_vllm.sh)")


FACTS_V2: list = []  # how many all_token_ids the same steps send to Model Runner V2


@pytest.fixture(scope="module")
def facts():
    env = {**os.environ, "PYTHONPATH": RELEASES.get("0.25", ""), "VLLM_LOGGING_LEVEL": "ERROR"}
    env.pop("WARMUP_PLAN", None)
    run = subprocess.run([sys.executable, os.path.join(HERE, "serving_paths_probe.py"), PLAN, ENGINE],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    FACTS_V2.append(out["v2_all_token_ids"])
    return out["thresholds"], {s["id"].split("/", 1)[1]: s for s in out["steps"]}


def test_the_planners_decode_threshold_is_the_largest_vllm_declares(facts):
    thresholds, _ = facts
    assert max(thresholds.values()) == decode_threshold(0) == thresholds["FlashAttnMLAMetadataBuilder"]


def test_sampling_modes_reach_vllm_as_its_sampling_types(facts):
    _, steps = facts
    kinds = {name: [r["sampling_type"] for r in steps[f"{name}-prefill"]["new"]]
             for name in ("greedy", "temperature", "top-k", "seed", "mixed", "n2")}
    assert kinds == {"greedy": ["GREEDY"], "temperature": ["RANDOM"], "top-k": ["RANDOM"],
                     "seed": ["RANDOM_SEED"], "mixed": ["GREEDY", "RANDOM"], "n2": ["RANDOM", "RANDOM"]}
    assert all(r["n"] == 1 for r in steps["n2-prefill"]["new"])  # the children of n = 2
    assert steps["logprobs-prefill"]["new"][0]["logprobs"] == 5
    assert steps["prompt-logprobs-prefill"]["new"][0]["prompt_logprobs"] == 5
    assert all(steps[f"{m}-decode"]["split"]["num_decodes"] == 1 for m in ("greedy", "seed", "penalties"))


def test_long_chunked_and_prefix_hit_take_mlas_prefill_and_context_paths(facts):
    _, steps = facts
    assert steps["long-prefill-prefill"]["split"] == {"num_decodes": 0, "num_prefills": 1, "prefills_with_context": []}
    first = steps["chunked-prefill-prefill"]["new"][0]
    assert first["num_computed_tokens"] == 0 and steps["chunked-prefill-prefill"]["num_scheduled_tokens"][
        first["req_id"]] < first["prefill_len"]  # a partial prefill: Model Runner V2's is_prefilling
    assert steps["chunked-prefill-prefill-2"]["split"]["prefills_with_context"] == [first["req_id"]]
    assert steps["chunked-prefill-prefill-2"]["cached"][0]["num_output_tokens"] == 0
    donor = steps["prefix-hit-prefill"]["new"][0]
    hit = steps["prefix-hit-prefill-hit"]["new"][0]
    assert hit["num_computed_tokens"] > 0 and hit["prefill_len"] == hit["prompt_len"]
    assert steps["prefix-hit-prefill-hit"]["split"]["prefills_with_context"] == [hit["req_id"]]
    shared = hit["num_computed_tokens"] // 64  # the engine's block size
    assert hit["block_ids"][0][:shared] == donor["block_ids"][0][:shared]


def test_a_running_request_the_previous_step_left_out_comes_with_its_tokens(facts):
    """The V1 runner re-adds such a request from CachedRequestData.all_token_ids (with async
    scheduling it reads them: on the H200 the prefix hit's decode failed with a KeyError without)."""
    _, steps = facts
    donor, hit = steps["prefix-hit-decode"]["cached"]
    assert donor["req_id"].endswith("donor_") and donor["all_token_ids"] == 529 + 1  # prompt and one output
    assert hit["all_token_ids"] is None, "the hit was scheduled in the step before"
    assert all(r["all_token_ids"] is None for r in steps["greedy-decode"]["cached"])
    assert FACTS_V2 == [0], "Model Runner V2 is sent none"


def test_a_batch_that_shrinks_and_grows_reaches_vllm_with_each_running_requests_tokens(facts):
    """batch-change: requests left out of a step wait, and come back re-added from their tokens (the
    prompt and one output per computed token past it); those the step before scheduled are sent
    none (they are still in the runner's persistent batch)."""
    _, steps = facts
    names = ("prefill", "decode-3", "decode-2", "decode-1", "decode-1-again", "decode-2-from-1", "decode")
    assert [len(steps[f"batch-change-{n}"]["num_scheduled_tokens"]) for n in names] == [3, 3, 2, 1, 1, 2, 3]
    sent = {n: {r["req_id"]: r["all_token_ids"] for r in steps[f"batch-change-{n}"]["cached"]} for n in names[1:]}
    assert all(v is None for n in names[1:5] for v in sent[n].values())
    back = {n: {rid: v for rid, v in sent[n].items() if v is not None} for n in ("decode-2-from-1", "decode")}
    assert list(back["decode-2-from-1"]) == ["_warmup_change_1_"] and list(back["decode"]) == ["_warmup_change_2_"]
    computed = {r["req_id"]: r["num_computed_tokens"]
                for n in ("decode-2-from-1", "decode") for r in steps[f"batch-change-{n}"]["cached"]
                if r["all_token_ids"] is not None}
    assert all(back[n][rid] == computed[rid] + 1 for n in back for rid in back[n])
