"""The engine's `model.linear` and `model.moe` entries: one per role, shape and quantization,
counting the layers that have it; and lm_head, the vocabulary padded and split over tp as vLLM's
VocabParallelEmbedding does.
"""

from __future__ import annotations

from kernel_model.arith import cdiv

from ..releases import VllmRelease
from .flags import Parallel
from .layers import DecoderLayers
from .model import Model
from .quantization import QuantConfig, linear_quant, moe_quant, padded_experts, with_experts_block
from .source import HFConfig
from .wna16 import check_linear_groups, experts_quant


VOCAB_PADDING = 64  # vLLM DEFAULT_VOCAB_PADDING_SIZE


def _name_unquantized(entries: list[dict]) -> list[dict]:
    """A name that is quantized in some layers only: its unquantized entry is <name>.unquantized."""
    methods: dict = {}
    for entry in entries:
        methods.setdefault(entry["name"], set()).add(entry["quant"]["method"])
    for entry in entries:
        if len(methods[entry["name"]]) > 1 and entry["quant"]["method"] == "none":
            entry["name"] += ".unquantized"
    return entries


def linear_entries(ctx: HFConfig, layers: DecoderLayers, quant: QuantConfig, prefix: str, tp: int = 1,
                   capability: str = "9.0") -> list[dict]:
    """One entry per (role, shape, quantization), counting the layers that have it (`prefix`: the
    decoder layers' module prefix, where a checkpoint's ignore list names them); an AWQ or GPTQ
    layer whose per-rank K is not whole groups refused where vLLM's kernels do (wna16.py)."""
    groups: dict = {}
    for i, lins in enumerate(layers.linears):
        for lin in lins:
            q = linear_quant(ctx, lin, i, quant, prefix)
            check_linear_groups(ctx, lin, i, q, quant, tp, capability)
            key = (lin.role, lin.n, lin.k, tuple(sorted((k, str(v)) for k, v in q.items())))
            if key not in groups:
                groups[key] = {"name": lin.role, "n": lin.n, "k": lin.k, "count": 0, "quant": q}
            groups[key]["count"] += 1
    return _name_unquantized(list(groups.values()))


def vocab_per_rank(ctx: HFConfig, model: Model, tp: int) -> int:
    """lm_head's N: vLLM pads the vocabulary, then splits it over tp (VocabParallelEmbedding)."""
    padded = cdiv(model.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    return ctx.div(padded, f"vocab_size padded to a multiple of {VOCAB_PADDING}", tp, f"--tp {tp}")


def lm_head(ctx: HFConfig, model: Model, tp: int) -> dict:
    """lm_head's entry: vocab_per_rank wide, and unquantized in every checkpoint vLLM loads."""
    return {"name": "lm_head", "n": vocab_per_rank(ctx, model, tp), "k": model.hidden_size, "count": 1,
            "quant": {"method": "none"}}


def moe_entries(ctx: HFConfig, layers: DecoderLayers, quant: QuantConfig, prefix: str, capability: str,
                par: Parallel, release: VllmRelease) -> list[dict]:
    """One entry per (experts, intermediate size, quantization), counting the layers; the sizes as
    vLLM allocates them on a GPU of `capability` (padded_experts); AWQ and GPTQ experts that
    Marlin's MoE GEMM does not take run vLLM's MoeWNA16 (wna16.py); block-FP8 experts in the blocks
    the release runs them with (quantization.experts_block)."""
    groups: dict = {}
    for i, moe in enumerate(layers.moes):
        if moe is None:
            continue
        q = with_experts_block(experts_quant(ctx, moe, moe_quant(moe, i, quant, prefix), quant, i), moe, quant,
                               par, release)
        hidden, inter = padded_experts(moe.hidden_size, moe.intermediate_size, q, capability)
        key = (moe.num_experts, inter, q["method"])
        if key not in groups:
            groups[key] = {"name": "experts", "num_experts": moe.num_experts, "top_k": moe.top_k,
                           "hidden_size": hidden, "intermediate_size": inter, "count": 0, "quant": q}
        groups[key]["count"] += 1
    return _name_unquantized(list(groups.values()))
