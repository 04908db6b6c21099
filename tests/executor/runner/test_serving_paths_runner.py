"""The serving_paths stage's steps on the reference runner (tests/fixtures/engines/runner-tiny.yaml):
a prefix-cache hit reads the KV its donor computed, a chunked prefill continues from its first
chunk, and every request the stage adds is gone at its end."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from factories import write_plan  # noqa: E402
from planner.engine.config import load_engine  # noqa: E402
from planner.plan.authored import load_plan  # noqa: E402
from planner.plan.expand import expand  # noqa: E402
from planner.plan.steps import Sample  # noqa: E402
from test_reference_runner import TINY, check_against_reference, make_runner, tol  # noqa: E402

# Pages of 4 tokens: a hit of 20 tokens is 5 whole blocks; every sequence fits max_model_len 64.
PLAN = """\
name: serving-tiny
vllm_release: "0.25.0"
stages:
  - name: serving_paths
    kind: serving_paths
    with: {prompt_len: 5, long_prompt_len: 20}
"""


@pytest.fixture
def steps(tmp_path):
    plan = expand(load_plan(write_plan(tmp_path, PLAN)), load_engine(TINY))
    assert not plan.not_modelled, plan.not_modelled  # every sequence fits the tiny engine
    return plan.steps


def test_every_serving_path_runs_and_leaves_nothing_behind(kernel_device, steps):
    runner = make_runner(kernel_device)
    sampled = {}
    with runner.warmup_scope():
        for s in steps:
            out = getattr(runner, s.runner_method)(s)
            if isinstance(s, Sample) and out:
                sampled.update(out["tokens"])
    assert not runner.requests and len(runner.free_slots) == runner.max_num_seqs
    # Every request produced a token, the n = 2 children each their own.
    added = {r.req_id for s in steps if s.kind == "prefill" for r in s.requests}
    assert set(sampled) == added and {"0__warmup_n2_", "1__warmup_n2_"} <= added


def run_until(runner, steps, step_id: str, start: int = 0) -> int:
    """Run steps[start:] up to and including `step_id` (an execute step, its forward left pending);
    the index of the step after it."""
    for i in range(start, len(steps)):
        getattr(runner, steps[i].runner_method)(steps[i])
        if steps[i].id == step_id:
            return i + 1
    raise AssertionError(f"no step {step_id}")


def test_prefix_hit_reads_the_donors_cached_kv(kernel_device, steps):
    runner = make_runner(kernel_device, fp8=False)
    run_until(runner, steps, "serving_paths/prefix-hit-prefill-hit")
    batch, _ = runner._pending
    (req,) = batch.reqs
    assert batch.num_computed == [20] and batch.num_scheduled == [20]
    # Its hidden states equal a dense forward of its whole prompt, though it computed only the
    # last 20 tokens: the first 20 came from the donor's blocks.
    check_against_reference(runner, tol(kernel_device, False))
    assert req.block_ids[0][:5] == runner.requests["_warmup_prefix_donor_"].block_ids[0][:5]


def test_chunked_prefill_samples_only_after_its_last_chunk(kernel_device, steps):
    runner = make_runner(kernel_device, fp8=False)
    after = run_until(runner, steps, "serving_paths/chunked-prefill-prefill")
    assert runner._pending[0].sampled == []  # a partial prefill samples nothing
    run_until(runner, steps, "serving_paths/chunked-prefill-prefill-2", start=after)
    batch, _ = runner._pending
    assert batch.num_computed == [5] and batch.num_scheduled == [20] and batch.sampled == [0]
    check_against_reference(runner, tol(kernel_device, False))
