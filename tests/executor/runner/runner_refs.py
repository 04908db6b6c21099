"""Straightforward torch references for the reference runner (no paging, float64)."""

from __future__ import annotations

import torch

from executor.kernels.reference import (
    dequantize_block,
    dequantize_per_token_group,
    quantize_fp8_per_token_group,
)


def causal_attention(q, k, v, scale: float) -> torch.Tensor:
    """The last q.shape[0] positions of one sequence over all of k, v (S, KVH, D); float64."""
    T, H, _ = q.shape
    S = k.shape[0]
    group = H // k.shape[1]
    kk = k.double().repeat_interleave(group, dim=1).transpose(0, 1)
    vv = v.double().repeat_interleave(group, dim=1).transpose(0, 1)
    s = q.double().transpose(0, 1) @ kk.transpose(1, 2) * scale
    i = torch.arange(T, device=q.device)[:, None] + (S - T)
    j = torch.arange(S, device=q.device)[None, :]
    s = s.masked_fill(j > i, float("-inf"))
    return (torch.softmax(s, dim=-1) @ vv).transpose(0, 1)


def linear(layer, x: torch.Tensor) -> torch.Tensor:
    """The runner's Linear in float64: the same activation quantization (of x rounded to the
    model dtype, as the runner holds it), dequantized weights."""
    if not layer.fp8:
        return x.double() @ layer.weight.double().t()
    xq, xs = quantize_fp8_per_token_group(x.to(layer.dtype).float())
    return dequantize_per_token_group(xq, xs) @ dequantize_block(layer.weight, layer.scales).t()


def rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def rope(x, positions, theta):
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    f = positions.double()[:, None] * inv[None, :]
    cos, sin = f.cos()[:, None, :], f.sin()[:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def silu_mul(h):
    g, u = h.chunk(2, dim=-1)
    return torch.nn.functional.silu(g) * u


def mlp(layer, x):
    mlp = layer.mlp
    if hasattr(mlp, "num_experts"):
        return moe(mlp, x)
    return linear(mlp.down, silu_mul(linear(mlp.gate_up, x)))


def moe(m, x):
    probs = torch.softmax(x.double() @ m.router.double().t(), dim=-1)
    w, ids = probs.topk(m.top_k, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    out = torch.zeros_like(x, dtype=torch.float64)
    for e in range(m.num_experts):
        if m.fp8:
            w13, w2 = dequantize_block(m.w13[e], m.w13_s[e]), dequantize_block(m.w2[e], m.w2_s[e])
            xq, xs = quantize_fp8_per_token_group(x.to(m.dtype).float())
            h = silu_mul(dequantize_per_token_group(xq, xs) @ w13.t())
            hq, hs = quantize_fp8_per_token_group(h.to(m.dtype).float())
            y = dequantize_per_token_group(hq, hs) @ w2.t()
        else:
            y = silu_mul(x.double() @ m.w13[e].double().t()) @ m.w2[e].double().t()
        out += y * (w * (ids == e)).sum(-1, keepdim=True)
    return out


def forward(model, token_ids: list[int]) -> torch.Tensor:
    """Final hidden states of one whole sequence (S, hidden), float64, dense causal attention."""
    cfg = model.cfg
    ids = torch.tensor(token_ids, device=model.embed.device)
    pos = torch.arange(len(token_ids), device=model.embed.device)
    x, residual = model.embed[ids].double(), None
    for layer in model.layers:
        residual = x if residual is None else x + residual
        h = rms(residual, layer.input_norm, cfg.eps)
        qkv = linear(layer.qkv, h)
        S, qs, kvs, d = len(token_ids), layer.q_size, layer.kv_size, cfg.head_size
        q = rope(qkv[:, :qs].view(S, cfg.num_heads, d), pos, cfg.rope_theta)
        k = rope(qkv[:, qs:qs + kvs].view(S, cfg.num_kv_heads, d), pos, cfg.rope_theta)
        v = qkv[:, qs + kvs:].view(S, cfg.num_kv_heads, d)
        o = causal_attention(q, k, v, cfg.scale).reshape(S, qs)
        residual = linear(layer.o_proj, o) + residual
        x = mlp(layer, rms(residual, layer.post_norm, cfg.eps))
    return rms(x + residual, model.final_norm, cfg.eps)


def rel_err(out, ref) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    return ((out - ref).norm() / ref.norm().clamp(min=1e-30)).item()
