"""Torch references for the executor's kernels (float64 math, CPU or GPU), and FP8 quantizers.

The quantizers follow vLLM: scale = amax / 448 per group (amax clamped to 1e-10),
values divided by the scale, clamped to +-448 and cast to float8_e4m3fn.
"""

from __future__ import annotations

import math

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8_DTYPE).max  # 448.0
_EPS = 1e-10


def quantize_fp8_per_token_group(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., K) -> (e4m3 (..., K), float32 scales (..., K // group)); K must be a multiple of group."""
    *lead, K = x.shape
    if K % group:
        raise ValueError(f"K={K} is not a multiple of the quantization group {group}")
    groups = x.float().reshape(*lead, K // group, group)
    scales = groups.abs().amax(dim=-1).clamp(min=_EPS) / FP8_MAX
    q = (groups / scales.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q.reshape(*lead, K), scales.float()


def quantize_fp8_block(w: torch.Tensor, block: tuple[int, int] = (128, 128)) -> tuple[torch.Tensor, torch.Tensor]:
    """w (..., N, K) -> (e4m3 (..., N, K), float32 scales (..., ceil(N/bn), ceil(K/bk))).

    Edge blocks are partial: their amax covers only the real rows and columns.
    """
    bn, bk = block
    *lead, N, K = w.shape
    nb, kb = math.ceil(N / bn), math.ceil(K / bk)
    padded = torch.zeros(*lead, nb * bn, kb * bk, dtype=torch.float32, device=w.device)
    padded[..., :N, :K] = w.float()
    blocks = padded.reshape(*lead, nb, bn, kb, bk)
    scales = blocks.abs().amax(dim=(-3, -1)).clamp(min=_EPS) / FP8_MAX
    q = (blocks / scales[..., :, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.reshape(*lead, nb * bn, kb * bk)[..., :N, :K].to(FP8_DTYPE)
    return q.contiguous(), scales.float()


def dequantize_per_token_group(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    group = q.shape[-1] // scales.shape[-1]
    return q.double() * scales.double().repeat_interleave(group, dim=-1)


def dequantize_block(q: torch.Tensor, scales: torch.Tensor, block: tuple[int, int] = (128, 128)) -> torch.Tensor:
    N, K = q.shape[-2:]
    full = scales.double().repeat_interleave(block[0], dim=-2).repeat_interleave(block[1], dim=-1)
    return q.double() * full[..., :N, :K]


def ref_fp8_gemm(a, a_scales, b, b_scales, block=(128, 128)) -> torch.Tensor:
    """C = dequant(a) @ dequant(b).T in float64, returned as float32 (M, N)."""
    return (dequantize_per_token_group(a, a_scales) @ dequantize_block(b, b_scales, block).T).float()


def ref_grouped_fp8_gemm(a, a_scales, b, b_scales, expert_ids, block_m: int = 128, block=(128, 128)) -> torch.Tensor:
    """Each aligned chunk of block_m rows uses the expert of its first row; expert -1 gives zeros."""
    M, N = a.shape[0], b.shape[1]
    out = torch.zeros(M, N, dtype=torch.float64, device=a.device)
    a_deq = dequantize_per_token_group(a, a_scales)
    ids = expert_ids.tolist()
    weights = {}
    for start in range(0, M, block_m):
        expert = ids[start]
        if expert < 0:
            continue
        if expert not in weights:
            weights[expert] = dequantize_block(b[expert], b_scales[expert], block).T
        rows = slice(start, min(start + block_m, M))
        out[rows] = a_deq[rows] @ weights[expert]
    return out.float()


def ref_prefill_attention(q, k, v, b_start_loc, b_seq_len, is_causal=True, softmax_scale=None,
                          softcap=0.0, sliding_window_q=-1, sliding_window_k=-1) -> torch.Tensor:
    """Varlen attention in float64; query i of a sequence sees key j when it passes every bound:
    causal j <= i, left window i - sliding_window_q <= j, right window j <= i + sliding_window_k
    (a window of -1 or None is unbounded). Returns float32 (T, H, D)."""
    T, H, D = q.shape
    group = H // k.shape[1]
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    out = torch.zeros(T, H, D, dtype=torch.float64, device=q.device)
    for start, length in zip(b_start_loc.tolist(), b_seq_len.tolist()):
        rows = slice(start, start + length)
        qs = q[rows].double().transpose(0, 1)  # (H, L, D)
        ks = k[rows].double().repeat_interleave(group, dim=1).transpose(0, 1)
        vs = v[rows].double().repeat_interleave(group, dim=1).transpose(0, 1)
        s = qs @ ks.transpose(1, 2) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(length, device=q.device)[:, None]
        j = torch.arange(length, device=q.device)[None, :]
        allowed = torch.ones(length, length, dtype=torch.bool, device=q.device)
        if is_causal:
            allowed &= j <= i
        if sliding_window_q is not None and sliding_window_q >= 0:
            allowed &= j >= i - sliding_window_q
        if sliding_window_k is not None and sliding_window_k >= 0:
            allowed &= j <= i + sliding_window_k
        s = s.masked_fill(~allowed, float("-inf"))
        out[rows] = (torch.softmax(s, dim=-1) @ vs).transpose(0, 1)
    return out.float()
