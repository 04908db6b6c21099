"""cudagraph_capture: the CUDA-graph sizes vLLM captures.

As vLLM @ 017e9f4448b7 computes them: `VllmConfig._set_cudagraph_sizes` (vllm/config/vllm.py),
`CompilationConfig.resolve_cudagraph_mode_and_sizes` (vllm/config/compilation.py; V1's
`adjust_cudagraph_sizes_for_spec_decode`) and V2's `CudaGraphManager._init_candidates`
(vllm/v1/worker/gpu/cudagraph_utils.py).

Sizes are listed in capture order, largest first, as graphs share one memory pool
that the largest graph sizes. FULL uniform-decode graphs exist only at token
counts that are whole multiples of decode_query_len.
"""

from __future__ import annotations

from ..expr import round_up
from ..steps import CudaGraph
from .scope import Scope

MIXED_MODES = ("PIECEWISE", "FULL", "FULL_AND_PIECEWISE")
DECODE_FULL_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


def default_sizes(max_size: int, max_num_tokens: int, performance_mode: str) -> list[int]:
    """VllmConfig._set_cudagraph_sizes when the user gives no sizes."""
    if performance_mode == "interactivity":
        sizes = list(range(1, min(max_size, 32) + 1))
    else:
        sizes = [i for i in (1, 2, 4) if i <= max_size]
    if max_size >= 8:
        sizes += range(8, min(max_size + 1, 256), 8)
    if max_size >= 256:
        sizes += range(256, max_size + 1, 16)
    if max_num_tokens <= max_size and max_num_tokens not in sizes:
        sizes.append(max_num_tokens)
    return sorted(set(sizes))


def graph_sizes(scope: Scope) -> tuple[str, list[int], list[int]]:
    """(mode, capture sizes, FULL uniform-decode sizes), ascending; empty when nothing is captured.
    The runner_kernels stage reads the same sizes (padded decode batches hit them)."""
    comp, names = scope.engine.data["compilation"], scope.names
    mode = comp["cudagraph_mode"]
    if comp["enforce_eager"] or mode == "NONE":
        return mode, [], []
    max_tokens, q, max_seqs = names["max_num_batched_tokens"], names["decode_query_len"], names["max_num_seqs"]
    max_size = comp["max_cudagraph_capture_size"]
    if max_size is None:
        max_size = scope.integer("max_capture_size", minimum=0)
    max_size = min(max_tokens, max_size)
    if comp["cudagraph_capture_sizes"] is not None:
        sizes = sorted({s for s in comp["cudagraph_capture_sizes"] if s <= max_tokens})
    else:
        sizes = default_sizes(max_size, max_tokens, comp["performance_mode"])
    if not sizes:
        return mode, [], []
    max_size = sizes[-1]
    decode_sizes = []
    if mode in DECODE_FULL_MODES:
        if scope.params["decode_rounding"] == "v1" and q > 1:
            # V1 adjust_cudagraph_sizes_for_spec_decode: every size becomes a multiple of q.
            sizes = sorted({round_up(s, q) for s in sizes if round_up(s, q) <= max_size})
            decode_sizes = sizes
        else:
            # V2 CudaGraphManager: a FULL decode descriptor per size, rounded up to q.
            limit = min(max_seqs * q, max_size)
            decode_sizes = sorted({round_up(s, q) for s in sizes
                                   if round_up(s, q) <= limit and round_up(s, q) // q <= max_seqs})
    return mode, sizes, decode_sizes


def expand(scope: Scope) -> list:
    mode, sizes, decode_sizes = graph_sizes(scope)
    if not sizes:
        return []
    mixed = sizes if mode in MIXED_MODES else []
    return [scope.new(CudaGraph, "capture", mode=mode, sizes=tuple(mixed[::-1]),
                      uniform_decode_sizes=tuple(decode_sizes[::-1]),
                      decode_query_len=scope.names["decode_query_len"], num_warmups=1)]
