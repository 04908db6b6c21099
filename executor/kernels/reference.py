"""vLLM-style FP8 quantizers and their dequantizers (to float64), CPU or GPU.

The quantizers follow vLLM: scale = amax / 448 per group (amax clamped to 1e-10),
values divided by the scale, clamped to +-448 and cast to float8_e4m3fn. The kernels'
float64 references, which only tests need, are in tests/executor/kernel_refs.py.
"""

from __future__ import annotations

import torch

from kernel_model.arith import cdiv

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
    nb, kb = cdiv(N, bn), cdiv(K, bk)  # exact: no float rounding of large shapes
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
