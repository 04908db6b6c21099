"""The runner's kernel dispatch model (kernel_model.runner_kernels) against the runner.

Every launch the reference runner makes, keyed from its real arguments (dtype and
data_ptr alignment of each tensor, int classes), must be a key the `runner_kernels`
stage plans from the engine config alone. On CPU the runner runs under the Triton
interpreter (fp16); the GPU test in test_runner_gpu.py checks that Triton's own keys
agree (a compile-only warmup of every planned key leaves nothing to compile).
"""

from __future__ import annotations

import dataclasses

import pytest

from executor import precompile
from kernel_model import runner_kernels as rk
from planner.engine.config import load_engine
from planner.engine.facts import engine_facts
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.stages.runner_kernels import runner_facts

ENGINES = ("llama-3.1-8b-fp8-h100", "qwen3-30b-a3b-fp8-h100", "mixtral-8x7b-tp2-h100",
           "tests/fixtures/engines/runner-llama-3.1-8b-fp8-ngram1.yaml",
           "tests/fixtures/engines/runner-qwen3-30b-a3b-fp8-ngram2.yaml", "tests/fixtures/engines/runner-tiny.yaml")


def planned(plan: dict) -> set:
    return {k for s in plan.steps if s.kind == "kernel" for k in s.compile_keys}


def reference(name: str):
    engine = load_engine(name)
    return engine, expand(load_plan("reference"), engine)


@pytest.mark.parametrize("name", ENGINES)
def test_every_token_count_and_padded_decode_is_planned(name):
    """Exhaustive over the engine's range: eager batches of 1..max_tokens tokens, uniform decode
    batches of every request count padded to the captured sizes, every longest query."""
    engine, plan = reference(name)
    keys = planned(plan)
    facts = runner_facts(engine_facts(engine.data))
    scale = engine.data["model"]["attention"][0]["head_size"] ** -0.5
    sizes = sorted(next((s.uniform_decode_sizes for s in plan.steps if s.kind == "cudagraph"), []))
    for t in range(1, facts.max_tokens + 1):
        assert rk.prepare_inputs_launch(facts, t, t).key() in keys, t
    q = facts.decode_query_len
    for num_reqs in range(1, facts.max_num_seqs + 1):
        t = num_reqs * q
        padded = next((s for s in sizes if s >= t), None)
        if padded:
            assert rk.prepare_inputs_launch(facts, t, padded).key() in keys, (t, padded)
    for s in sizes:
        assert rk.prepare_inputs_launch(facts, s, s).key() in keys
    for longest in range(1, min(facts.max_num_batched_tokens, facts.max_model_len) + 1):
        assert rk.prefill_attention_launch(facts, longest, scale).key() in keys, longest
    assert rk.decode_attention_launch(facts, scale).key() in keys
    assert rk.write_kv_launch(facts).key() in keys


@pytest.mark.parametrize("name", ENGINES)
def test_steps_are_one_kernel_each_and_their_specs_give_their_keys(name):
    _, plan = reference(name)
    steps = [s for s in plan.steps if s.kind == "kernel"]
    assert [s.kernel for s in steps] == list(dict.fromkeys(s.kernel for s in steps))
    for s in steps:
        assert s.backend == "triton" and len(s.variants) >= 1 and s.exact
        assert len(set(s.compile_keys)) == len(s.compile_keys)
        for variant in s.variants:
            assert rk.Launch.from_spec(s.kernel, variant.first.spec()).key() == variant.key
    expected = {"_prepare_inputs_kernel", "_write_kv_kernel", "_paged_prefill_attention_kernel",
                "_paged_decode_attention_kernel", "_apply_bitmask_kernel", "_penalties_kernel",
                "_gumbel_sample_kernel"}
    speculative = load_engine(name).data["speculative"]["num_speculative_tokens"] > 0
    assert {s.kernel for s in steps} == expected | ({"_rejection_sample_kernel"} if speculative else set())


def test_llama_input_kernel_has_the_four_int_class_pairs():
    """(==1, ==1), (other, other), (%16, %16) eager or captured, and (other, %16): the first is
    a decode batch of 9 requests padded to the 16-token graph (47 padded to 48 is the same key,
    the one trace_proof found cold in bench/RESULTS.md, part C)."""
    _, plan = reference("llama-3.1-8b-fp8-h100")
    step = next(s for s in plan.steps if s.id == "runner_kernels/prepare_inputs")
    pairs = [tuple(v.first.args[7:9]) for v in step.variants]
    assert pairs == [(1, 1), (2, 2), (9, 16), (16, 16)]


def test_an_engine_the_runner_cannot_run_gets_no_runner_kernels():
    _, plan = reference("deepseek-v3-fp8-tp8-h200")  # MLA: head_size_v != head_size
    assert not [s for s in plan.steps if s.kind == "kernel"]


def test_enforce_eager_plans_no_padded_decode_pair():
    engine = load_engine("llama-3.1-8b-fp8-h100")
    facts = runner_facts(engine_facts(engine.data))
    assert rk.token_pairs(facts, []) == [(1, 1), (2, 2), (16, 16)]
    assert (2, 16) in rk.token_pairs(facts, [16, 48])


def test_the_v_view_is_unaligned_when_its_offset_is_not_a_multiple_of_16_bytes():
    facts = dataclasses.replace(runner_facts(engine_facts(load_engine("llama-3.1-8b-fp8-h100").data)),
                                num_heads=3, num_kv_heads=1, head_size=4)  # V starts 16 elements = 32 bytes in
    assert "~" not in rk.write_kv_launch(facts).key()
    facts = dataclasses.replace(facts, head_size=3)  # 12 elements = 24 bytes
    assert "bf16~" in rk.write_kv_launch(facts).key()


class FakeTensor:
    def __init__(self, dtype: str, ptr: int):
        self.dtype, self._ptr = f"torch.{dtype}", ptr

    def data_ptr(self) -> int:
        return self._ptr


def test_observed_key_reads_dtype_alignment_and_int_classes():
    meta = rk.vocab_meta(1000)
    args = (FakeTensor("float32", 64), FakeTensor("int32", 8), FakeTensor("int32", 4), 1000, 1000, 32)
    key = rk.observed_key("_apply_bitmask_kernel", args, meta)
    # bitmask (not exempt) is unaligned; bitmask_row is exempt from alignment specialization
    assert key == "runner.apply_bitmask[BLOCK=1024](fp32 i32~ i32 | vocab_size=i32 stride_l=i32 stride_b=i32D)"
    with pytest.raises(ValueError, match="3 arguments"):
        rk.observed_key("_apply_bitmask_kernel", args[:3], meta)
    with pytest.raises(TypeError, match="vocab_size must be an int"):
        rk.observed_key("_apply_bitmask_kernel", args[:3] + (1000.0, 1000, 32), meta)


def test_each_runner_key_is_one_precompile_job():
    _, plan = reference("llama-3.1-8b-fp8-h100")
    jobs = [j for j in precompile.compile_jobs(plan.steps) if j.kind == "kernel"]
    assert sorted(j.key for j in jobs) == sorted(planned(plan))
    for job in jobs:
        assert job.backend == "triton" and job.step.call_values() == job.values and len(job.values) == 1
        assert job.values[0].key() == job.key


# --- the runner itself (Triton interpreter on CPU, native on a GPU) ------------------------------------

def test_every_launch_of_the_runner_is_planned(kernel_device):
    torch = pytest.importorskip("torch")
    from executor.runner import ReferenceRunner
    from executor.runner import kernels
    from executor.runner.trace import TraceConfig, run_trace
    from test_reference_runner import tiny_engine

    for spec in (0, 1):
        engine = tiny_engine(spec=spec, fp8=False)  # unquantized: keeps the interpreter quick
        dtype = torch.bfloat16 if kernel_device == "cuda" else torch.float16
        runner = ReferenceRunner(engine, device=kernel_device, num_layers=1, dtype=dtype, use_cuda_graphs=False)
        facts = dataclasses.replace(runner_facts(engine), dtype=str(dtype).removeprefix("torch."))
        keys = {launch.key() for launch in rk.runner_variants(facts, [], engine.model.attention[0].head_size ** -0.5)}
        config = TraceConfig(num_steps=10, prompt_median=20, output_median=4, arrival_rate=1.0, initial_requests=3,
                             structured_fraction=0.5)
        with kernels.record_launches() as launched:
            run_trace(runner, engine, config)
        runner.close()
        names = {k.split("[")[0] for k in launched}
        assert {"runner.prepare_inputs", "runner.write_kv", "runner.prefill_attention",
                "runner.gumbel_sample"} <= names
        assert set(launched) <= keys, sorted(set(launched) - keys)


def test_every_runner_kernel_matches_its_one_declaration():
    """The runner's @triton.jit definitions are checked against kernel_model.runner_kernels when
    the module loads: every declared kernel is defined, and a definition that differs is refused."""
    pytest.importorskip("triton")
    from executor.runner import kernels

    assert set(kernels.LAUNCHABLE) == set(rk.KERNELS)

    def _write_kv_kernel(K, V, KCache, VCache, slot_mapping, stride_vt, stride_kt, ROW: "constexpr",
                         BLOCK: "constexpr"):
        pass

    with pytest.raises(TypeError, match="does not match its declaration"):
        kernels.check_signature(_write_kv_kernel, rk.KERNELS["_write_kv_kernel"])

    def _apply_bitmask_kernel(logits, bitmask, bitmask_row, vocab_size, stride_l, stride_b, BLOCK):
        pass  # BLOCK not annotated as a constexpr

    with pytest.raises(TypeError, match="does not match"):
        kernels.check_signature(_apply_bitmask_kernel, rk.KERNELS["_apply_bitmask_kernel"])
