"""GPU-only checks of the reference runner: CUDA-graph decode against eager and the dense
reference, and the engine-sized model (bf16, block-FP8 GEMMs, MoE)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from executor.runner import ReferenceRunner  # noqa: E402
from planner.engine.config import load_engine  # noqa: E402
from planner.engine.facts import engine_facts  # noqa: E402
from planner.plan.stages.runner_kernels import runner_facts  # noqa: E402
from planner.plan.steps import CudaGraph  # noqa: E402
from runner_refs import forward, rel_err  # noqa: E402
from test_reference_runner import SAMPLE, cached, new, step, tiny_engine, tol  # noqa: E402

pytestmark = pytest.mark.gpu  # skipped without CUDA by tests/conftest.py


@pytest.mark.parametrize("spec", [0, 2])
def test_graph_replay_matches_eager_and_reference(spec):
    q = 1 + spec
    runners = [ReferenceRunner(tiny_engine(spec=spec, fp8=False), device="cuda", seed=1, use_cuda_graphs=graphs)
               for graphs in (True, False)]
    graphed, eager = runners
    graphed.capture_cudagraphs(CudaGraph("g/capture", "g", mode="FULL", sizes=(),
                                         uniform_decode_sizes=(8 * q, 4 * q, 2 * q, q), decode_query_len=q,
                                         num_warmups=1))
    assert graphed.graphs.sizes == [q, 2 * q, 4 * q, 8 * q]
    prompts = {"a": [1, 2, 3, 4, 5], "b": [9, 8, 7], "c": [4, 4, 4, 4, 4, 4, 4]}
    blocks = {"a": [3, 4, 5], "b": [6, 7, 8], "c": [9, 10, 11, 12]}
    for r in runners:
        r.execute_model(step(*(new(k, p, len(p), blocks[k]) for k, p in prompts.items())))
        r.sample_tokens(SAMPLE)
    for round_ in range(2):  # three requests pad to the 4-request graph
        hidden = []
        for r in runners:
            r.execute_model(step(*(cached(r, k, q, spec=spec) for k in prompts)))
            hidden.append(r._pending[1].clone())
            batch = r._pending[0]
            for i, req in enumerate(batch.reqs):
                known = batch.num_computed[i] + batch.num_scheduled[i]
                ref = forward(r.model, (req.token_ids + batch.drafts[i])[:known])
                rows = hidden[-1][i * q:(i + 1) * q]
                assert rel_err(rows, ref[known - q:known]) < tol("cuda", False)
            r.sample_tokens(SAMPLE)
        if round_ == 0:  # same inputs: graph replay and eager agree (later, sampled tokens may differ)
            assert rel_err(hidden[0], hidden[1]) < 1e-2
    assert graphed.stats["decode_graph"] == 2 and graphed.graphs.replays == 2
    assert eager.stats["decode_eager"] == 2


@pytest.mark.parametrize("engine", ["llama-3.1-8b-fp8-h100", "qwen3-30b-a3b-fp8-h100"])
def test_engine_sized_runner_runs_a_mixed_and_a_decode_step(engine):
    data = load_engine(engine).data
    runner = ReferenceRunner(engine_facts(data), device="cuda", num_layers=1)
    assert runner.cfg.hidden_size == data["model"]["hidden_size"]
    runner.execute_model(step(new("a", list(range(300)), 300, list(range(1, 20))), new("b", [5, 6], 2, [40])))
    runner.sample_tokens(SAMPLE)
    runner.execute_model(step(cached(runner, "a", 1), cached(runner, "b", 1)))
    hidden = runner._pending[1]
    assert hidden.shape == (2, data["model"]["hidden_size"]) and torch.isfinite(hidden.float()).all()
    out = runner.sample_tokens(SAMPLE)
    assert set(out["tokens"]) == {"a", "b"}
    runner.close()


def _compiled_variants() -> int:
    """Variants in the runner kernels' in-process caches (every device)."""
    from executor.runner import kernels

    total = 0
    for lazy in kernels.LAUNCHABLE.values():
        for cache in lazy.get().device_caches.values():
            total += len(cache[0])
    return total


@pytest.mark.parametrize("spec", [0, 1])
def test_compile_only_warmup_of_the_planned_keys_leaves_the_runner_nothing_to_compile(spec):
    """Triton's own keys agree with kernel_model.runner_kernels: after JITFunction.warmup of
    every planned variant (stand-in tensors, no launch), CUDA-graph captures, batches of every kind
    and a serving trace add no variant to any runner kernel's cache."""
    from executor.runner import kernels
    from executor.runner.trace import TraceConfig, run_trace
    from kernel_model import runner_kernels as rk
    from planner.plan.authored import load_plan
    from planner.plan.expand import expand

    engine = tiny_engine(spec=spec, fp8=False)
    plan = expand(load_plan("reference"), load_engine("tests/fixtures/engines/runner-tiny.yaml"))
    sizes = sorted(next(s for s in plan.steps if s.kind == "cudagraph").uniform_decode_sizes)
    facts = runner_facts(engine)
    launches = rk.runner_variants(facts, [s for s in sizes if s % facts.decode_query_len == 0],
                                  engine.model.attention[0].head_size ** -0.5)
    for launch in launches:
        kernels.compile_launch(launch)
    before = _compiled_variants()
    assert before >= len(launches)
    runner = ReferenceRunner(engine, device="cuda", num_layers=1)
    runner.capture_cudagraphs(CudaGraph("g/capture", "g", mode="FULL", sizes=(),
                                        uniform_decode_sizes=tuple(sizes[::-1]),
                                        decode_query_len=facts.decode_query_len, num_warmups=1))
    config = TraceConfig(num_steps=60, prompt_median=20, output_median=6, arrival_rate=1.0, initial_requests=6,
                         structured_fraction=0.5)
    with kernels.record_launches() as launched:
        run_trace(runner, engine, config)
    runner.close()
    assert {k.split("[")[0] for k in launched} >= {"runner.prepare_inputs", "runner.prefill_attention",
                                                  "runner.apply_bitmask", "runner.gumbel_sample"}
    assert _compiled_variants() == before, "a runner launch compiled a variant the plan did not warm"
