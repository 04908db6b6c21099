"""The explicit registries: step kind -> handler, backend name -> class, and which
backend a step asks for. Importing this imports no torch, triton or optional library.
"""

from __future__ import annotations

import importlib

from .handlers import attention, autotune, batch, cudagraph, gemm, grouped_gemm, kernel

HANDLERS = {
    "gemm": gemm.handle,
    "grouped_gemm": grouped_gemm.handle,
    "attention": attention.handle,
    "kernel": kernel.handle,
    "autotune": autotune.handle,
    "cudagraph": cudagraph.handle,
    "prefill": batch.handle_execute,
    "decode": batch.handle_execute,
    "cleanup": batch.handle_execute,
    "sample": batch.handle_sample,
}

# Kernel families a backend can implement, and the step kinds of each.
FAMILY_OF_KIND = {"gemm": "gemm", "grouped_gemm": "grouped_gemm", "attention": "attention",
                  "autotune": "autotune", "kernel": "kernel"}

BACKENDS = {
    "triton": ("executor.backends.triton", "TritonBackend"),
    "deep_gemm": ("executor.backends.deep_gemm", "DeepGemmBackend"),
    "flashinfer": ("executor.backends.flashinfer", "FlashInferBackend"),
    "torch": ("executor.backends.torch_backend", "TorchBackend"),
    "null": ("executor.backends.null", "NullBackend"),
}

# Which backend families each one implements (checked at option parsing, without imports).
BACKEND_FAMILIES = {
    "triton": ("gemm", "grouped_gemm", "attention", "autotune", "kernel"),
    "deep_gemm": ("gemm", "grouped_gemm"),
    "flashinfer": ("autotune",),
    "torch": ("gemm",),
    "null": ("gemm", "grouped_gemm", "attention", "autotune", "kernel"),
}

# Attention steps name a kernel, not a backend: the backend that owns each kernel.
ATTENTION_KERNELS = {"context_attention_fwd": "triton", "prefill_attention": "triton"}


def planned_backend(family: str, step: dict) -> str:
    """The backend the plan asks for: the step's `backend`, its autotune `library`, or
    the owner of its attention kernel."""
    if family == "autotune":
        return step["library"]
    if family == "attention":
        return ATTENTION_KERNELS.get(step.get("kernel"), "triton")
    return step["backend"]


def load_backend(name: str):
    """The backend class for a name (imports its module: cheap, never the library itself)."""
    if name not in BACKENDS:
        raise KeyError(name)
    module, cls = BACKENDS[name]
    return getattr(importlib.import_module(module), cls)
