"""quant_method compressed-tensors (llm-compressor's checkpoints, RedHatAI's FP8 models): the FP8
W8A8 schemes, as vLLM's CompressedTensorsConfig maps them (vllm/model_executor/layers/quantization/
compressed_tensors/compressed_tensors.py, _get_scheme_from_parts and _is_fp8_w8a8, 0.25.0 and 0.33.0).

CompressedTensorsW8A8Fp8 (schemes/compressed_tensors_w8a8_fp8.py) takes float 8-bit symmetric
static weights and float 8-bit activations, dynamic or static per tensor, and hands the layer to
the same FP8 kernel selection as quant_method fp8 (init_fp8_linear_kernel):
* weights by block (strategy block, block_structure [n, k]; dynamic per-group activations):
  block FP8, the engine's `fp8` with that weight_block_size;
* weights per channel (the "FP8-dynamic" checkpoints: per-token dynamic activations):
  `fp8_per_channel`, CUTLASS's scaled_mm on SM 8.9 and up (compiled ahead in vllm._C);
* weights per tensor: `fp8_per_tensor`, the same kernel.
Nothing of these compiles at start-up on Hopper but the block-FP8 kernels the plans warm.
Config groups that target attention only are skipped, as vLLM skips them; any other scheme
(integer or 4-bit weights, NVFP4, MXFP4, FP8 weights with 16-bit activations) and checkpoints with
more than one scheme are refused with what to do instead. The `ignore` list names modules exactly
or by `re:` regular expression (quantization.py).
"""

from __future__ import annotations

from .refusal import refuse_quantization
from .source import HFConfig

_STRATEGIES = {"tensor": "fp8_per_tensor", "channel": "fp8_per_channel"}


def _fp8_w8a8(weights: dict, activations: dict | None) -> bool:
    """_is_fp8_w8a8: float 8-bit symmetric static weights by tensor, channel or block, and float
    8-bit activations, dynamic or symmetric per tensor."""
    if not isinstance(weights, dict) or not isinstance(activations, dict):
        return False
    weight_ok = (weights.get("type") == "float" and weights.get("num_bits") == 8 and weights.get("symmetric", True)
                 and not weights.get("dynamic") and weights.get("strategy") in ("tensor", "channel", "block"))
    act_ok = activations.get("type") == "float" and activations.get("num_bits") == 8
    per_tensor = activations.get("symmetric", True) and activations.get("strategy") == "tensor"
    return weight_ok and act_ok and (bool(activations.get("dynamic")) or per_tensor)


def _describe(weights, activations) -> str:
    if not isinstance(weights, dict):
        return "no weight quantization"
    act = "16-bit activations" if not isinstance(activations, dict) else \
        f"{activations.get('type')} {activations.get('num_bits')}-bit activations"
    return f"{weights.get('type')} {weights.get('num_bits')}-bit {weights.get('strategy')} weights with {act}"


def _entry(ctx: HFConfig, name: str, group: dict) -> dict:
    """The engine's quant entry of one config group's scheme, or the refusal."""
    weights, activations = group.get("weights"), group.get("input_activations")
    if not _fp8_w8a8(weights, activations):
        raise refuse_quantization(
            ctx, f"compressed-tensors config group {name!r} has {_describe(weights, activations)}: --from-hf plans "
                 "its FP8 W8A8 schemes (weights by tensor, channel or block) only")
    if weights["strategy"] != "block":
        return {"method": _STRATEGIES[weights["strategy"]]}
    block = weights.get("block_structure")
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ctx.fail(f"quantization_config.config_groups.{name}.weights.block_structure must be two positive "
                       f"integers, got {block!r}", "quantization_config")
    return {"method": "fp8", "weight_block_size": [block[0], block[1]]}


def compressed_tensors(ctx: HFConfig, qc: dict) -> tuple[dict, list[str]]:
    """(the quant entry of a quantized layer, the ignore list) of a compressed-tensors checkpoint."""
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ctx.fail("quantization_config.config_groups is missing (compressed-tensors)", "quantization_config")
    entries = []
    for name, group in groups.items():
        targets = group.get("targets") if isinstance(group, dict) else None
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise ctx.fail(f"quantization_config.config_groups.{name}.targets must be a list of names",
                           "quantization_config")
        if len(targets) == 1 and targets[0].endswith("Attention"):
            continue  # attention (KV-cache) quantization: vLLM skips the group (from_config)
        if "Linear" not in targets:
            raise refuse_quantization(ctx, f"compressed-tensors config group {name!r} targets {targets}: --from-hf "
                                           "plans groups that target every Linear")
        entries.append(_entry(ctx, name, group))
    if len({str(e) for e in entries}) != 1:
        raise refuse_quantization(ctx, "compressed-tensors with no or several schemes: the engine config has one "
                                       "quantization per layer kind")
    ignore = qc.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(x, str) for x in ignore):
        raise ctx.fail("quantization_config.ignore must be a list of module names", "quantization_config")
    return entries[0], list(ignore)
