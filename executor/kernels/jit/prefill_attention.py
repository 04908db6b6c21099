"""The varlen prefill attention kernel and its launch (docs: executor.kernels.prefill_attention).
Importable without torch, as ``jit.fp8_gemm``."""

from __future__ import annotations

import math

from kernel_model import triton_kernels as dispatch

from .._triton import LazyKernel, tl
from ..configs import cdiv, next_power_of_2
from .stand_in import StandIn


def _prefill_attention_kernel(
    Q, K, V, O, b_start_loc, b_seq_len, sm_scale, softcap, window_left, window_right,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    HEAD_SIZE: tl.constexpr, BLOCK_D: tl.constexpr, QUERIES_PER_KV: tl.constexpr,
    IS_CAUSAL: tl.constexpr, USE_WINDOW_LEFT: tl.constexpr, USE_WINDOW_RIGHT: tl.constexpr,
    USE_SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    block_m = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    seq_len = tl.load(b_seq_len + seq)
    first_q = block_m * BLOCK_M
    if first_q >= seq_len:
        return
    seq_start = tl.load(b_start_loc + seq).to(tl.int64)
    kv_head = head // QUERIES_PER_KV
    offs_m = first_q + tl.arange(0, BLOCK_M)
    offs_n, offs_d = tl.arange(0, BLOCK_N), tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_SIZE
    q_mask = (offs_m < seq_len)[:, None] & d_mask[None, :]
    q = tl.load(Q + (seq_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :], mask=q_mask,
                other=0.0)
    k_base = K + kv_head * stride_kh + offs_d[:, None]
    v_base = V + kv_head * stride_vh + offs_d[None, :]
    lo, hi = 0, seq_len  # the key range this block of queries can see: keys outside it are never loaded
    if IS_CAUSAL:
        hi = tl.minimum(hi, first_q + BLOCK_M)
    if USE_WINDOW_RIGHT:
        hi = tl.minimum(hi, first_q + BLOCK_M + window_right)
    if USE_WINDOW_LEFT:
        lo = (tl.maximum(first_q - window_left, 0) // BLOCK_N) * BLOCK_N
    m_i = tl.full((BLOCK_M,), -1.0e30, dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        kv_rows = seq_start + cols
        col_ok = cols < seq_len
        k = tl.load(k_base + kv_rows[None, :] * stride_kt, mask=col_ok[None, :] & d_mask[:, None], other=0.0)
        s = tl.dot(q, k) * sm_scale
        if USE_SOFTCAP:
            s = softcap * (2.0 * tl.sigmoid(2.0 * s / softcap) - 1.0)  # softcap * tanh(s / softcap)
        allowed = col_ok[None, :]
        if IS_CAUSAL:
            allowed = allowed & (cols[None, :] <= offs_m[:, None])
        if USE_WINDOW_LEFT:
            allowed = allowed & (cols[None, :] >= offs_m[:, None] - window_left)
        if USE_WINDOW_RIGHT:
            allowed = allowed & (cols[None, :] <= offs_m[:, None] + window_right)
        s = tl.where(allowed, s * 1.4426950408889634, float("-inf"))  # log2 domain
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + kv_rows[:, None] * stride_vt, mask=col_ok[:, None] & d_mask[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(O + (seq_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             acc.to(O.dtype.element_ty), mask=q_mask)


KERNEL = LazyKernel(
    _prefill_attention_kernel,
    do_not_specialize=["window_left", "window_right"],
    do_not_specialize_on_alignment=["b_start_loc", "b_seq_len"],
)


launch_params = dispatch.attention_launch_params  # by padded head size (head size only)


def window(value) -> int:
    return -1 if value is None or value < 0 else int(value)


def operands(num_tokens: int, num_heads: int, num_kv_heads: int, head_size: int, dtype: str,
             num_seqs: int = 1) -> dict[str, tuple[str, tuple]]:
    """Name -> (dtype, shape): q, o (T, H, D), k, v (T, KVH, D), int32 sequence starts and lengths."""
    q = (num_tokens, num_heads, head_size)
    kv = (num_tokens, num_kv_heads, head_size)
    return {"q": (dtype, q), "k": (dtype, kv), "v": (dtype, kv), "o": (dtype, q),
            "b_start_loc": ("int32", (num_seqs,)), "b_seq_len": ("int32", (num_seqs,))}


def launch(q, k, v, o, b_start_loc, b_seq_len, max_input_len, is_causal, softmax_scale, softcap,
           sliding_window_q, sliding_window_k, config, compile_only=False):
    """Launch (or, ``compile_only``, compile without launching: returns the CompiledKernel)."""
    T, H, D = q.shape
    params = config or launch_params(D)
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)
    left, right = window(sliding_window_q), window(sliding_window_k)
    grid = (cdiv(max_input_len, params["BLOCK_M"]), H, b_seq_len.shape[0])
    args = (
        q, k, v, o, b_start_loc, b_seq_len,
        scale, float(softcap), left, right,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1),
    )
    options = dict(
        HEAD_SIZE=D, BLOCK_D=next_power_of_2(D), QUERIES_PER_KV=H // k.shape[1],
        IS_CAUSAL=bool(is_causal), USE_WINDOW_LEFT=left >= 0, USE_WINDOW_RIGHT=right >= 0,
        USE_SOFTCAP=softcap > 0, BLOCK_M=params["BLOCK_M"], BLOCK_N=params["BLOCK_N"],
        num_warps=params["num_warps"], num_stages=params["num_stages"],
    )
    if compile_only:
        return KERNEL.get().warmup(*args, grid=grid, **options)
    KERNEL[grid](*args, **options)


def compile_variant(num_tokens: int, num_heads: int, num_kv_heads: int, head_size: int, dtype: str = "bfloat16",
                    is_causal=True, softmax_scale=None, softcap=0.0, sliding_window=(-1, -1), config=None):
    """Compile the variant of one sequence of num_tokens over contiguous q/k/v/o."""
    s = {name: StandIn(dt, shape)
         for name, (dt, shape) in operands(num_tokens, num_heads, num_kv_heads, head_size, dtype).items()}
    return launch(s["q"], s["k"], s["v"], s["o"], s["b_start_loc"], s["b_seq_len"], num_tokens, is_causal,
                  softmax_scale, softcap, sliding_window[0], sliding_window[1], config, compile_only=True)
