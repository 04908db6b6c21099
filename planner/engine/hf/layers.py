"""One decoder layer's weights on one rank, as vLLM's parallel layers shard them: its GEMMs
(Linear), its routed experts (FusedMoE) and its attention shape; and the blocks every layout
builds its layers from (dense attention, a dense MLP, an MoE layer's router and experts), named
as the layout declares (layouts.py) and sized from the config's keys.

Column-parallel layers split N, row-parallel layers split K, replicated layers are whole; KV heads
are replicated when there are fewer of them than tp; without expert parallelism every rank holds
every expert with moe_intermediate_size / (tp * dp), with it num_experts / (tp * dp) whole experts
(the package docstring has each rule).
"""

from __future__ import annotations

from dataclasses import dataclass

from .flags import Parallel
from .layouts import Fused, Layout, MoeLayout, role
from .source import HFConfig


# eq=False: records compare (and hash) by identity, because one object stands for the
# same weight in every layer that has it; checks dedupe on that.
@dataclass(eq=False)
class Linear:
    """One GEMM weight of one decoder layer, per rank."""

    name: str                 # vLLM's module name, relative to the layer (self_attn.qkv_proj)
    modules: list[str]        # the checkpoint modules vLLM loads into it (packed_modules_mapping)
    n: int
    k: int
    mode: str                 # "column" | "row" | "replicated"
    parts: list[int] | None = None         # per-rank output partitions of merged GEMMs (None: [n])
    split_parts: list[bool] | None = None  # which parts TP splits (None: all)
    quantizable: bool = True
    router: bool = False      # an MoE block's router (gate), which no GPTQ checkpoint quantizes

    @property
    def role(self) -> str:
        """The engine entry's name (layouts.role)."""
        return role(self.name)

    def sharded_parts(self) -> list[int]:
        """The output partitions TP splits: each must be a whole number of FP8 blocks."""
        parts = self.parts or [self.n]
        return [p for p, split in zip(parts, self.split_parts or [True] * len(parts)) if split]


@dataclass(eq=False)
class FusedMoE:
    """The routed experts of one MoE layer, per rank."""

    prefix: str               # HF module name, relative to the layer
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int


@dataclass
class AttentionShape:
    """One rank's attention: its heads, and the head size the KV cache holds."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    scale: float
    head_size_v: int | None = None  # MLA only: V is narrower than the latent K


@dataclass
class DecoderLayers:
    """What each decoder layer of one rank runs (MoE None in dense layers)."""

    linears: list[list[Linear]]
    moes: list[FusedMoE | None]
    attention: AttentionShape


def head_dim(ctx: HFConfig, layout: Layout, hidden: int, heads: int) -> int:
    """config.head_dim where vLLM's model reads it and the config gives it, else hidden_size / heads."""
    if layout.head_dim_key and ctx.get("head_dim") is not None:
        return ctx.pos_int("head_dim")
    return ctx.div(hidden, "hidden_size", heads, f"num_attention_heads ({heads})")


def attention_scale(ctx: HFConfig, head_size: int) -> float:
    """The softmax scale vLLM's attention layer gets: Gemma-2 and Gemma-3 scale by
    query_pre_attn_scalar ** -0.5 (gemma2.py, gemma3.py), Granite by attention_multiplier
    (granite.py); every other model by head_dim ** -0.5."""
    if ctx.get("query_pre_attn_scalar") is not None:
        scalar = ctx.number(ctx.get("query_pre_attn_scalar"), "query_pre_attn_scalar")
        if scalar <= 0:
            raise ctx.fail(f"query_pre_attn_scalar must be > 0, got {scalar!r}", "query_pre_attn_scalar")
        return scalar ** -0.5
    if ctx.get("attention_multiplier") is not None:
        scale = ctx.number(ctx.get("attention_multiplier"), "attention_multiplier")
        if scale <= 0:
            raise ctx.fail(f"attention_multiplier must be > 0, got {scale!r}", "attention_multiplier")
        return scale
    return head_size ** -0.5


def dense_attention(ctx: HFConfig, layout: Layout, hidden: int, tp: int) -> tuple[list[Linear], AttentionShape]:
    """Multi-head (or grouped-query) attention: vLLM's QKVParallelLinear (qkv_proj, wqkv), whose KV
    heads are replicated where tp is a multiple of them, and the RowParallelLinear output projection."""
    heads = ctx.pos_int("num_attention_heads")
    kv_heads = ctx.pos_int("num_key_value_heads", heads)
    head_size = head_dim(ctx, layout, hidden, heads)
    heads_r = ctx.div(heads, "num_attention_heads", tp, f"--tp {tp}")
    kv_split = kv_heads >= tp
    if kv_split:
        kv_r = ctx.div(kv_heads, "num_key_value_heads", tp, f"--tp {tp}")
    elif tp % kv_heads:
        raise ctx.fail(f"--tp {tp} is not divisible by num_key_value_heads ({kv_heads}) "
                       "(vLLM replicates KV heads only when tp is a multiple of them)")
    else:
        kv_r = 1
    q, kv = heads_r * head_size, kv_r * head_size
    projections = [
        Linear(layout.qkv.name, list(layout.qkv.modules), q + 2 * kv, hidden, "column", [q, kv, kv],
               [True, kv_split, kv_split]),
        Linear(layout.o_proj, [layout.o_proj], hidden, q, "row"),
    ]
    return projections, AttentionShape(heads_r, kv_r, head_size, attention_scale(ctx, head_size))


def dense_mlp(ctx: HFConfig, hidden: int, inter: int, key: str, tp: int, up: Fused, down: str,
              gated: bool = True) -> list[Linear]:
    """A dense MLP of width `inter` (`key`'s), split over tp: the column-parallel up-projection
    (MergedColumnParallelLinear gate_up_proj, 2 x inter, where gated; one inter-wide
    ColumnParallelLinear such as Starcoder2's c_fc where not) and the RowParallelLinear down."""
    inter_r = ctx.div(inter, key, tp, f"--tp {tp}")
    parts = [inter_r, inter_r] if gated else [inter_r]
    return [
        Linear(up.name, list(up.modules), sum(parts), hidden, "column", parts),
        Linear(down, [down], hidden, inter_r, "row"),
    ]


def routed_experts(ctx: HFConfig, moe: MoeLayout, num_experts: int, experts_key: str, inter_key: str,
                   hidden: int, par: Parallel) -> tuple[Linear, FusedMoE]:
    """The router and the experts of an MoE layer, sharded as vLLM's FusedMoE does: without EP
    every rank holds every expert, with I / (tp * dp); with EP whole experts. The router is
    replicated and unquantized, except where the model hands it its quant_config (layouts.py)."""
    top_k = ctx.pos_int("num_experts_per_tok")
    inter = ctx.pos_int(inter_key)
    ranks = par.tp * par.dp
    flag = f"--tp {par.tp}" if par.dp == 1 else f"--tp {par.tp} x --dp {par.dp} ({ranks} ranks)"
    if par.ep:
        local = ctx.div(num_experts, experts_key, ranks, flag + " with --enable-expert-parallel")
    else:
        local, inter = num_experts, ctx.div(inter, inter_key, ranks, flag)
    router = f"{moe.block}.{moe.router}"
    gate = Linear(router, [router], num_experts, hidden, "replicated", quantizable=moe.router_quantized,
                  router=True)
    return gate, FusedMoE(f"{moe.block}.experts", local, top_k, hidden, inter)


def stack(attention: AttentionShape, projections: list[Linear], is_moe: list[bool],
          mlp: list[Linear] | None = None, moe_linears: list[Linear] | None = None,
          moe: FusedMoE | None = None) -> DecoderLayers:
    """Every layer runs the attention projections, then its MoE block or its dense MLP."""
    return DecoderLayers([projections + (moe_linears if m else mlp) for m in is_moe],
                         [moe if m else None for m in is_moe], attention)
