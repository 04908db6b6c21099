"""Triton's fixed per-process costs, paid early: in the main process while the workers start, and
in one compile-lane worker for the main process (Triton's CUDA utils module).

Workers fork from a fork server that paid most of them once (executor/worker_preload.py).
"""

from __future__ import annotations

import time


def prime_triton() -> None:
    """Pay Triton's fixed per-process costs now rather than at the first kernel: the hash of
    Triton's own sources and libtriton (hundreds of MB, part of every cache key) and the
    backend's hash (it runs ptxas --version), for the active driver's target. Best effort;
    the fork server did both already when it could (executor/worker_preload.py)."""
    from triton.runtime.driver import driver

    active = driver.active
    active.get_current_device()
    try:
        from triton.runtime.cache import triton_key

        triton_key()
    except Exception:  # noqa: BLE001 - another Triton: the first kernel pays it
        pass
    try:
        from triton.compiler.compiler import make_backend

        make_backend(active.get_current_target()).hash()
    except Exception:  # noqa: BLE001
        pass


def build_cuda_utils() -> float:
    """Build Triton's CUDA utils module (C, compiled with gcc into the shared cache; no CUDA
    call) for the main process, which would otherwise build it at its first kernel (its cost:
    bench/RESULTS.md, part P). Workers compiling offline never need it."""
    began = time.perf_counter()
    from triton.backends.nvidia.driver import CudaUtils

    CudaUtils()
    return round(time.perf_counter() - began, 3)
