"""Which layers each model family stacks: the family table (family -> the function that builds
its decoder layers; Llama, Mistral, Qwen2 and Qwen3 are dense) and decoder_layers, which reads it.
"""

from __future__ import annotations

from .deepseek import deepseek_layers
from .flags import Parallel
from .layers import DecoderLayers, dense_attention, dense_mlp, routed_experts, stack
from .model import Model
from .source import HFConfig


def _dense_layers(ctx: HFConfig, model: Model, par: Parallel) -> DecoderLayers:
    """Llama, Qwen2, Qwen3: attention and a dense MLP in every layer."""
    projections, attention = dense_attention(ctx, model.hidden_size, par.tp)
    mlp = dense_mlp(ctx, model.hidden_size, ctx.pos_int("intermediate_size"), "intermediate_size", par.tp)
    return stack(attention, projections, [False] * model.num_layers, mlp=mlp)


def _mixtral_layers(ctx: HFConfig, model: Model, par: Parallel) -> DecoderLayers:
    projections, attention = dense_attention(ctx, model.hidden_size, par.tp)
    num_experts = ctx.pos_int("num_local_experts")
    gate, moe = routed_experts(ctx, "block_sparse_moe", num_experts, "num_local_experts",
                               "intermediate_size", model.hidden_size, par)
    return stack(attention, projections, [True] * model.num_layers, moe_linears=[gate], moe=moe)


def _qwen3_moe_layers(ctx: HFConfig, model: Model, par: Parallel) -> DecoderLayers:
    """MoE every decoder_sparse_step-th layer, except mlp_only_layers (dense)."""
    projections, attention = dense_attention(ctx, model.hidden_size, par.tp)
    # transformers 5 writes Qwen3-MoE's num_experts as num_local_experts (what vLLM loaded and
    # `--from-vllm` reads); config.json files on the Hub say num_experts.
    experts_key = "num_experts" if ctx.get("num_experts") is not None else "num_local_experts"
    num_experts = ctx.nonneg_int(experts_key, 0)
    step = ctx.pos_int("decoder_sparse_step", 1)
    mlp_only = ctx.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list):
        raise ctx.fail(f"mlp_only_layers must be a list of layer indices, got {mlp_only!r}")
    is_moe = [num_experts > 0 and i not in mlp_only and (i + 1) % step == 0 for i in range(model.num_layers)]
    moe_linears = moe = mlp = None
    if any(is_moe):
        # vLLM's Qwen3MoeSparseMoeBlock passes its quant_config to the gate: block-FP8 unless the
        # checkpoint's ignored_layers name it (Qwen's own FP8 checkpoints do, layer by layer).
        gate, moe = routed_experts(ctx, "mlp", num_experts, experts_key, "moe_intermediate_size",
                                   model.hidden_size, par, gate_quantized=True)
        moe_linears = [gate]
    if not all(is_moe):
        mlp = dense_mlp(ctx, model.hidden_size, ctx.pos_int("intermediate_size"), "intermediate_size", par.tp)
    return stack(attention, projections, is_moe, mlp=mlp, moe_linears=moe_linears, moe=moe)


_FAMILY_LAYERS = {"mixtral": _mixtral_layers, "qwen3_moe": _qwen3_moe_layers, "deepseek_v3": deepseek_layers}


def decoder_layers(ctx: HFConfig, model: Model, par: Parallel) -> DecoderLayers:
    """One rank's decoder layers, built by the model family's function (dense where the table has none)."""
    return _FAMILY_LAYERS.get(model.family, _dense_layers)(ctx, model, par)
