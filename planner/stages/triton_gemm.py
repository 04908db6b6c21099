"""triton_gemm: the executor's own Triton block-FP8 GEMMs (dense and grouped MoE).

A Triton kernel compiles once per specialization key: its launch config (chosen
by M from a table keyed by M buckets, nearest key wins, as vLLM's block-FP8
configs) and the class of every integer argument (==1, %16==0, other). `full`
runs every M and so covers the hot path by construction; `buckets` runs, in
every M interval that maps to one table key, its first and last M plus one M of
each integer class.
"""

from __future__ import annotations

from ..expr import round_up
from .deep_gemm import is_block_fp8
from .scope import Scope, step

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


def expand(scope: Scope) -> list[dict]:
    p, engine = scope.params, scope.engine.data
    max_tokens = scope.integer("max_tokens")
    block_m = scope.integer("block_m")
    steps = []
    if p["dense"]:
        dense = full_or_buckets(scope, max_tokens)
        shapes: dict = {}
        for layer in engine["model"]["linear"]:
            if is_block_fp8(layer, BLOCK_K) and layer["k"] % BLOCK_K == 0:
                shapes.setdefault((layer["n"], layer["k"]), []).append(layer["name"])
        for (n, k), layers in shapes.items():
            steps.append(step(f"gemm-n{n}-k{k}", "gemm", kernel="fp8_gemm", backend="triton", n=n, k=k,
                              block_size=[BLOCK_K, BLOCK_K], layers=layers, m_values=dense))
    if p["grouped"]:
        steps += grouped_steps(scope, engine, max_tokens, block_m)
    return steps


def full_or_buckets(scope: Scope, max_tokens: int) -> list[int]:
    scope.count_limit("max_tokens", "M-values", max_tokens)
    if scope.params["mode"] == "full":
        return list(range(1, max_tokens + 1))
    return bucket_m_values(scope.params["buckets"], max_tokens)


def grouped_steps(scope: Scope, engine: dict, max_tokens: int, block_m: int) -> list[dict]:
    """Grouped GEMM M is the padded sum over experts: always a multiple of block_m."""
    steps, seen = [], set()
    for moe in engine["model"]["moe"]:
        if not is_block_fp8(moe, BLOCK_K):
            continue
        e, h, i, top_k = moe["num_experts"], moe["hidden_size"], moe["intermediate_size"], moe["top_k"]
        routed = max_tokens * top_k
        max_m = round_up(routed + min(routed, e) * (block_m - 1), block_m)
        scope.count_limit("max_tokens", "grouped GEMM M-values", max_m // block_m)
        m_values = list(range(block_m, max_m + 1, block_m))
        if scope.params["mode"] == "buckets":
            m_values = sorted({m for m in bucket_m_values(scope.params["buckets"], max_m)
                               if m % block_m == 0} | {block_m, max_m})
        for weight, n, k in (("w13", 2 * i, h), ("w2", h, i)):
            if (weight, e, n, k) in seen or k % BLOCK_K:
                continue
            seen.add((weight, e, n, k))
            steps.append(step(f"grouped_gemm-{weight}-e{e}-n{n}-k{k}", "grouped_gemm",
                              kernel="grouped_fp8_gemm", backend="triton", weight=weight, num_groups=e,
                              n=n, k=k, top_k=top_k, alignment=block_m, layers=[moe["name"]],
                              m_values=m_values))
    return steps
