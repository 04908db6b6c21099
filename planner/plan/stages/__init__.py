"""Stage kinds: each turns one plan stage plus the engine into concrete steps.

One kind, one small module, found through this explicit registry. A module is imported
when a plan first uses its kind: `warmup plan` pays only for the stages it expands, and the
others (the runner-kernel models above all) are a measurable share of its start-up
(bench/RESULTS.md, part A4).

    batches.py         synthetic_batches: vLLM's `warmup_kernels` as explicit scheduler steps
    serving_paths.py   serving_paths: the paths a served request takes that warmup_kernels' batch never does
    deep_gemm.py       deep_gemm: DeepGEMM's JIT warmup as explicit (kernel, shape, M-values) steps
    triton_gemm.py     triton_gemm: the executor's own Triton block-FP8 GEMMs (dense and grouped MoE)
    autotune.py        flashinfer_autotune, kernel_autotune: FlashInfer's tuning run, the executor's kernels' tuning
    attention.py       prefill_attention: direct calls of a prefill attention kernel, one per layer key
    cudagraph.py       cudagraph_capture: the CUDA-graph sizes vLLM captures
    runner_kernels.py  runner_kernels: one compile-only launch per compile key of the reference runner's kernels
    vllm_sampler.py    vllm_sampler_kernels: compile-only launches of vLLM 0.25's Triton top-k/top-p sampler kernel
    vllm_fused_moe.py  vllm_fused_moe_kernels: compile-only launches of vLLM's Triton fused_moe kernel on Hopper
    flashinfer_jit.py  flashinfer_jit_modules: FlashInfer's JIT modules an engine builds at first use, built ahead
    scope.py           what a stage handler sees: its parameters, evaluated against engine names
    gaps.py            the not-modelled entries the engine itself implies, whatever stages a plan has
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
