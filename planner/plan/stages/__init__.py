"""Stage kinds: each turns one plan stage plus the engine into concrete steps.

One kind, one small module, found through this explicit registry. A module is imported
when a plan first uses its kind: `warmup plan` pays only for the stages it expands, and the
others (the runner-kernel models above all) are a measurable share of its start-up
(bench/RESULTS.md, part A4).
"""

from __future__ import annotations

import importlib

HANDLERS = {  # stage kind -> (module, function)
    "synthetic_batches": ("batches", "expand"),
    "serving_paths": ("serving_paths", "expand"),
    "deep_gemm": ("deep_gemm", "expand"),
    "triton_gemm": ("triton_gemm", "expand"),
    "flashinfer_autotune": ("autotune", "expand_flashinfer"),
    "kernel_autotune": ("autotune", "expand_kernel"),
    "prefill_attention": ("attention", "expand"),
    "cudagraph_capture": ("cudagraph", "expand"),
    "runner_kernels": ("runner_kernels", "expand"),
    "vllm_sampler_kernels": ("vllm_sampler", "expand"),
    "vllm_fused_moe_kernels": ("vllm_fused_moe", "expand"),
    "flashinfer_jit_modules": ("flashinfer_jit", "expand"),
}


def handler(kind: str):
    """The expand function of a stage kind."""
    module, function = HANDLERS[kind]
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)
