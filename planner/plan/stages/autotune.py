"""Autotune stages: FlashInfer's tuning run, and the tuning of the executor's own kernels.

FlashInfer profiles every GEMM op at the token buckets it derives from the one
num_tokens it sees (`_generate_optimization_profiles` in flashinfer/autotuner/autotuner.py,
buckets from `get_hybrid_num_tokens_buckets` in flashinfer/fused_moe/utils.py; FlashInfer @
fb28d7242b35, v0.6.18); the plan lists those buckets so a reviewer can see what gets tuned,
and a lint can compare them with the batches.
"""

from __future__ import annotations

from ...engine.facts import EngineFacts
from ...engine.queries import block_fp8_linears, by_shape
from ..expr import last_power_of_2
from ..steps import Autotune, TuneShape
from .scope import Scope


def power_of_2_buckets(max_num_tokens: int) -> list[int]:
    """get_last_power_of_2_num_tokens_buckets: powers of two from last_pow2(max) down to 1."""
    buckets, m = [], last_power_of_2(max_num_tokens)
    while m >= 1:
        buckets.append(m)
        m //= 2
    return sorted(buckets)


def hybrid_buckets(max_num_tokens: int) -> list[int]:
    """get_hybrid_num_tokens_buckets (flashinfer#3115): pow2 to 256, +256 to 2048, +512 to 4096, pow2 after."""
    buckets = []
    for start, stop, grow in ((1, 256, lambda m: m * 2), (512, 2048, lambda m: m + 256),
                              (2560, 4096, lambda m: m + 512), (8192, max_num_tokens, lambda m: m * 2)):
        m = start
        while m <= min(stop, max_num_tokens):
            buckets.append(m)
            m = grow(m)
    if not buckets or buckets[-1] != max_num_tokens:
        buckets.append(max_num_tokens)
    return sorted(set(buckets))


BUCKETS = {"none": lambda t: None, "power_of_2": power_of_2_buckets, "hybrid": hybrid_buckets}


def expand_flashinfer(scope: Scope) -> list:
    p = scope.params
    num_tokens = scope.integer("num_tokens")
    buckets = BUCKETS[p["buckets"]](num_tokens)
    return [scope.new(Autotune, "autotune", library="flashinfer", num_tokens=num_tokens,
                      buckets=None if buckets is None else tuple(buckets),
                      cache=scope.choice("cache", ("memory", "persistent")),
                      randomize_inputs=p["randomize_inputs"])]


def expand_kernel(scope: Scope) -> list:
    """Tune our own kernels at each token bucket, for every GEMM shape the engine has."""
    max_tokens = scope.integer("max_tokens")
    buckets = sorted({b for b in (scope.integer("num_tokens", raw=raw) for raw in scope.params["num_tokens"])
                      if b <= max_tokens})
    shapes = tuple(TuneShape("fp8_gemm", n, k) for n, k in gemm_shapes(scope.engine.facts))
    scope.notes.plan_around(scope.engine.facts, ("linear",))  # the shapes fp8_gemm does not take
    return [scope.new(Autotune, "autotune", library=scope.params["library"], num_tokens=max_tokens,
                      buckets=tuple(buckets), shapes=shapes)]


def gemm_shapes(engine: EngineFacts) -> list[tuple[int, int]]:
    """Distinct (N, K) of the block-FP8 linears the Triton fp8_gemm takes (K whole blocks), in engine order."""
    return list(by_shape(linear for linear in block_fp8_linears(engine) if linear.k % 128 == 0))
