"""triton_gemm: the executor's own Triton block-FP8 GEMMs (dense and grouped MoE).

A Triton kernel compiles once per compile key (kernel_model.triton_kernels): the
launch config its table picks by M, plus the class of every integer argument (==1,
%16==0, other). The modes:

- `exact`: every M in 1..max_tokens (every producible M_sum for the grouped GEMM) is
  mapped to its key with the kernels' own dispatch and the tuned tables, and the
  smallest M of each key is planned: one call per compiled variant, by construction;
- `full`: every M (the brute force vLLM's DeepGEMM warmup does; the baseline);
- `buckets`: in every M interval that maps to one table key of `buckets`, its first
  and last M plus one M of each integer class (cheap, not exact: the tables the kernels
  really read may have other keys).

Every step pairs the distinct keys its M-values reach with the first M of each
(`variants`, in order of that M; in `exact` mode those first Ms are its calls), and
declares the end of its M range (`max_value`).
"""

from __future__ import annotations

from kernel_model import triton_kernels as dispatch

from ...engine.facts import EngineFacts
from ...engine.queries import block_fp8_linears, block_fp8_moes, by_shape
from ..expr import round_up
from ..steps import Gemm, GroupedGemm, Variant
from .scope import Scope

BLOCK_K = 128  # the kernels read one 128-wide scale group per K step


def nearest_key_intervals(keys: list[int], max_tokens: int) -> list[tuple[int, int]]:
    """[lo, hi] ranges of M that pick the same key under min(keys, key=|key - M|)."""
    keys = sorted(set(keys))
    intervals, lo = [], 1
    for i, key in enumerate(keys):
        # Ties go to the smaller key (min() keeps the first of equal distances).
        hi = (key + keys[i + 1]) // 2 if i + 1 < len(keys) else max_tokens
        hi = min(hi, max_tokens)
        if lo <= hi:
            intervals.append((lo, hi))
        lo = hi + 1
    return intervals


def class_representatives(lo: int, hi: int) -> set[int]:
    """One M of each Triton integer class in [lo, hi], plus both ends."""
    values = {lo, hi}
    first16 = round_up(lo, 16)
    if first16 <= hi:
        values.add(first16)
    other = next((m for m in range(lo, min(hi, lo + 17) + 1) if m != 1 and m % 16), None)
    if other is not None:
        values.add(other)
    return values


def bucket_m_values(buckets: list[int], max_tokens: int) -> list[int]:
    values = set()
    for lo, hi in nearest_key_intervals(buckets, max_tokens):
        values |= class_representatives(lo, hi)
    return sorted(values)


def expand(scope: Scope) -> list:
    p = scope.params
    max_tokens = scope.integer("max_tokens")
    scope.count_limit("max_tokens", "M-values", max_tokens)
    steps = []
    if p["dense"]:
        steps += dense_steps(scope, max_tokens)
        scope.notes.plan_around(scope.engine.facts, ("linear",))  # the layers whose K the kernels do not take
    if p["grouped"]:
        steps += grouped_steps(scope, max_tokens, scope.integer("block_m"))
        scope.notes.plan_around(scope.engine.facts, ("moe",))
    return steps


def dense_shapes(engine: EngineFacts) -> dict:
    """Distinct (N, K) of the block-FP8 linears the kernels take -> names of the layers sharing it."""
    return by_shape(linear for linear in block_fp8_linears(engine, BLOCK_K) if linear.k % BLOCK_K == 0)


def dense_steps(scope: Scope, max_tokens: int) -> list:
    steps = []
    for (n, k), layers in dense_shapes(scope.engine.facts).items():
        table = scope.tables.get(dispatch.FP8_GEMM, n, k)
        planned = planned_m_values(scope, range(1, max_tokens + 1), lambda m: dispatch.fp8_gemm_key(m, n, k, table))
        steps.append(scope.new(Gemm, f"gemm-n{n}-k{k}", kernel="fp8_gemm", backend="triton", n=n, k=k,
                               block_size=(BLOCK_K, BLOCK_K), layers=tuple(layers), max_value=max_tokens, **planned))
    return steps


def grouped_steps(scope: Scope, max_tokens: int, block_m: int) -> list:
    """Grouped GEMM M is the padded sum over experts: always a multiple of block_m."""
    steps, seen = [], set()
    for moe in block_fp8_moes(scope.engine.facts, BLOCK_K):
        e, top_k = moe.num_experts, moe.top_k
        routed = max_tokens * top_k
        max_m = round_up(routed + min(routed, e) * (block_m - 1), block_m)
        scope.count_limit("max_tokens", "grouped GEMM M-values", max_m // block_m)
        producible = range(block_m, max_m + 1, block_m)
        for weight, n, k in moe.weights:
            if (weight, e, n, k) in seen or k % BLOCK_K:
                continue
            seen.add((weight, e, n, k))
            table = scope.tables.get(dispatch.GROUPED_FP8_GEMM, n, k)
            planned = planned_m_values(
                scope, producible, lambda m: dispatch.grouped_gemm_key(m, n, k, block_m, table),
                buckets_of=lambda: sorted({m for m in bucket_m_values(scope.params["buckets"], max_m)
                                           if m % block_m == 0} | {block_m, max_m}))
            steps.append(scope.new(GroupedGemm, f"grouped_gemm-{weight}-e{e}-n{n}-k{k}",
                                   kernel="grouped_fp8_gemm", backend="triton", weight=weight, num_groups=e,
                                   n=n, k=k, top_k=top_k, alignment=block_m, layers=(moe.name,),
                                   max_value=max_m, **planned))
    return steps


def planned_m_values(scope: Scope, producible: range, key_of, buckets_of=None) -> dict:
    """The step fields of the stage's mode over the producible M range: `m_values` and the
    pairing of each key with its first M (where `warmup execute --jobs` compiles it); in exact
    mode the calls are those first Ms."""
    mode = scope.params["mode"]
    if mode == "exact":
        values = producible
    elif mode == "full":
        values = list(producible)
    elif buckets_of is not None:
        values = buckets_of()
    else:
        values = bucket_m_values(scope.params["buckets"], producible[-1])
    firsts, keys = dispatch.first_value_per_key(values, key_of)
    variants = tuple(map(Variant, keys, firsts))
    exact = mode == "exact"
    return {"m_values": tuple(firsts if exact else values), "variants": variants, "exact": exact}
