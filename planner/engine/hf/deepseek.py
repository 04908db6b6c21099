"""Multi-head latent attention (MLA), as vLLM's deepseek_v2.py builds it for DeepSeek-V2 and -V3
wherever the config has a kv_lora_rank: its projections, with or without q compression; the one
latent "head" the KV cache holds; the YaRN softmax scale. (The MoE layers, the shared experts and
the dense layers before them are decoder.py's rules; the MTP layer, num_nextn_predict_layers, is
not part of the main model.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .layers import AttentionShape, Linear
from .source import HFConfig


@dataclass
class _MlaDims:
    """DeepSeek's multi-head latent attention sizes (heads per rank)."""

    num_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


def _mla_dims(ctx: HFConfig, tp: int) -> _MlaDims:
    heads = ctx.pos_int("num_attention_heads")
    kv_lora = ctx.pos_int("kv_lora_rank")
    nope = ctx.pos_int("qk_nope_head_dim")
    rope = ctx.pos_int("qk_rope_head_dim")
    v_dim = ctx.pos_int("v_head_dim")
    return _MlaDims(ctx.div(heads, "num_attention_heads", tp, f"--tp {tp}"), kv_lora, nope, rope, v_dim)


def _mla_projections(ctx: HFConfig, dims: _MlaDims, hidden: int) -> list[Linear]:
    heads, kv_lora, rope = dims.num_heads, dims.kv_lora_rank, dims.qk_rope_head_dim
    qk = dims.qk_nope_head_dim + rope
    if ctx.get("q_lora_rank") is not None:
        q_lora = ctx.pos_int("q_lora_rank")
        projections = [
            Linear("self_attn.fused_qkv_a_proj", ["self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"],
                   q_lora + kv_lora + rope, hidden, "replicated", [q_lora, kv_lora + rope]),
            Linear("self_attn.q_b_proj", ["self_attn.q_b_proj"], heads * qk, q_lora, "column"),
        ]
    else:  # DeepSeek-V2-Lite style: no q compression
        projections = [
            Linear("self_attn.q_proj", ["self_attn.q_proj"], heads * qk, hidden, "column"),
            Linear("self_attn.kv_a_proj_with_mqa", ["self_attn.kv_a_proj_with_mqa"], kv_lora + rope, hidden,
                   "replicated"),
        ]
    return projections + [
        Linear("self_attn.kv_b_proj", ["self_attn.kv_b_proj"], heads * (dims.qk_nope_head_dim + dims.v_head_dim),
               kv_lora, "column"),
        Linear("self_attn.o_proj", ["self_attn.o_proj"], hidden, heads * dims.v_head_dim, "row"),
    ]


def _mla_scale(ctx: HFConfig, qk_head_dim: int) -> float:
    scale = qk_head_dim ** -0.5
    rope = ctx.get("rope_scaling") or ctx.get("rope_parameters")
    if isinstance(rope, dict) and rope.get("factor") is not None:
        # vLLM DeepseekV2MLAAttention: yarn_get_mscale(factor, mscale_all_dim) ** 2
        factor = ctx.number(rope["factor"], "rope_scaling.factor")
        mscale_all_dim = ctx.number(rope.get("mscale_all_dim") or 0.0, "rope_scaling.mscale_all_dim")
        mscale = 1.0 if factor <= 1 else 0.1 * mscale_all_dim * math.log(factor) + 1.0
        scale *= mscale * mscale
    if not 0 < scale < math.inf:
        raise ctx.fail(f"rope_scaling gives a softmax scale of {scale!r}, expected a positive finite number")
    return scale


def mla_attention(ctx: HFConfig, hidden: int, tp: int) -> tuple[list[Linear], AttentionShape]:
    """MLA's projections and its attention: the cache holds one latent "head" per token,
    kv_lora_rank + qk_rope_head_dim wide, V inside it."""
    dims = _mla_dims(ctx, tp)
    shape = AttentionShape(dims.num_heads, 1, dims.kv_lora_rank + dims.qk_rope_head_dim,
                           _mla_scale(ctx, dims.qk_nope_head_dim + dims.qk_rope_head_dim),
                           head_size_v=dims.kv_lora_rank)
    return _mla_projections(ctx, dims, hidden), shape
