"""vllm_fused_moe_kernels: compile-only launches of vLLM's Triton fused_moe kernel on Hopper.

Under tensor parallelism on SM 9.0, vLLM runs block-FP8 ([128, 128]) and bf16 MoE layers on
Triton's ``fused_moe_kernel``, whose variants (config by token count, Triton's specialization of
the token counts) compile at the first forward that reaches each, and vLLM's warmup warms none of
them. kernel_model.vllm_fused_moe enumerates them from the engine alone over 1..`max_tokens`
tokens a forward, for every distinct fused-MoE layer of the engine: one Kernel step holds them,
each key with the launch that reaches it (backend `vllm_triton`: vLLM's own kernel).

No step where vLLM runs another MoE kernel: expert parallelism (FlashInfer CUTLASS MoE for block
FP8; not modelled), a device other than SM 9.0 H100 / H200, or another quantization. Of the last,
the plan's not_modelled list names the layers where vLLM's kernel for them compiles at first use
(FP8 per tensor or channel, MXFP4: FlashInfer CUTLASS, Triton's matmul_ogs, ...); AWQ and GPTQ
experts run Marlin's MoE GEMM, compiled ahead of time in vllm._moe_C, which leaves nothing to warm. The configs
come from vLLM's own tuned tables, read where vLLM keeps them (planner/tables/vllm_moe.py); where that is
not known, no step, and the plan's not_modelled list names the layers and how to give the tables.

The model is imported only for an engine with MoE layers: it declares dataclasses, which
`warmup plan` imports only where a plan has kernel steps (planner/__init__.py's start-up rule).
"""

from __future__ import annotations

from ...engine.facts import EngineFacts, MoeLayer
from ..steps import Kernel, Variant
from .scope import Scope

QUANT_WORDS = {"fp8_block": "block FP8", "none": "bf16"}


def layer_shape(layer: MoeLayer, device: str):
    """The layer as the Triton kernel sees it (a MoeShape), or None when vLLM runs no Triton
    fused_moe for it."""
    from kernel_model import vllm_fused_moe as moe

    if layer.quant.is_block_fp8(moe.BLOCK):
        kind = "fp8_block"
    elif layer.quant.method == "none":
        kind = "none"
    else:
        return None
    return moe.MoeShape(layer.num_experts, layer.hidden_size, layer.intermediate_size, layer.top_k, kind, device)


def shapes(engine: EngineFacts) -> list:
    """The engine's distinct Triton fused-MoE layers (MoeShape), in engine order (none under
    expert parallelism, off SM 9.0, or on a device whose tables the model does not name)."""
    if not engine.model.moe:
        return []
    from kernel_model import vllm_fused_moe as moe

    par, device = engine.parallel, engine.device
    if par.enable_expert_parallel and par.tensor_parallel_size * par.data_parallel_size > 1:
        return []
    if device.capability != (9, 0) or device.name not in moe.DEVICE_NAMES:
        return []
    found = [layer_shape(layer, device.name) for layer in engine.model.moe]
    return list(dict.fromkeys(shape for shape in found if shape is not None))


def variants(engine: EngineFacts, max_tokens: int, tables) -> list:
    """Every launch of every layer, first of each key kept; `tables`: planner.tables.vllm_moe.MoeTables."""
    from kernel_model import vllm_fused_moe as moe

    unique: dict = {}
    for shape in shapes(engine):
        for launch in moe.fused_moe_variants(shape, max_tokens, tables.get(shape)):
            unique.setdefault(launch.key(), launch)
    return list(unique.values())


# Quantizations whose experts vLLM runs on a kernel compiled ahead of time: moe_wna16_marlin_gemm
# (vllm._moe_C) for AWQ and GPTQ (fused_moe/oracle/int_wna16.py: MARLIN on SM 8.0 to 9.x).
AHEAD_OF_TIME_QUANTS = ("awq", "gptq")


def unplanned(engine: EngineFacts) -> list:
    """The engine's MoE layers whose quantization this stage does not model and whose kernel is
    not compiled ahead of time, in engine order (none where the stage plans nothing at all)."""
    if not engine.model.moe or (engine.parallel.enable_expert_parallel
                                and engine.parallel.tensor_parallel_size * engine.parallel.data_parallel_size > 1):
        return []
    return [layer for layer in engine.model.moe
            if layer_shape(layer, engine.device.name) is None and layer.quant.method not in AHEAD_OF_TIME_QUANTS]


def unplanned_gap(layers: list) -> dict:
    """The not_modelled entry of MoE layers of a quantization the stage does not model."""
    named = ", ".join(f"{layer.name} (E={layer.num_experts}, N={layer.intermediate_size}, {layer.quant.method})"
                      for layer in layers)
    return {"family": "fused MoE of a quantization the fused_moe stage does not model",
            "why": f"vLLM runs the MoE layers {named} on a kernel it picks for their quantization (FlashInfer "
                   "CUTLASS, vLLM's CUTLASS or Triton MoE for FP8 per tensor or channel, Triton's matmul_ogs or "
                   "FlashInfer for MXFP4), and this stage models Triton's fused_moe for block-FP8 [128, 128] and "
                   "bf16 experts only: the plan warms none of them",
            "action": "keep vLLM's own warmup and flashinfer_autotune on; check the first requests with vLLM's JIT "
                      "monitor (`warmup check --logs` names what compiled after ready)"}


def no_tables_gap(layers: list) -> dict:
    """The not_modelled entry of an expansion that does not know where vLLM's tables are."""
    from ...tables.vllm_moe import HOW

    named = ", ".join(f"E={s.num_experts},N={s.intermediate} ({QUANT_WORDS[s.quant]}, {s.device})" for s in layers)
    return {"family": "Triton fused_moe (vLLM's tuned tables not found)",
            "why": f"the configs of the MoE layers {named} come from vLLM's tuned fused_moe tables, and this "
                   "planner was given no directory of them, so the fused_moe stage planned no step",
            "action": HOW}


def expand(scope: Scope) -> list:
    max_tokens = scope.integer("max_tokens")
    if scope.engine.facts.device.capability == (9, 0) and unplanned(scope.engine.facts):
        scope.notes.gaps.append(unplanned_gap(unplanned(scope.engine.facts)))
    layers = shapes(scope.engine.facts)
    if not layers:
        return []
    from ...tables.vllm_moe import MoeTables

    if scope.notes.moe_tables is None:
        scope.notes.moe_tables = MoeTables()
    if not scope.notes.moe_tables.dirs:
        scope.notes.gaps.append(no_tables_gap(layers))
        return []
    launches = variants(scope.engine.facts, max_tokens, scope.notes.moe_tables)
    return [scope.new(Kernel, "fused_moe", backend="vllm_triton", kernel=launches[0].kernel,
                      variants=tuple(Variant(launch.key(), launch) for launch in launches))]
