"""One decoder layer's weights on one rank, as vLLM's parallel layers shard them: its GEMMs
(Linear), its routed experts (FusedMoE) and its attention shape; and the blocks every model
family builds its layers from (dense attention, a dense MLP, an MoE layer's router and experts).

Column-parallel layers split N, row-parallel layers split K, replicated layers are whole; KV heads
are replicated when there are fewer of them than tp; without expert parallelism every rank holds
every expert with moe_intermediate_size / (tp * dp), with it num_experts / (tp * dp) whole experts
(the package docstring has each rule).
"""

from __future__ import annotations

from dataclasses import dataclass

from .flags import Parallel
from .source import HFConfig


# eq=False: records compare (and hash) by identity, because one object stands for the
# same weight in every layer that has it; checks dedupe on that.
@dataclass(eq=False)
class Linear:
    """One GEMM weight of one decoder layer, per rank."""

    role: str                 # entry name
    modules: list[str]        # HF module names (relative to the layer) fused into it
    n: int
    k: int
    mode: str                 # "column" | "row" | "replicated"
    parts: list[int] | None = None         # per-rank output partitions of merged GEMMs (None: [n])
    split_parts: list[bool] | None = None  # which parts TP splits (None: all)
    quantizable: bool = True

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


def dense_attention(ctx: HFConfig, hidden: int, tp: int) -> tuple[list[Linear], AttentionShape]:
    """Multi-head (or grouped-query) attention: vLLM's QKVParallelLinear qkv_proj, whose KV heads are
    replicated where tp is a multiple of them, and the RowParallelLinear o_proj."""
    heads = ctx.pos_int("num_attention_heads")
    kv_heads = ctx.pos_int("num_key_value_heads", heads)
    if ctx.get("head_dim") is None:
        head_dim = ctx.div(hidden, "hidden_size", heads, f"num_attention_heads ({heads})")
    else:
        head_dim = ctx.pos_int("head_dim")
    heads_r = ctx.div(heads, "num_attention_heads", tp, f"--tp {tp}")
    kv_split = kv_heads >= tp
    if kv_split:
        kv_r = ctx.div(kv_heads, "num_key_value_heads", tp, f"--tp {tp}")
    elif tp % kv_heads:
        raise ctx.fail(f"--tp {tp} is not divisible by num_key_value_heads ({kv_heads}) "
                       "(vLLM replicates KV heads only when tp is a multiple of them)")
    else:
        kv_r = 1
    q, kv = heads_r * head_dim, kv_r * head_dim
    projections = [
        Linear("qkv_proj", ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
               q + 2 * kv, hidden, "column", [q, kv, kv], [True, kv_split, kv_split]),
        Linear("o_proj", ["self_attn.o_proj"], hidden, q, "row"),
    ]
    return projections, AttentionShape(heads_r, kv_r, head_dim, head_dim ** -0.5)


def dense_mlp(ctx: HFConfig, hidden: int, inter: int, key: str, tp: int, prefix: str = "mlp",
              role_prefix: str = "") -> list[Linear]:
    """A dense MLP of width `inter` (`key`'s): the MergedColumnParallelLinear gate_up_proj and the
    RowParallelLinear down_proj, `inter` split over tp."""
    inter_r = ctx.div(inter, key, tp, f"--tp {tp}")
    return [
        Linear(role_prefix + "gate_up_proj", [f"{prefix}.gate_proj", f"{prefix}.up_proj"],
               2 * inter_r, hidden, "column", [inter_r, inter_r]),
        Linear(role_prefix + "down_proj", [f"{prefix}.down_proj"], hidden, inter_r, "row"),
    ]


def routed_experts(ctx: HFConfig, prefix: str, num_experts: int, experts_key: str, inter_key: str,
                   hidden: int, par: Parallel, gate_quantized: bool = False) -> tuple[Linear, FusedMoE]:
    """The router gate and the experts of an MoE layer, sharded as vLLM's FusedMoE does:
    without EP every rank holds every expert, with I / (tp * dp); with EP whole experts.
    `gate_quantized`: the model hands the gate vLLM's quant_config (Qwen3-MoE does, in 0.25.0 and
    0.33.0); the others build it with quant_config=None."""
    top_k = ctx.pos_int("num_experts_per_tok")
    inter = ctx.pos_int(inter_key)
    ranks = par.tp * par.dp
    flag = f"--tp {par.tp}" if par.dp == 1 else f"--tp {par.tp} x --dp {par.dp} ({ranks} ranks)"
    if par.ep:
        local = ctx.div(num_experts, experts_key, ranks, flag + " with --enable-expert-parallel")
    else:
        local, inter = num_experts, ctx.div(inter, inter_key, ranks, flag)
    gate = Linear("gate", [f"{prefix}.gate"], num_experts, hidden, "replicated", quantizable=gate_quantized)
    return gate, FusedMoE(f"{prefix}.experts", local, top_k, hidden, inter)


def stack(attention: AttentionShape, projections: list[Linear], is_moe: list[bool],
          mlp: list[Linear] | None = None, moe_linears: list[Linear] | None = None,
          moe: FusedMoE | None = None) -> DecoderLayers:
    """Every layer runs the attention projections, then its MoE block or its dense MLP."""
    return DecoderLayers([projections + (moe_linears if m else mlp) for m in is_moe],
                         [moe if m else None for m in is_moe], attention)
