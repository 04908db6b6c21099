"""DeepSeek-V3's decoder layers: multi-head latent attention (MLA: its projections, with or
without q compression; the one latent "head" the KV cache holds; the YaRN softmax scale), the
shared experts, and dense layers before the MoE ones. The MTP layer (num_nextn_predict_layers)
is not part of the main model and is left out of its layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .flags import Parallel
from .layers import AttentionShape, DecoderLayers, Linear, dense_mlp, routed_experts, stack
from .model import Model
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
            Linear("fused_qkv_a_proj", ["self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"],
                   q_lora + kv_lora + rope, hidden, "replicated", [q_lora, kv_lora + rope]),
            Linear("q_b_proj", ["self_attn.q_b_proj"], heads * qk, q_lora, "column"),
        ]
    else:  # DeepSeek-V2-Lite style: no q compression
        projections = [
            Linear("q_proj", ["self_attn.q_proj"], heads * qk, hidden, "column"),
            Linear("kv_a_proj_with_mqa", ["self_attn.kv_a_proj_with_mqa"], kv_lora + rope, hidden, "replicated"),
        ]
    return projections + [
        Linear("kv_b_proj", ["self_attn.kv_b_proj"], heads * (dims.qk_nope_head_dim + dims.v_head_dim),
               kv_lora, "column"),
        Linear("o_proj", ["self_attn.o_proj"], hidden, heads * dims.v_head_dim, "row"),
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


def _shared_experts(ctx: HFConfig, hidden: int, tp: int) -> list[Linear]:
    """DeepSeek's shared experts: one dense MLP of n_shared_experts x moe_intermediate_size."""
    shared = ctx.nonneg_int("n_shared_experts", 0)
    if not shared:
        return []
    inter = ctx.pos_int("moe_intermediate_size")
    if inter * shared % tp:
        raise ctx.fail(f"moe_intermediate_size ({inter}) x n_shared_experts ({shared}) = "
                       f"{inter * shared} is not divisible by --tp {tp}")
    return dense_mlp(ctx, hidden, inter * shared, "moe_intermediate_size", tp,
                     prefix="mlp.shared_experts", role_prefix="shared_experts.")


def deepseek_layers(ctx: HFConfig, model: Model, par: Parallel) -> DecoderLayers:
    """MLA in every layer; dense MLPs in the first first_k_dense_replace layers, MoE after."""
    hidden = model.hidden_size
    dims = _mla_dims(ctx, par.tp)
    projections = _mla_projections(ctx, dims, hidden)
    first_dense = ctx.nonneg_int("first_k_dense_replace", 0)
    freq = ctx.pos_int("moe_layer_freq", 1)
    num_experts = ctx.nonneg_int("n_routed_experts", 0)
    is_moe = [num_experts > 0 and i >= first_dense and i % freq == 0 for i in range(model.num_layers)]
    mlp = moe_linears = moe = None
    if not all(is_moe):
        mlp = dense_mlp(ctx, hidden, ctx.pos_int("intermediate_size"), "intermediate_size", par.tp)
    if any(is_moe):
        gate, moe = routed_experts(ctx, "mlp", num_experts, "n_routed_experts", "moe_intermediate_size",
                                   hidden, par)
        moe_linears = [gate] + _shared_experts(ctx, hidden, par.tp)
    # the cache holds one latent "head" per token: kv_lora_rank + qk_rope_head_dim wide, V inside it
    attention = AttentionShape(dims.num_heads, 1, dims.kv_lora_rank + dims.qk_rope_head_dim,
                               _mla_scale(ctx, dims.qk_nope_head_dim + dims.qk_rope_head_dim),
                               head_size_v=dims.kv_lora_rank)
    return stack(attention, projections, is_moe, mlp=mlp, moe_linears=moe_linears, moe=moe)
