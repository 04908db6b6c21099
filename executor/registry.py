"""The explicit registries: step kind -> handler, and backend name -> class.

Importing this imports no torch, triton or optional library: backend modules import
their libraries inside ``available()`` and the family methods. A backend class says
which kernel families it implements (``families``); the families themselves are the
step kinds' (planner.steps.FAMILIES).
"""

from __future__ import annotations

import importlib

from planner import steps

from .handlers import autotune, cudagraph, family, runner

HANDLERS = {
    steps.Prefill: runner.handle,
    steps.Decode: runner.handle,
    steps.Cleanup: runner.handle,
    steps.Sample: runner.handle,
    steps.CudaGraph: cudagraph.handle,
    steps.Autotune: autotune.handle,
    steps.Gemm: family.handle,
    steps.GroupedGemm: family.handle,
    steps.Attention: family.handle,
    steps.Kernel: family.handle,
}

BACKENDS = {
    "triton": ("executor.backends.triton", "TritonBackend"),
    "deep_gemm": ("executor.backends.deep_gemm", "DeepGemmBackend"),
    "flashinfer": ("executor.backends.flashinfer", "FlashInferBackend"),
    "torch": ("executor.backends.torch_backend", "TorchBackend"),
    "null": ("executor.backends.null", "NullBackend"),
}


def load_backend(name: str):
    """The backend class for a name (imports its module: cheap, never the library itself)."""
    if name not in BACKENDS:
        raise KeyError(name)
    module, cls = BACKENDS[name]
    return getattr(importlib.import_module(module), cls)


def writes_deep_gemm(name: str) -> bool:
    """Whether a backend's compiles land in DeepGEMM's JIT cache (its class's ``jit_cache``)."""
    try:
        return getattr(load_backend(name), "jit_cache", None) == "deep_gemm"
    except Exception:  # noqa: BLE001 - unknown or broken: it writes nothing we count
        return False


def backend_families(name: str) -> tuple[str, ...]:
    """The kernel families a backend implements, as its class declares them."""
    return load_backend(name).families
