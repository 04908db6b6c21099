"""AWQ and GPTQ weights in groups along K (vLLM's WNA16: 4- or 8-bit weights, 16-bit activations):
which kernel vLLM gives each layer once tensor parallelism has split K, and what it refuses.

Linears (vLLM 0.25.0 and 0.33.0 alike):
* AWQ (quantization/auto_awq.py, AutoAWQConfig.get_quant_method): Marlin where
  check_marlin_supports_layer (utils/marlin_utils.py, allow_tile_padding) holds: a group size of -1,
  one at least the layer's whole K, or a per-rank K of whole groups; else AutoAWQLinearMethod,
  whose create_weights raises "The input size is not aligned with the quantized weight shape":
  vLLM refuses the layer, and so does --from-hf.
* GPTQ (quantization/auto_gptq.py, AutoGPTQLinearMethod): choose_mp_linear_kernel's CUDA list
  (kernels/linear/__init__.py). On SM 9.0 Machete comes first (mixed_precision/machete.py:
  groups of -1, 64 or 128, a per-rank K a multiple of 64 and N of 128: MACHETE_PREPACKED_BLOCK_SHAPE),
  and takes a K that is not whole groups. Elsewhere Marlin refuses a group split between ranks
  (MarlinLinearKernel.can_implement), and vLLM goes on to Exllama (float16 activations) or Humming
  (humming-kernels, which vLLM's wheel requires), kernels the engine config does not name: --from-hf
  refuses that layer with what to do instead.

Experts (FusedMoE): Marlin's MoE GEMM, compiled ahead of time, where check_moe_marlin_supports_layer
holds (hidden_size a multiple of 128, the per-rank intermediate size whole groups; 0.25.0's GPTQ
with desc_act keeps the strict shape, which --from-hf does not model); else vLLM falls back to
MoeWNA16Config (quantization/moe_wna16.py), whose experts run vLLM's Triton WNA16 fused-MoE kernel,
compiled at first use: the engine's `moe_wna16`, which no plan stage warms (the plans' not-modelled
list names it). MoeWNA16Method.create_weights halves the group size until it divides the
per-rank intermediate size and hidden_size, and asserts it stays at least 32: below that vLLM
refuses the layer, and so does --from-hf.
"""

from __future__ import annotations

from .layers import FusedMoE, Linear
from .quantization import QuantConfig
from .refusal import refuse_quantization
from .source import HFConfig

WNA16_METHODS = ("awq", "gptq")
MACHETE_GROUPS = (-1, 64, 128)      # query_machete_supported_group_sizes, 16-bit activations
MACHETE_BLOCK = (64, 128)           # MACHETE_PREPACKED_BLOCK_SHAPE: (K, N) per rank
MOE_MARLIN_GROUPS = (-1, 32, 64, 128)
MOE_WNA16_MIN_GROUP = 32            # MoeWNA16Method.create_weights: assert group_size >= 32


def whole_groups(k_rank: int, k_full: int, group: int) -> bool:
    """check_marlin_supports_layer with tile padding: no group is split between two ranks."""
    return group == -1 or group >= k_full or k_rank % group == 0


def machete_takes(lin: Linear, group: int, capability: str) -> bool:
    """MacheteLinearKernel.can_implement: SM 9.0 only, its group sizes, K % 64 and N % 128 per rank."""
    return (capability == "9.0" and group in MACHETE_GROUPS
            and lin.k % MACHETE_BLOCK[0] == 0 and lin.n % MACHETE_BLOCK[1] == 0)


def check_linear_groups(ctx: HFConfig, lin: Linear, layer: int, entry: dict, quant: QuantConfig, tp: int,
                        capability: str) -> None:
    """Refuse an AWQ or GPTQ linear whose per-rank K is not whole groups where vLLM refuses it (AWQ)
    or runs it on a kernel the engine config does not name (GPTQ off Machete): module docstring."""
    if entry["method"] not in WNA16_METHODS:
        return
    group = quant.group_size
    k_full = lin.k * tp if lin.mode == "row" else lin.k
    if whole_groups(lin.k, k_full, group):
        return
    split = (f"{lin.role} in layer {layer} has K = {lin.k} per rank (--tp {tp}), which is not whole groups of "
             f"{group}")
    if entry["method"] == "awq":
        raise ctx.fail(f"quantization_config.group_size: {split}; vLLM refuses it (AutoAWQLinearMethod: the input "
                       "size is not aligned with the quantized weight shape); use a smaller --tp",
                       "quantization_config")
    if not machete_takes(lin, group, capability):
        raise refuse_quantization(
            ctx, f"gptq: {split}; vLLM's Marlin refuses a group split between ranks, and vLLM runs the layer on "
                 "Exllama or Humming instead, kernels the engine config does not name; use a smaller --tp")


def marlin_moe_takes(moe: FusedMoE, group: int) -> bool:
    """check_moe_marlin_supports_layer (utils/marlin_utils.py, allow_tile_padding=True)."""
    whole = group <= 0 or moe.intermediate_size % group == 0
    return moe.hidden_size % 128 == 0 and whole and group in MOE_MARLIN_GROUPS


def _moe_wna16_group(ctx: HFConfig, moe: FusedMoE, group: int, layer: int) -> int:
    """MoeWNA16Method.create_weights: the group halved until it divides both sizes, at least 32."""
    size = group
    while size > 0 and (moe.intermediate_size % size or moe.hidden_size % size):
        size //= 2
        if size < MOE_WNA16_MIN_GROUP:
            raise ctx.fail(f"quantization_config.group_size: the experts of layer {layer} are "
                           f"{moe.intermediate_size} wide per rank and {moe.hidden_size} deep, which no group of "
                           f"at least {MOE_WNA16_MIN_GROUP} dividing {group} divides; vLLM's MoeWNA16 kernel "
                           "refuses them (MoeWNA16Method.create_weights); use a smaller --tp or "
                           "--enable-expert-parallel", "quantization_config")
    return size


def experts_quant(ctx: HFConfig, moe: FusedMoE, entry: dict, quant: QuantConfig, layer: int) -> dict:
    """The experts' quant entry as vLLM runs them: AWQ and GPTQ experts that Marlin's MoE GEMM does
    not take are `moe_wna16` (module docstring)."""
    if entry["method"] not in WNA16_METHODS or marlin_moe_takes(moe, quant.group_size):
        return entry
    _moe_wna16_group(ctx, moe, quant.group_size, layer)
    return {"method": "moe_wna16"}
