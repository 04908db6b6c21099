"""The serving trace: steps within the engine's limits, in the plan's step format, seeded;
and the reference plan covers the integer specializations the trace reaches."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from executor.runner.reference import padded_size
from executor.runner.trace import TraceConfig, TraceScheduler, run_trace
from kernel_model import runner_kernels
from planner.engine.config import load_engine
from planner.engine.facts import engine_facts
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.stages.runner_kernels import runner_facts
from planner.plan.steps import CachedRequest, NewRequest, thaw
from planner.schema import load_schema

TINY = "tests/fixtures/engines/runner-tiny.yaml"
BENCH_ENGINES = ("llama-3.1-8b-fp8-h100", "qwen3-30b-a3b-fp8-h100",
                 "tests/fixtures/engines/runner-llama-3.1-8b-fp8-ngram1.yaml",
                 "tests/fixtures/engines/runner-qwen3-30b-a3b-fp8-ngram2.yaml")


def engine_data(name: str, **overrides) -> dict:
    data = copy.deepcopy(load_engine(name).data)
    for section, values in overrides.items():
        data[section].update(values)
    return data


@pytest.mark.parametrize("name", BENCH_ENGINES)
def test_steps_stay_within_the_engine_limits(name):
    engine = load_engine(name).data
    sched, kv = engine["scheduler"], engine["kv_cache"]
    page, k = kv["groups"][0]["block_size"], engine["speculative"]["num_speculative_tokens"]
    held: dict[str, list[int]] = {}
    computed: dict[str, int] = {}
    finished: set[str] = set()
    kinds = set()
    for execute, sample in TraceScheduler(engine_facts(engine), TraceConfig(num_steps=300, seed=1)):
        kinds.add(execute.kind)
        for req_id in execute.finished_req_ids:
            finished.add(req_id)
            del held[req_id]
        reqs = execute.requests
        assert 0 < len(reqs) <= sched["max_num_seqs"]
        total = sum(r.num_scheduled_tokens for r in reqs)
        assert total == execute.total_num_scheduled_tokens <= sched["max_num_batched_tokens"]
        for r in reqs:
            assert r.req_id not in finished
            if isinstance(r, NewRequest):
                assert r.req_id not in held and r.num_scheduled_tokens <= len(r.prompt_token_ids)
                held[r.req_id], start = list(r.block_ids[0]), 0
            else:
                assert r.num_computed_tokens >= computed[r.req_id]  # accepted drafts only add
                assert r.num_spec_tokens <= k and r.num_scheduled_tokens >= 1 + r.num_spec_tokens or \
                    r.num_spec_tokens == 0
                held[r.req_id] += (r.new_block_ids or [[]])[0]
                start = r.num_computed_tokens
            computed[r.req_id] = start
            assert len(held[r.req_id]) * page >= start + r.num_scheduled_tokens
        live = [b for blocks in held.values() for b in blocks]
        assert len(live) == len(set(live)) and all(0 < b < kv["num_blocks"] for b in live)
        if sample.grammar_bitmask:
            assert sample.grammar_bitmask.num_rows == len(sample.grammar_bitmask.req_ids)
    assert kinds == {"prefill", "decode", "mixed"} and finished


def test_plan_format_and_seed():
    engine = load_engine("llama-3.1-8b-fp8-h100").facts
    steps = list(TraceScheduler(engine, TraceConfig(num_steps=20, seed=7)))
    assert steps == list(TraceScheduler(engine, TraceConfig(num_steps=20, seed=7)))
    assert steps != list(TraceScheduler(engine, TraceConfig(num_steps=20, seed=8)))
    defs = load_schema("expanded-plan")["$defs"]
    validator = jsonschema.Draft202012Validator({"$ref": "#/$defs/step", "$defs": defs})
    first = steps[0][0]
    assert first.kind == "prefill" and first.total_num_scheduled_tokens == 8192  # the burst, chunked
    # Apart from the trace's extensions (per-request prompt and sampling params, finished ids in
    # any step, new and cached entries in one step), steps validate as the plan's do.
    items = {kind: jsonschema.Draft202012Validator({**defs[kind]["properties"]["requests"]["items"], "$defs": defs})
             for kind in ("prefill", "decode")}
    for execute, sample in steps:
        requests = [{k: v for k, v in thaw(r).items() if k not in ("prompt_token_ids", "sampling_params")}
                    for r in execute.requests]
        for r, typed in zip(requests, execute.requests):
            items["prefill" if isinstance(typed, NewRequest) else "decode"].validate(r)
        if execute.kind != "mixed":
            plain = {"id": execute.id, "stage": execute.stage, "kind": execute.kind, "requests": requests,
                     "total_num_scheduled_tokens": execute.total_num_scheduled_tokens,
                     "num_common_prefix_blocks": list(execute.num_common_prefix_blocks)}
            validator.validate({**plain, "prompt_token_ids": [0]} if execute.kind == "prefill" else plain)
        sample = sample.to_dict()
        if sample["grammar_bitmask"]:  # the trace names the request of each row: an extension
            del sample["grammar_bitmask"]["req_ids"]
        validator.validate(sample)


def test_speculative_decodes_carry_drafts():
    engine = load_engine("tests/fixtures/engines/runner-qwen3-30b-a3b-fp8-ngram2.yaml").facts
    spec = [r.num_spec_tokens for e, _ in TraceScheduler(engine, TraceConfig(num_steps=60))
            for r in e.requests if isinstance(r, CachedRequest) and r.num_scheduled_tokens > 1
            and r.num_spec_tokens]
    assert spec and set(spec) == {2}


def launch_keys(steps, engine, graph_sizes: list[int]) -> set:
    """The runner-kernel compile keys that vary from step to step, by the runner's dispatch
    model (kernel_model.runner_kernels): prepare_inputs at (num_tokens, padded) and the
    prefill attention's query tile (a constexpr chosen by the longest query)."""
    facts = runner_facts(engine.facts)
    scale = engine.facts.model.attention[0].head_size ** -0.5
    q, keys = facts.decode_query_len, set()
    for s in steps:
        if s.kind == "cudagraph":
            keys |= {runner_kernels.prepare_inputs_launch(facts, n, n).key() for n in s.uniform_decode_sizes}
        elif getattr(s, "requests", None):
            tokens = [r.num_scheduled_tokens for r in s.requests]
            n, uniform = sum(tokens), all(t == q for t in tokens)
            padded = padded_size(graph_sizes, n) if uniform else None
            keys.add(runner_kernels.prepare_inputs_launch(facts, n, padded or n).key())
            if not uniform:
                keys.add(runner_kernels.prefill_attention_launch(facts, max(tokens), scale).key())
    return keys


def planned_runner_keys(plan) -> set:
    return {k for s in plan.steps if s.kind == "kernel" for k in s.compile_keys}


@pytest.mark.parametrize("name", BENCH_ENGINES)
def test_reference_plan_covers_the_trace_specializations(name):
    """What the GPU run shows (bench/RESULTS.md, part C), predicted on CPU: every key the trace
    reaches is planned by the runner_kernels stage; without that stage the synthetic batches
    alone leave the padded decode variant of the input kernel and the 64-row attention tile cold
    (which the reference plan's extra batch stages covered before that stage existed)."""
    engine = load_engine(name)
    plan = expand(load_plan("plans/reference.yaml"), engine)
    graph_sizes = sorted(next(s for s in plan.steps if s.kind == "cudagraph").uniform_decode_sizes)
    trace = [e for e, _ in TraceScheduler(engine.facts, TraceConfig(num_steps=500))]
    reached = launch_keys(trace, engine, graph_sizes)
    assert reached <= planned_runner_keys(plan)
    cold = reached - launch_keys(plan.steps, engine, graph_sizes)
    assert {k.split("[")[0] for k in cold} <= {"runner.prepare_inputs", "runner.prefill_attention"}
    assert any("BLOCK_M=64" in k for k in cold)


class RecordingRunner:
    def __init__(self):
        self.calls = []

    def execute_model(self, step):
        self.calls.append(("execute", step.kind))

    def sample_tokens(self, step):
        self.calls.append(("sample", step.kind))


def test_run_trace_drives_any_runner():
    engine = engine_data(TINY)
    runner = RecordingRunner()
    seen = []
    out = run_trace(runner, engine_facts(engine), TraceConfig(num_steps=5, prompt_median=8, output_median=4),
                    on_step=lambda i, step, lat: seen.append(i))
    assert seen == list(range(5)) and len(out["latency_s"]) == 5
    assert runner.calls[:2] == [("execute", "prefill"), ("sample", "sample")]


def test_trace_on_the_reference_runner(kernel_device):
    torch = pytest.importorskip("torch")
    from executor.runner import ReferenceRunner

    engine = engine_data(TINY, speculative={"method": "ngram", "num_speculative_tokens": 1})
    for layer in engine["model"]["linear"]:
        layer["quant"] = {"method": "none"}  # fp16 matmuls: keeps the interpreter quick
    runner = ReferenceRunner(engine_facts(engine), device=kernel_device, num_layers=1,
                             dtype=torch.bfloat16 if kernel_device == "cuda" else torch.float16)
    config = TraceConfig(num_steps=12, prompt_median=10, output_median=5, arrival_rate=1.0, initial_requests=4,
                         structured_fraction=0.5, prompt_logprobs_fraction=0.3)
    out = run_trace(runner, engine_facts(engine), config)
    assert set(out["kinds"]) >= {"prefill", "mixed"} and runner.stats["samples"] == 12
    assert len(runner.requests) <= engine["scheduler"]["max_num_seqs"]


def test_pre_40746_variant_leaves_the_prefill_path_cold():
    """2-token prompts with 1 draft token: every synthetic batch is uniform decode, so no variant
    of the prefill attention is warmed, and the trace's prefills (long prompts: the 64-row tile)
    compile it; `warmup check` reports E101, and nothing for the built-in plan."""
    from planner.review import lints

    engine = load_engine("tests/fixtures/engines/runner-llama-3.1-8b-fp8-ngram1.yaml")
    plan = expand(load_plan("tests/fixtures/plans/reference-pre-40746.yaml"), engine)
    graph_sizes = sorted(next(s for s in plan.steps if s.kind == "cudagraph").uniform_decode_sizes)
    trace = [e for e, _ in TraceScheduler(engine.facts, TraceConfig(num_steps=200))]
    assert not planned_runner_keys(plan), "the fixture plans no runner kernels, as vLLM before #40746"
    missing = launch_keys(trace, engine, graph_sizes) - launch_keys(plan.steps, engine, graph_sizes)
    attention = {k for k in missing if k.startswith("runner.prefill_attention")}
    assert len(attention) == 1 and "BLOCK_M=64" in attention.pop()
    assert not any("prefill_attention" in k for k in launch_keys(plan.steps, engine, graph_sizes))
    findings, _ = lints.run(plan, engine.facts)
    assert {f.lint.code for f in findings} == {"E101"}
    builtin = expand(load_plan("plans/reference.yaml"), engine)
    assert not lints.run(builtin, engine.facts)[0]
