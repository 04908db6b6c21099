"""quantization_config: FP8 per tensor or by block, the modules it leaves unquantized
(ignored_layers or modules_to_not_convert), and the block shapes vLLM refuses to shard.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .flags import Parallel
from .layers import DecoderLayers, FusedMoE, Linear
from .source import HFConfig


@dataclass
class QuantConfig:
    """quantization_config, read: what a quantized weight's quant entry is, and what is left unquantized."""

    base: dict          # the quant entry of a quantized weight
    ignored: list[str]  # ignored_layers / modules_to_not_convert patterns

    @property
    def block(self) -> list[int] | None:
        return self.base.get("weight_block_size")


def quant_config(ctx: HFConfig) -> QuantConfig:
    """None, FP8 per tensor, or FP8 by block (weight_block_size): the methods the engine schema names."""
    qc = ctx.get("quantization_config")
    if qc is None:
        return QuantConfig({"method": "none"}, [])
    if not isinstance(qc, dict):
        raise ctx.fail(f"quantization_config must be an object, got {type(qc).__name__}")
    method = qc.get("quant_method")
    if method != "fp8":
        raise ctx.fail(f"quantization_config.quant_method {method!r} is not supported (supported: 'fp8')")
    ignored = qc.get("ignored_layers") or qc.get("modules_to_not_convert") or []
    if not isinstance(ignored, list) or not all(isinstance(x, str) for x in ignored):
        raise ctx.fail("quantization_config.ignored_layers / modules_to_not_convert must be a list of names")
    block = qc.get("weight_block_size")
    if block is None:
        return QuantConfig({"method": "fp8_per_tensor"}, list(ignored))
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ctx.fail(f"quantization_config.weight_block_size must be two positive integers, got {block!r}")
    return QuantConfig({"method": "fp8", "weight_block_size": [block[0], block[1]]}, list(ignored))


def _matches(name: str, patterns: list[str]) -> bool:
    """Whether an ignored_layers pattern names the module `name`: its full name, a dotted suffix of it,
    or, after `re:`, a regular expression."""
    for p in patterns:
        if p.startswith("re:"):
            if re.match(p[3:], name):
                return True
        elif name == p or name.endswith("." + p):
            return True
    return False


def linear_quant(ctx: HFConfig, lin: Linear, layer: int, quant: QuantConfig) -> dict:
    """A linear's quant entry in `layer`: none where the model builds it unquantized or the checkpoint
    ignores it; vLLM refuses a fused weight whose modules are ignored in part."""
    if not lin.quantizable or quant.base["method"] == "none":
        return {"method": "none"}
    prefix = f"model.layers.{layer}."
    skipped = [_matches(prefix + m, quant.ignored) for m in lin.modules]
    if all(skipped):
        return {"method": "none"}
    if any(skipped):
        raise ctx.fail(
            f"quantization_config ignores only some of the modules that vLLM fuses into {lin.role} "
            f"in layer {layer} ({', '.join(prefix + m for m in lin.modules)}); vLLM refuses that")
    return dict(quant.base)


def moe_quant(moe: FusedMoE, layer: int, quant: QuantConfig) -> dict:
    """The experts' quant entry in `layer`: none where the checkpoint ignores them or a module in them."""
    if quant.base["method"] == "none":
        return {"method": "none"}
    prefix = f"model.layers.{layer}.{moe.prefix}"
    if _matches(prefix, quant.ignored) or any(p.startswith(prefix + ".") for p in quant.ignored):
        return {"method": "none"}
    return dict(quant.base)


def _check_block(ctx: HFConfig, what: str, value: int, block: int, dim: str, hint: str = "") -> None:
    if value % block:
        raise ctx.fail(
            f"quantization_config.weight_block_size: {what} = {value} per rank is not divisible by "
            f"block_{dim} {block}; vLLM refuses this shard{hint}")


def check_fp8_blocks(ctx: HFConfig, layers: DecoderLayers, quant: QuantConfig, par: Parallel) -> None:
    """Refuse what vLLM refuses: a sharded N (or K) that is not a whole number of blocks."""
    block = quant.block
    if not block:
        return
    if par.tp > 1:  # unsharded linears are whole weights, any shape loads
        for lin in dict.fromkeys(lin for lins in layers.linears for lin in lins if lin.quantizable):
            if lin.mode == "column":
                for part in lin.sharded_parts():
                    _check_block(ctx, f"{lin.role} output partition", part, block[0], "n")
            elif lin.mode == "row":
                _check_block(ctx, f"{lin.role} input", lin.k, block[1], "k")
    hint = "" if par.ep else " (try --enable-expert-parallel)"
    for moe in dict.fromkeys(moe for moe in layers.moes if moe is not None):
        _check_block(ctx, "moe_intermediate_size", moe.intermediate_size, block[0], "n", hint)
        if par.tp * par.dp > 1 and not par.ep:
            _check_block(ctx, "moe_intermediate_size", moe.intermediate_size, block[1], "k", hint)
