"""quantization_config: what each layer's weights are, as vLLM's quantization method for the
checkpoint's quant_method decides it, which modules it leaves unquantized, and the block shapes
vLLM refuses to shard.

The methods, each the kernel vLLM 0.25.0 and 0.33.0 run on it (vllm/model_executor/kernels/linear/
__init__.py's CUDA lists, vllm/model_executor/layers/quantization/):
* none: the model dtype (cuBLAS);
* fp8: weight_block_size -> block FP8 (`fp8`, the kernel choose_scaled_mm_linear_kernel picks:
  planner/engine/vllm_choices.py), else FP8 per tensor (`fp8_per_tensor`: CUTLASS scaled_mm from
  SM 8.9, FP8 Marlin below, both compiled ahead of time in vllm._C);
* compressed-tensors: its FP8 W8A8 schemes (compressed_tensors.py): block, per channel, per tensor;
* awq and gptq: 4-bit (gptq also 8-bit) weights on Machete (SM 9.0) or Marlin, compiled ahead in
  vllm._C (machete_mm, marlin_gemm) like their MoE kernel (moe_wna16_marlin_gemm in vllm._moe_C):
  `awq`, `gptq`, only where Marlin takes the config (else vLLM falls back to AWQ's Triton kernels,
  which compile at first use, and --from-hf refuses it);
* mxfp4 (GPT-OSS): the experts are MXFP4 (`mxfp4`), every linear stays in the model dtype
  (Mxfp4Config.get_quant_method).
Anything else (bitsandbytes, modelopt, fbgemm_fp8, quark, torchao, ...) is refused with what to
do instead (refusal.py).

Which modules stay unquantized is vLLM's own rule for the method, on the checkpoint module names
the layout declares (layouts.py): fp8 names them exactly (is_layer_skipped, match_mode "exact"),
awq by substring (skip_with_substr), compressed-tensors exactly or by a `re:` regular expression
(should_ignore_layer); gptq names the modules it does quantize (modules_in_block_to_quantize, by
substring; vLLM reads the safetensors headers where the config lists none, and --from-hf, which
has no weights, takes every decoder linear as quantized but an MoE router: GPTQ leaves the gate in
16 bits, so Qwen3-MoE's router, which vLLM hands the quant_config, is unquantized there). A fused
linear is skipped where its own
vLLM name is listed or all its checkpoint modules are; some but not all is refused, as vLLM
refuses it. An MoE layer's experts are skipped where an entry naming experts contains their name.

Block-FP8 experts whose per-rank width tensor parallelism leaves not whole checkpoint blocks: vLLM
0.25.0 refuses them (validate_fp8_block_shape_moe), 0.33.0's Fp8MoEMethod refines the blocks to the
finest square block of at least 32 that divides them (refine_fp8_moe_block_shape), which only its
Triton fused-MoE takes: Qwen3-30B-A3B's 768-wide experts at tp 4, 192 per rank, run 64x64 blocks.
The release row says which (planner/engine/releases.py, fp8_moe_block_refine); compressed-tensors'
MoE method does not refine.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from kernel_model.arith import cdiv
from kernel_model.device import parse_capability

from ..releases import VLLM_RELEASES, VllmRelease, supported
from .compressed_tensors import compressed_tensors
from .flags import Parallel
from .layers import DecoderLayers, FusedMoE, Linear
from .refusal import refuse_quantization
from .source import HFConfig


@dataclass(frozen=True, kw_only=True)
class QuantConfig:
    """quantization_config, read: the quant entry of a quantized linear and of quantized experts,
    the modules vLLM leaves unquantized (or, for gptq, quantizes) and how it matches their names.
    Built by keyword only, each default declared here once (tests/planner/test_hf_quantization.py)."""

    linear: dict                # the quant entry of a quantized linear
    experts: dict               # the quant entry of quantized experts
    patterns: list[str] = field(default_factory=list)
    match: str = "exact"        # exact | regex | substring | include (module docstring)
    weight_bits: int = 16       # of a quantized weight, for the memory estimate
    linears: bool = True        # False: the method quantizes the experts only (mxfp4)
    group_size: int = -1        # awq, gptq: weights per scale along K (-1: one group per channel)
    moe_block_refine: bool = False  # Fp8MoEMethod (quant_method fp8): the release may refine split blocks

    @property
    def block(self) -> list[int] | None:
        return self.linear.get("weight_block_size")

    @property
    def quantized(self) -> bool:
        return self.linear["method"] != "none" or self.experts["method"] != "none"


NONE = {"method": "none"}

# quant_method values vLLM maps onto the same config classes (quantization/__init__.py)
_AWQ = ("awq", "awq_marlin", "auto_awq")
_GPTQ = ("gptq", "gptq_marlin", "auto_gptq")
# Marlin's group sizes (quantization/utils/marlin_utils.py MARLIN_SUPPORTED_GROUP_SIZES)
_MARLIN_GROUPS = (-1, 32, 64, 128)


def _names(ctx: HFConfig, qc: dict, *keys: str) -> list[str]:
    """The first of `keys` the config gives, a list of module names (None or absent: none)."""
    value = next((qc[k] for k in keys if qc.get(k)), None) or []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ctx.fail(f"quantization_config.{keys[0]} must be a list of module names")
    return list(value)


def _fp8(ctx: HFConfig, qc: dict) -> QuantConfig:
    """quant_method fp8 (Fp8Config): by block where weight_block_size is given, else per tensor."""
    ignored = _names(ctx, qc, "ignored_layers", "modules_to_not_convert")
    block = qc.get("weight_block_size")
    if block is None:
        entry = {"method": "fp8_per_tensor"}
        return QuantConfig(linear=entry, experts=entry, patterns=ignored, match="exact", weight_bits=8)
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ctx.fail(f"quantization_config.weight_block_size must be two positive integers, got {block!r}")
    entry = {"method": "fp8", "weight_block_size": [block[0], block[1]]}
    return QuantConfig(linear=entry, experts=entry, patterns=ignored, match="exact", weight_bits=8,
                       moe_block_refine=True)


def _int_bits(ctx: HFConfig, qc: dict, method: str, allowed: tuple) -> tuple[int, int]:
    bits, group = qc.get("bits", qc.get("w_bit")), qc.get("group_size", qc.get("q_group_size"))
    if bits not in allowed or group not in _MARLIN_GROUPS:
        raise refuse_quantization(
            ctx, f"{method} with bits {bits!r} and group_size {group!r}: vLLM runs Marlin for "
                 f"{' or '.join(map(str, allowed))}-bit weights in groups of {', '.join(map(str, _MARLIN_GROUPS))}, "
                 "and other configs on kernels the engine config cannot name")
    return bits, group


def _awq(ctx: HFConfig, qc: dict) -> QuantConfig:
    """AutoAWQConfig: Marlin/Machete where check_marlin_supported takes 4-bit weights with zero points."""
    bits, group = _int_bits(ctx, qc, "awq", (4,))
    if qc.get("zero_point") is False:
        raise refuse_quantization(ctx, "awq without zero_point: vLLM's AWQ Marlin needs zero points, and falls "
                                       "back to AWQ's Triton kernels, which the engine config cannot name")
    entry = {"method": "awq"}
    return QuantConfig(linear=entry, experts=entry, patterns=_names(ctx, qc, "modules_to_not_convert"),
                       match="substring", weight_bits=bits, group_size=group)


def _gptq(ctx: HFConfig, qc: dict) -> QuantConfig:
    """AutoGPTQConfig: symmetric 4- or 8-bit weights (TYPE_MAP), on Machete or Marlin."""
    bits, group = _int_bits(ctx, qc, "gptq", (4, 8))
    if qc.get("sym", True) is not True:
        raise refuse_quantization(ctx, "gptq with sym false: vLLM's AutoGPTQConfig takes symmetric weights only")
    if qc.get("lm_head"):
        raise refuse_quantization(ctx, "gptq with a quantized lm_head: its kernel is not one the engine config names")
    if qc.get("dynamic"):
        raise refuse_quantization(ctx, "gptq with per-module `dynamic` overrides: the engine config has one "
                                       "quantization per layer kind")
    listed = qc.get("modules_in_block_to_quantize") or []
    if listed and all(isinstance(x, list) for x in listed):  # GPTQModel writes a list per block
        listed = [name for names in listed for name in names]
    if not isinstance(listed, list) or not all(isinstance(x, str) for x in listed):
        raise ctx.fail("quantization_config.modules_in_block_to_quantize must be a list of module names")
    entry = {"method": "gptq"}
    return QuantConfig(linear=entry, experts=entry, patterns=list(listed), match="include", weight_bits=bits,
                       group_size=group)


def _compressed_tensors(ctx: HFConfig, qc: dict) -> QuantConfig:
    """compressed-tensors' FP8 W8A8 schemes (compressed_tensors.py); `ignore` by name or `re:`."""
    entry, ignore = compressed_tensors(ctx, qc)
    return QuantConfig(linear=entry, experts=dict(entry), patterns=ignore, match="regex", weight_bits=8)


def _mxfp4(ctx: HFConfig, qc: dict) -> QuantConfig:
    """GPT-OSS's MXFP4: the experts only (GptOssMxfp4Config); every linear is left unquantized."""
    return QuantConfig(linear=dict(NONE), experts={"method": "mxfp4"}, patterns=[], match="exact", weight_bits=4,
                       linears=False)


_METHODS = {"fp8": _fp8, "compressed-tensors": _compressed_tensors, **{m: _awq for m in _AWQ},
            **{m: _gptq for m in _GPTQ}, "mxfp4": _mxfp4,
            # the name vLLM gives GPT-OSS's mxfp4 in the config it loaded (GptOssMxfp4Config; --from-vllm reads it)
            "gpt_oss_mxfp4": _mxfp4}


def quant_config(ctx: HFConfig) -> QuantConfig:
    """The checkpoint's quantization, one of _METHODS, or the refusal that says what to do instead."""
    qc = ctx.get("quantization_config")
    if qc is None:
        return QuantConfig(linear=dict(NONE), experts=dict(NONE))
    if not isinstance(qc, dict):
        raise ctx.fail(f"quantization_config must be an object, got {type(qc).__name__}")
    method = qc.get("quant_method")
    reader = _METHODS.get(method) if isinstance(method, str) else None
    if reader is None:
        raise refuse_quantization(ctx, f"quant_method {method!r} is not planned by --from-hf (it plans "
                                       f"{', '.join(sorted(set(_METHODS)))}); its kernels are not ones the "
                                       "engine config names")
    return reader(ctx, qc)


def _listed(name: str, quant: QuantConfig) -> bool:
    """Whether vLLM's rule for the method (module docstring) matches the full module name."""
    if quant.match == "exact":
        return name in quant.patterns
    if quant.match == "regex":
        return any(p == name or (p.startswith("re:") and re.match(p[3:], name)) for p in quant.patterns)
    return any(p in name for p in quant.patterns)  # substring (awq), include (gptq)


def _skipped(ctx: HFConfig, lin: Linear, prefix: str, layer: int, quant: QuantConfig) -> bool:
    """Whether vLLM leaves the linear unquantized: its own name or all its shards listed (gptq: not
    listed), some but not all refused as vLLM refuses them."""
    if quant.match == "include":
        if not quant.patterns:  # vLLM reads the safetensors headers (AutoGPTQConfig.maybe_update_config):
            return lin.router   # every decoder linear is quantized there but the MoE router, left in 16 bits
        shards = [not _listed(prefix + m, quant) for m in lin.modules]
    else:
        if len(lin.modules) > 1 and _listed(prefix + lin.name, quant):
            return True  # vLLM honours the fused name first (is_layer_skipped, should_ignore_layer)
        shards = [_listed(prefix + m, quant) for m in lin.modules]
    if any(shards) and not all(shards):
        raise ctx.fail(
            f"quantization_config leaves only some of the modules that vLLM fuses into {lin.role} "
            f"in layer {layer} ({', '.join(prefix + m for m in lin.modules)}) unquantized; vLLM refuses that")
    return all(shards)


def linear_quant(ctx: HFConfig, lin: Linear, layer: int, quant: QuantConfig, layers: str = "model.layers") -> dict:
    """A linear's quant entry in `layer` (`layers`: the decoder layers' prefix): none where the model
    builds it unquantized, the method quantizes no linear, or vLLM's rule skips it."""
    if not lin.quantizable or not quant.linears or quant.linear["method"] == "none":
        return dict(NONE)
    if _skipped(ctx, lin, f"{layers}.{layer}.", layer, quant):
        return dict(NONE)
    return dict(quant.linear)


def moe_quant(moe: FusedMoE, layer: int, quant: QuantConfig, layers: str = "model.layers") -> dict:
    """The experts' quant entry in `layer`: none where the checkpoint leaves them (or a module in
    them) unquantized."""
    if quant.experts["method"] == "none":
        return dict(NONE)
    prefix = f"{layers}.{layer}.{moe.prefix}"
    if quant.match == "include":
        listed = not quant.patterns or any(p in prefix or p.startswith(moe.prefix) for p in quant.patterns)
        return dict(quant.experts) if listed else dict(NONE)
    if _listed(prefix, quant) or any(prefix in p for p in quant.patterns if "experts" in p):
        return dict(NONE)
    return dict(quant.experts)


def padded_experts(hidden: int, inter: int, quant: dict, capability: str) -> tuple[int, int]:
    """(hidden_size, intermediate_size) of experts as vLLM allocates them: MXFP4 experts padded to
    their kernel's tile (mxfp4_round_up_hidden_size_and_intermediate_size, fused_moe/oracle/mxfp4.py):
    GPT-OSS runs Triton's matmul_ogs on SM 9.x (intermediate to 64), FlashInfer's TRT-LLM MoE on
    SM 10.x (both to 256), Marlin elsewhere (intermediate to 128, hidden to 256)."""
    if quant["method"] != "mxfp4":
        return hidden, inter
    major, _minor = parse_capability(capability)
    hidden_tile, inter_tile = {9: (1, 64), 10: (256, 256)}.get(major, (256, 128))
    return cdiv(hidden, hidden_tile) * hidden_tile, cdiv(inter, inter_tile) * inter_tile


def weight_bytes(quant: dict, dtype_bytes: int, config: QuantConfig) -> float:
    """Bytes of one weight of a layer with the quant entry `quant` (scales ignored)."""
    if quant["method"] == "none":
        return dtype_bytes
    if quant["method"].startswith("fp8"):
        return 1
    return config.weight_bits / 8


def _check_block(ctx: HFConfig, what: str, value: int, block: int, dim: str, hint: str = "") -> None:
    if value % block:
        raise ctx.fail(
            f"quantization_config.weight_block_size: {what} = {value} per rank is not divisible by "
            f"block_{dim} {block}; vLLM refuses this shard{hint}")


def refine_fp8_moe_block_shape(block: list[int], width: int, hidden: int, moe_tp: int) -> list[int] | None:
    """vLLM 0.33.0's refine_fp8_moe_block_shape (fused_moe/oracle/fp8.py): experts `width` wide per rank
    (intermediate_size_per_partition) that are not whole blocks of N, or of K where the MoE is split
    over `moe_tp` > 1 ranks, take square blocks of gcd(block_n, block_k, width, hidden_size) where that
    is at least 32; None where no refinement is needed or none is possible."""
    block_n, block_k = block
    if width % block_n == 0 and (moe_tp == 1 or width % block_k == 0):
        return None
    refine = math.gcd(block_n, block_k, width, hidden)
    return [refine, refine] if refine >= 32 else None


def _moe_tp(par: Parallel) -> int:
    """The ranks vLLM's FusedMoEConfig splits an expert over (tp_size): tp x dp, or 1 under expert parallelism."""
    return 1 if par.ep else par.tp * par.dp


def experts_block(quant: QuantConfig, moe: FusedMoE, par: Parallel, release: VllmRelease) -> list[int] | None:
    """The blocks vLLM runs block-FP8 experts with: refined where the release's Fp8MoEMethod refines
    blocks a shard splits (resolve_fp8_moe_weight_block_shape, moe_backend auto), else the checkpoint's."""
    if quant.block is None or not (quant.moe_block_refine and release.fp8_moe_block_refine):
        return quant.block
    refined = refine_fp8_moe_block_shape(quant.block, moe.intermediate_size, moe.hidden_size, _moe_tp(par))
    return refined or quant.block


def with_experts_block(entry: dict, moe: FusedMoE, quant: QuantConfig, par: Parallel, release: VllmRelease) -> dict:
    """The experts' quant entry with the blocks vLLM runs them with (experts_block)."""
    if "weight_block_size" not in entry:
        return entry
    return {**entry, "weight_block_size": experts_block(quant, moe, par, release)}


def _refining_release(quant: QuantConfig, moe: FusedMoE, par: Parallel) -> str:
    """The hint of a refused expert shard: the supported release whose Fp8MoEMethod refines it, if any."""
    for version in supported():
        row = VLLM_RELEASES[version]
        if experts_block(quant, moe, par, row) != quant.block:
            return f", or --vllm-release {version}, whose Fp8MoEMethod refines the blocks"
    return ""


def check_fp8_blocks(ctx: HFConfig, layers: DecoderLayers, quant: QuantConfig, par: Parallel,
                     release: VllmRelease) -> None:
    """Refuse what vLLM refuses: a sharded N (or K) that is not a whole number of blocks, of experts
    whose blocks the release does not refine (experts_block)."""
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
    for moe in dict.fromkeys(moe for moe in layers.moes if moe is not None):
        if experts_block(quant, moe, par, release) != block:
            continue  # refined: the release's Triton fused-MoE takes the finer blocks
        hint = "" if par.ep else f" (try --enable-expert-parallel{_refining_release(quant, moe, par)})"
        _check_block(ctx, "moe_intermediate_size", moe.intermediate_size, block[0], "n", hint)
        if _moe_tp(par) > 1:
            _check_block(ctx, "moe_intermediate_size", moe.intermediate_size, block[1], "k", hint)
