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

from ..steps import Kernel, Variant
from .cudagraph import graph_sizes
from .scope import Scope


def expand(scope: Scope) -> list:
    facts = dispatch.RunnerFacts.from_engine(scope.engine.data)
    if facts is None:
        return []
    _, _, decode_sizes = graph_sizes(scope)
    attn = scope.engine.data["model"]["attention"][0]
    scale = attn.get("scale", attn["head_size"] ** -0.5)
    by_kernel: dict[str, list] = {}
    for launch in dispatch.runner_variants(facts, decode_sizes, scale):
        by_kernel.setdefault(launch.kernel, []).append(launch)
    return [scope.new(Kernel, dispatch.short_name(kernel), backend="triton", kernel=kernel,
                      variants=tuple(Variant(launch.key(), launch) for launch in launches))
            for kernel, launches in by_kernel.items()]
