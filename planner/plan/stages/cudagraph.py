"""cudagraph_capture: the CUDA-graph sizes vLLM captures.

As vLLM @ 017e9f4448b7 computes them: `VllmConfig._set_cudagraph_sizes` (vllm/config/vllm.py),
`CompilationConfig.resolve_cudagraph_mode_and_sizes` (vllm/config/compilation.py; V1's
`adjust_cudagraph_sizes_for_spec_decode`) and V2's `CudaGraphManager._init_candidates`
(vllm/v1/worker/gpu/cudagraph_utils.py). `decode_sizes: request_counts` adds what vLLM 0.33.0's
`_set_cudagraph_sizes` appends to its default sizes: with speculative decoding, decode_query_len
times each request count of a 1, 2, 4, 8..248/8, 256../16 grid (plus max_num_seqs itself);
without it, max_num_seqs when it is off the size grid.

Sizes are listed in capture order, largest first, as graphs share one memory pool
that the largest graph sizes. FULL uniform-decode graphs exist only at token
counts that are whole multiples of decode_query_len.
"""

from __future__ import annotations

from ..expr import round_up
from ..steps import CudaGraph
from .scope import Scope

# The platform's default capture ceiling (1024 on SM10x, else 512), as vLLM computes it.
DEFAULT_MAX_CAPTURE_SIZE = "1024 if device_capability >= 100 and device_capability < 110 else 512"
MIXED_MODES = ("PIECEWISE", "FULL", "FULL_AND_PIECEWISE")
DECODE_FULL_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
# V2 captures uniform-decode graphs of their own only where decode has a separate routine
# (CUDAGraphMode.separate_routine(), vLLM 0.25 and 0.33): FULL replays its mixed graphs for decode.
SEPARATE_DECODE_MODES = ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


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


def request_counts(max_reqs: int) -> list[int]:
    """vLLM 0.33's request-count grid of uniform decode batches (`_set_cudagraph_sizes`)."""
    counts = [n for n in (1, 2, 4) if n <= max_reqs]
    counts += range(8, min(max_reqs + 1, 256), 8)
    counts += range(256, max_reqs + 1, 16)
    return sorted(set(counts) | {max_reqs})


def uniform_decode_sizes(scope: Scope, max_size: int) -> list[int]:
    """Token counts vLLM 0.33 appends to the default sizes so uniform decode batches are captured,
    up to max_size (the capture ceiling, already capped at max_num_batched_tokens)."""
    q, max_seqs = scope.names["decode_query_len"], scope.names["max_num_seqs"]
    if q > 1:
        # Requests are capped at the platform's default ceiling, as one-token decode is.
        max_reqs = min(max_seqs, scope.integer("default_max_capture_size", raw=scope.params.get(
            "default_max_capture_size", DEFAULT_MAX_CAPTURE_SIZE)))
        return sorted({n * q for n in request_counts(max_reqs) if n * q <= max_size})
    return [max_seqs] if max_seqs <= max_size else []


def graph_sizes(scope: Scope) -> tuple[str, list[int], list[int]]:
    """(mode, capture sizes, FULL uniform-decode sizes), ascending; empty when nothing is captured.
    The runner_kernels stage reads the same sizes (padded decode batches hit them)."""
    comp, names = scope.engine.facts.compilation, scope.names
    mode = comp.cudagraph_mode
    if comp.enforce_eager or mode == "NONE":
        return mode, [], []
    max_tokens, q, max_seqs = names["max_num_batched_tokens"], names["decode_query_len"], names["max_num_seqs"]
    max_size, extra = comp.max_cudagraph_capture_size, []
    if max_size is None:
        max_size = min(max_tokens, scope.integer("max_capture_size", minimum=0))
        if scope.params.get("decode_sizes") == "request_counts":
            extra = uniform_decode_sizes(scope, max_size)
    max_size = min(max_tokens, max_size)
    if comp.cudagraph_capture_sizes is not None:
        sizes = sorted({s for s in comp.cudagraph_capture_sizes if s <= max_tokens})
    else:
        sizes = sorted(set(default_sizes(max_size, max_tokens, comp.performance_mode)) | set(extra))
    if not sizes:
        return mode, [], []
    max_size = sizes[-1]
    decode_sizes = []
    if mode in DECODE_FULL_MODES:
        if scope.choice("decode_rounding", ("v1", "v2")) == "v1":
            sizes, decode_sizes = v1_sizes(mode, sizes, q, max_seqs)
        elif mode in SEPARATE_DECODE_MODES:
            # V2 CudaGraphManager: a FULL decode descriptor per size, rounded up to q.
            limit = min(max_seqs * q, max_size)
            decode_sizes = sorted({round_up(s, q) for s in sizes
                                   if round_up(s, q) <= limit and round_up(s, q) // q <= max_seqs})
    return mode, sizes, decode_sizes


def v1_sizes(mode: str, sizes: list[int], q: int, max_seqs: int) -> tuple[list[int], list[int]]:
    """The V1 model runner's (sizes, FULL uniform-decode sizes) under a FULL decode mode:
    CompilationConfig.adjust_cudagraph_sizes_for_spec_decode rounds every size up to a multiple of
    q (dropping those past the largest, keeping q itself if nothing is left), and
    CudagraphDispatcher.initialize_cudagraph_keys adds FULL decode keys, with a separate decode
    routine, at the sizes from q to q x max_num_seqs (vLLM 0.25.0 and 0.33.0)."""
    if q > 1:
        max_size = sizes[-1]
        rounded = sorted({round_up(s, q) for s in sizes if round_up(s, q) <= max_size})
        sizes = rounded or ([q] if q <= max_size else [])
    if mode not in SEPARATE_DECODE_MODES:
        return sizes, []
    return sizes, [s for s in sizes if q <= s <= q * max_seqs]


def expand(scope: Scope) -> list:
    mode, sizes, decode_sizes = graph_sizes(scope)
    if not sizes:
        return []
    mixed = sizes if mode in MIXED_MODES else []
    return [scope.new(CudaGraph, "capture", mode=mode, sizes=tuple(mixed[::-1]),
                      uniform_decode_sizes=tuple(decode_sizes[::-1]),
                      decode_query_len=scope.names["decode_query_len"], num_warmups=1)]
