"""Which layers a model stacks, by rule from the config's keys, named as its layout declares.

Every decoder layer runs attention, then a dense MLP or an MoE block:
* attention: multi-head latent attention where the config has a kv_lora_rank (DeepSeek-V2/V3:
  deepseek.py), else (grouped-query) attention with a fused QKV projection (layers.py);
* MoE: where the config counts routed experts (n_routed_experts, num_experts or
  num_local_experts, the first given) and the layout has an MoE block; in layer i when
  i >= first_k_dense_replace and i % moe_layer_freq == 0 (DeepSeek: deepseek_v2.py) and
  (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers (Qwen: qwen2_moe.py,
  qwen3_moe.py), each key's default keeping every layer MoE; the experts are
  moe_intermediate_size wide where the config has it, else intermediate_size (Mixtral, GPT-OSS);
* shared experts: shared_expert_intermediate_size wide with a one-output shared_expert_gate
  (Qwen2-MoE), or n_shared_experts x moe_intermediate_size (DeepSeek), split over tp; DeepSeek's
  whole on every rank under sequence-parallel MoE (expert parallelism with tp > 1 and dp > 1:
  flags.Parallel.sequence_parallel_moe, layouts.MoeLayout.shared_sequence_parallel);
* a dense MLP of intermediate_size elsewhere, gated or not as the layout says.
"""

from __future__ import annotations

from .deepseek import mla_attention
from .flags import Parallel
from .layers import DecoderLayers, FusedMoE, Linear, dense_attention, dense_mlp, routed_experts, stack
from .layouts import Fused, Layout, MoeLayout
from .model import Model
from .source import HFConfig

EXPERTS_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")


def _experts(ctx: HFConfig, layout: Layout) -> tuple[str | None, int]:
    """(the key that counts the routed experts, their number): (None, 0) for a dense model.
    transformers 5 writes Qwen3-MoE's num_experts as num_local_experts (what vLLM loaded and
    `--from-vllm` reads); config.json files on the Hub say num_experts."""
    key = next((k for k in EXPERTS_KEYS if ctx.get(k) is not None), None)
    count = 0 if key is None else ctx.nonneg_int(key)
    if count and layout.moe is None:
        raise ctx.fail(f"{key} = {count}, but vLLM's {layout.module} builds no MoE block for this architecture", key)
    return key, count


def _moe_layers(ctx: HFConfig, num_layers: int, num_experts: int) -> list[bool]:
    """Which layers are MoE (module docstring)."""
    if not num_experts:
        return [False] * num_layers
    first_dense = ctx.nonneg_int("first_k_dense_replace", 0)
    freq = ctx.pos_int("moe_layer_freq", 1)
    step = ctx.pos_int("decoder_sparse_step", 1)
    mlp_only = ctx.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list):
        raise ctx.fail(f"mlp_only_layers must be a list of layer indices, got {mlp_only!r}")
    return [i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in mlp_only
            for i in range(num_layers)]


def _replicated(linears: list[Linear]) -> list[Linear]:
    """Linears built with disable_tp: whole on every rank."""
    for lin in linears:
        lin.mode, lin.split_parts = "replicated", [False] * len(lin.parts or [lin.n])
    return linears


def _shared_experts(ctx: HFConfig, moe: MoeLayout, hidden: int, par: Parallel) -> list[Linear]:
    """The shared experts beside the routed ones (module docstring): a dense MLP, tensor-parallel,
    or whole on every rank where the layout's shared experts follow sequence-parallel MoE."""
    if moe.shared_sequence_parallel and par.sequence_parallel_moe:
        return _replicated(_shared_mlp(ctx, moe, hidden, 1))
    return _shared_mlp(ctx, moe, hidden, par.tp)


def _shared_mlp(ctx: HFConfig, moe: MoeLayout, hidden: int, tp: int) -> list[Linear]:
    """The shared experts' MLP, split over `tp` ranks."""
    shared = f"{moe.block}.{moe.shared}"
    up, down = Fused(f"{shared}.gate_up_proj", (f"{shared}.gate_proj", f"{shared}.up_proj")), f"{shared}.down_proj"
    if ctx.get("shared_expert_intermediate_size"):
        width = ctx.pos_int("shared_expert_intermediate_size")
        gate = f"{shared}_gate"  # qwen2_moe.py: ReplicatedLinear(hidden, 1), quant_config=None
        return (dense_mlp(ctx, hidden, width, "shared_expert_intermediate_size", tp, up, down)
                + [Linear(gate, [gate], 1, hidden, "replicated", quantizable=False)])
    count = ctx.nonneg_int("n_shared_experts", 0)
    if not count:
        return []
    inter = ctx.pos_int("moe_intermediate_size")
    if inter * count % tp:
        raise ctx.fail(f"moe_intermediate_size ({inter}) x n_shared_experts ({count}) = "
                       f"{inter * count} is not divisible by --tp {tp}")
    return dense_mlp(ctx, hidden, inter * count, "moe_intermediate_size", tp, up, down)


def _moe_block(ctx: HFConfig, layout: Layout, key: str, count: int, hidden: int,
               par: Parallel) -> tuple[list[Linear], FusedMoE]:
    """An MoE layer's linears (the router, the shared experts) and its routed experts."""
    inter_key = "moe_intermediate_size" if ctx.get("moe_intermediate_size") is not None else "intermediate_size"
    router, experts = routed_experts(ctx, layout.moe, count, key, inter_key, hidden, par)
    return [router] + _shared_experts(ctx, layout.moe, hidden, par), experts


def decoder_layers(ctx: HFConfig, model: Model, par: Parallel) -> DecoderLayers:
    """One rank's decoder layers (module docstring)."""
    layout, hidden = model.layout, model.hidden_size
    if model.mla:
        projections, attention = mla_attention(ctx, hidden, par.tp)
    else:
        projections, attention = dense_attention(ctx, layout, hidden, par.tp)
    key, count = _experts(ctx, layout)
    is_moe = _moe_layers(ctx, model.num_layers, count)
    mlp = moe_linears = moe = None
    if any(is_moe):
        moe_linears, moe = _moe_block(ctx, layout, key, count, hidden, par)
    if not all(is_moe):
        mlp = dense_mlp(ctx, hidden, ctx.pos_int("intermediate_size"), "intermediate_size", par.tp,
                        layout.mlp_in, layout.mlp_out, layout.gated)
    return stack(attention, projections, is_moe, mlp=mlp, moe_linears=moe_linears, moe=moe)
