"""The class a worker runs each backend with, and what that class asks of its worker process.

A worker runs a backend's compile-only twin where it has one: Triton's compiles for the GPU's
target from stand-in tensors (executor/backends/triton_compile.py), FlashInfer's builds its modules
without loading them. A twin that never touches CUDA (``cuda_free``) puts its jobs in the compile
lane (lanes.py); the modules a class needs imported up front (``worker_preload``) are imported once
by the fork server the workers come from (processes.py).
"""

from __future__ import annotations

import importlib

from ... import registry

WORKER_CLASSES = registry.WORKER_CLASSES  # the twins, declared in the backends' rows (executor/registry.py)


def worker_specs(backends) -> dict:
    """The class each worker runs a backend with: its compile-only twin where it has one."""
    return {name: WORKER_CLASSES.get(name) or registry.backend_spec(name) for name in sorted(set(backends))
            if name in registry.known_backends()}


def cuda_free(name: str) -> bool:
    """Whether a backend's jobs run in a worker without a CUDA context (its compile-only twin)."""
    module, cls = WORKER_CLASSES.get(name) or (None, None)
    if module is None:
        return False
    try:
        return bool(getattr(getattr(importlib.import_module(module), cls), "cuda_free", False))
    except Exception:  # noqa: BLE001 - a broken twin: its jobs fail and say it
        return False


def preload_of(specs) -> list:
    """The modules the fork server imports for the backends of `specs` (their ``worker_preload``)."""
    return sorted({m for name in specs for m in registry.backend_attr(name, "worker_preload", ())})
