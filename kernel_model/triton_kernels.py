"""Compile keys of the executor's own Triton kernels (executor/kernels), in pure Python.

A launch of a ``@triton.jit`` kernel compiles (or loads) once per key: the constexprs
and launch options, plus the specialization of every int argument (``int_spec``) and
the dtype and 16-byte alignment of every pointer. The kernels' pointers are the
operands' data (always aligned: slices of buffers allocated at the largest size) and
their ints are the sizes and strides below, so a key is a function of the call's
sizes and the config its table picks. The planner enumerates these keys; the
executor's kernels launch with the same ``select_config``, so a planned key and a
launched key cannot differ. Keys are short strings, stable across runs:

    fp8_gemm[64x128x128 g8 w4 s3](N=i32D K=i32D Ks=i32D)
"""

from __future__ import annotations

from .arith import cdiv
from .gemm_tables import SCALE_BLOCK, Table, config_label, next_power_of_2, select_config
from .specialization import int_spec

FP8_GEMM = "fp8_gemm"
GROUPED_FP8_GEMM = "grouped_fp8_gemm"
PREFILL_ATTENTION = "prefill_attention"


def _key(kernel: str, label: str, ints: dict) -> str:
    return f"{kernel}[{label}](" + " ".join(f"{name}={spec}" for name, spec in ints.items()) + ")"


# --- block-FP8 GEMM ----------------------------------------------------------------------------------

def fp8_gemm_config(M: int, N: int, K: int, table: Table | None):
    return select_config(table, M, N, K)


def fp8_gemm_key(M: int, N: int, K: int, table: Table | None, config=None) -> str:
    """M is ``do_not_specialize``; N, K and the strides K, N, K/128 are specialized.

    Contiguous operands: stride_am = stride_bn = K, stride_cm = N, stride_asm =
    stride_bsn = K/128 and the unit strides are ``constexpr=1``, so N, K and K/128
    carry every int class the launch has."""
    config = config or fp8_gemm_config(M, N, K, table)
    return _key(FP8_GEMM, config_label(config),
                {"M": int_spec(M, specialize=False), "N": int_spec(N), "K": int_spec(K),
                 "Ks": int_spec(K // SCALE_BLOCK)})


# --- grouped (MoE) block-FP8 GEMM --------------------------------------------------------------------

def grouped_gemm_config(M_sum: int, N: int, K: int, block_m: int, table: Table | None):
    """The dense table's choice, with BLOCK_SIZE_M capped so that it divides block_m."""
    config = select_config(table, M_sum, N, K)
    config["BLOCK_SIZE_M"] = min(config["BLOCK_SIZE_M"], block_m)
    return config


def grouped_gemm_key(M_sum: int, N: int, K: int, block_m: int, table: Table | None, config=None) -> str:
    """Like fp8_gemm plus CHUNK_M (= block_m) and the expert strides N*K (weights) and
    ceil(N/128)*K/128 (weight scales)."""
    config = config or grouped_gemm_config(M_sum, N, K, block_m, table)
    scale_rows = cdiv(N, SCALE_BLOCK)
    return _key(GROUPED_FP8_GEMM, f"{config_label(config)} chunk{block_m}",
                {"M": int_spec(M_sum, specialize=False), "N": int_spec(N), "K": int_spec(K),
                 "Ks": int_spec(K // SCALE_BLOCK), "NK": int_spec(N * K),
                 "NsKs": int_spec(scale_rows * (K // SCALE_BLOCK))})


# --- varlen prefill attention --------------------------------------------------------------------------

def attention_launch_params(head_size: int) -> dict:
    """BLOCK_M, BLOCK_N, num_warps, num_stages by padded head size (head size only)."""
    block_d = next_power_of_2(head_size)
    if block_d <= 64:
        return dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2)
    if block_d <= 128:
        return dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2)
    if block_d <= 256:
        return dict(BLOCK_M=64, BLOCK_N=32, num_warps=8, num_stages=2)
    return dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)  # MLA-sized heads (576 -> 1024)


def attention_key(num_tokens: int, num_heads: int, num_kv_heads: int, head_size: int,
                  dtype: str = "bfloat16", is_causal: bool = True, sliding_window=(-1, -1),
                  softcap: float = 0.0) -> str:
    """No argument depends on the token count (it sizes the grid only), so one key per
    layer: dtype, head size, GQA ratio, the causal / window / soft-cap switches, the
    launch params and the int classes of the q/k/v/o strides (H*D, D, KVH*D, D)."""
    del num_tokens
    p = attention_launch_params(head_size)
    left, right = (-1 if w is None or w < 0 else int(w) for w in sliding_window)
    flags = "".join(name for name, on in (("c", is_causal), ("l", left >= 0), ("r", right >= 0),
                                          ("s", softcap > 0)) if on)
    label = (f"{str(dtype).removeprefix('torch.')} d{head_size} q{num_heads // num_kv_heads} {flags or '-'} "
             f"{p['BLOCK_M']}x{p['BLOCK_N']} w{p['num_warps']} s{p['num_stages']}")
    return _key(PREFILL_ATTENTION, label,
                {"sq": int_spec(num_heads * head_size), "sh": int_spec(head_size),
                 "skv": int_spec(num_kv_heads * head_size)})


# --- enumeration -------------------------------------------------------------------------------------

def first_value_per_key(values, key_of) -> tuple[list[int], list[str]]:
    """The smallest value of each distinct key, in increasing value order, and the keys."""
    seen: dict[str, int] = {}
    for v in sorted(set(values)):
        seen.setdefault(key_of(v), v)
    reps = sorted(seen.items(), key=lambda kv: kv[1])
    return [v for _, v in reps], [k for k, _ in reps]
