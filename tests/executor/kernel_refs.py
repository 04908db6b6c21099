"""Float64 torch references for the executor's Triton kernels, and the test-input builder of
the grouped GEMM's contiguous layout (CPU or GPU).

The kernels are checked against these; the runner's references are in runner/runner_refs.py.
"""

from __future__ import annotations

import math

import torch

from executor.kernels.reference import dequantize_block, dequantize_per_token_group


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


def contiguous_layout(rows_per_expert, block_m: int = 128, total_rows: int | None = None,
                      pad_id: int = -1) -> tuple[torch.Tensor, list[int]]:
    """expert_ids for experts with the given row counts, each padded to block_m.

    Padding rows inside an expert's last chunk carry ``pad_id`` (DeepGEMM marks them -1;
    the kernel reads only a chunk's first row). ``total_rows`` pads the end with whole
    -1 chunks. Returns (expert_ids int32 on CPU, start row of each expert).
    """
    ids, starts = [], []
    for expert, n in enumerate(rows_per_expert):
        starts.append(len(ids))
        padded = -(-n // block_m) * block_m
        ids += [expert] * n + [pad_id] * (padded - n)
    if total_rows is not None:
        if total_rows < len(ids) or total_rows % block_m:
            raise ValueError(f"total_rows={total_rows} must be a multiple of {block_m} and >= {len(ids)}")
        ids += [-1] * (total_rows - len(ids))
    return torch.tensor(ids, dtype=torch.int32), starts
