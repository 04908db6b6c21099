"""runner_kernels: one compile-only launch per compile key of the reference runner's kernels.

The runner's own Triton kernels (inputs, KV write, paged attention, sampler) compile
on first use like the GEMMs. kernel_model.runner_kernels enumerates every key the
runner can launch for the engine: eager batches, CUDA-graph captures and decode
batches padded to the captured sizes, which this stage reads as the cudagraph_capture
stage computes them (same parameters, same defaults). Each step is one kernel with
its variants (each compile key with the launch that reaches it); the executor
compiles a variant without running it, so precompile workers can build all of them
in parallel before the runner exists. Engines the runner cannot run (MLA) get none.
"""

from __future__ import annotations

from kernel_model import runner_kernels as dispatch

from ...engine.facts import EngineFacts
from ..steps import Kernel, Variant
from .cudagraph import graph_sizes
from .scope import Scope


def runner_facts(engine: EngineFacts) -> dispatch.RunnerFacts | None:
    """The numbers the reference runner's kernels are keyed by, from the engine's first attention
    layer; None where the runner cannot run the engine (no attention layer, no hidden size, MLA)."""
    model = engine.model
    if not model.attention or not model.hidden_size or model.attention[0].is_mla:
        return None
    attn = model.attention[0]
    return dispatch.RunnerFacts(
        dtype=model.dtype, num_heads=attn.num_heads, num_kv_heads=attn.num_kv_heads, head_size=attn.head_size,
        page=engine.kv_cache.groups[attn.kv_cache_group].block_size, vocab_size=model.vocab_size,
        max_num_seqs=engine.scheduler.max_num_seqs, max_num_batched_tokens=engine.scheduler.max_num_batched_tokens,
        max_model_len=model.max_model_len, num_spec=engine.speculative.num_speculative_tokens)


def expand(scope: Scope) -> list:
    facts = runner_facts(scope.engine.facts)
    if facts is None:
        return []
    _, _, decode_sizes = graph_sizes(scope)
    by_kernel: dict[str, list] = {}
    for launch in dispatch.runner_variants(facts, decode_sizes, scope.engine.facts.model.attention[0].softmax_scale):
        by_kernel.setdefault(launch.kernel, []).append(launch)
    return [scope.new(Kernel, dispatch.short_name(kernel), backend="triton", kernel=kernel,
                      variants=tuple(Variant(launch.key(), launch) for launch in launches))
            for kernel, launches in by_kernel.items()]
