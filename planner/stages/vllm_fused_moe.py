"""vllm_fused_moe_kernels: compile-only launches of vLLM's Triton fused_moe kernel on Hopper.

Under tensor parallelism on SM 9.0, vLLM runs block-FP8 ([128, 128]) and bf16 MoE layers on
Triton's ``fused_moe_kernel``, whose variants (config by token count, Triton's specialization of
the token counts) compile at the first forward that reaches each, and vLLM's warmup warms none of
them. kernel_model.vllm_fused_moe enumerates them from the engine alone over 1..`max_tokens`
tokens a forward, for every distinct fused-MoE layer of the engine: one Kernel step holds them,
each key with the launch that reaches it (backend `vllm_triton`: vLLM's own kernel).

No step where vLLM runs another MoE kernel: expert parallelism (FlashInfer CUTLASS MoE for block
FP8; not modelled), a device other than SM 9.0 H100 / H200, or another quantization. A layer whose
vLLM tuned table the model does not carry is skipped too (its configs would be guesses).

The model is imported only for an engine with MoE layers: it declares dataclasses, which
`warmup plan` imports only where a plan has kernel steps (planner/__init__.py's start-up rule).
"""

from __future__ import annotations

from ..steps import Kernel, Variant
from .scope import Scope


def layer_shape(layer: dict, device: str):
    """The layer as the Triton kernel sees it (a MoeShape), or None when vLLM runs no Triton
    fused_moe for it."""
    from kernel_model import vllm_fused_moe as moe

    quant = layer.get("quant") or {"method": "none"}
    if quant["method"] == "fp8" and list(quant.get("weight_block_size") or ()) == [moe.BLOCK, moe.BLOCK]:
        kind = "fp8_block"
    elif quant["method"] == "none":
        kind = "none"
    else:
        return None
    return moe.MoeShape(layer["num_experts"], layer["hidden_size"], layer["intermediate_size"], layer["top_k"],
                        kind, device)


def shapes(engine: dict) -> list:
    """The engine's distinct Triton fused-MoE layers (MoeShape), in engine order (none under
    expert parallelism, off SM 9.0, or on a device whose tables the model does not name)."""
    if not engine["model"].get("moe"):
        return []
    from kernel_model import vllm_fused_moe as moe

    par, device = engine["parallel"], engine["device"]
    if par["enable_expert_parallel"] and par["tensor_parallel_size"] * par["data_parallel_size"] > 1:
        return []
    if device["capability"] != "9.0" or device["name"] not in moe.DEVICE_NAMES:
        return []
    found = [layer_shape(layer, device["name"]) for layer in engine["model"].get("moe") or ()]
    return list(dict.fromkeys(shape for shape in found if shape is not None))


def variants(engine: dict, max_tokens: int) -> list:
    """Every launch of every layer, first of each key kept (layers whose table is not carried skipped)."""
    layers = shapes(engine)
    if not layers:
        return []
    from kernel_model import vllm_fused_moe as moe

    unique: dict = {}
    for shape in layers:
        try:
            launches = moe.fused_moe_variants(shape, max_tokens)
        except moe.TableNotCarried:
            continue
        for launch in launches:
            unique.setdefault(launch.key(), launch)
    return list(unique.values())


def expand(scope: Scope) -> list:
    max_tokens = scope.integer("max_tokens")
    launches = variants(scope.engine.data, max_tokens)
    if not launches:
        return []
    return [scope.new(Kernel, "fused_moe", backend="vllm_triton", kernel=launches[0].kernel,
                      variants=tuple(Variant(launch.key(), launch) for launch in launches))]
