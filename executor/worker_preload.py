"""Imported once by the precompile pool's fork server, before it forks every worker.

Importing torch, Triton and the kernels takes seconds per process, and sixteen workers
doing it at once took 6.2 s on an H100 (16 cores, 2026-11-23). The fork server imports
them once and forks each worker from itself: a worker starts with everything imported
(and Triton's driver module built); a job that launches a kernel creates its CUDA context.
Forking is safe here because the server never touches the GPU (nothing below creates a CUDA context; CUDA forbids only forking a
process that has one). Triton's hash of its own sources and libtriton (part of every
cache key) is computed once here too.
"""

import torch  # noqa: F401
import triton  # noqa: F401

from executor.backends import triton as _triton_backend  # noqa: F401
from executor.kernels import fp8_gemm, grouped_gemm, prefill_attention  # noqa: F401
from executor.runner import kernels as _runner_kernels  # noqa: F401

try:
    from triton.runtime.cache import triton_key

    triton_key()
except Exception:  # noqa: BLE001 - another Triton: each worker pays it at its first compile
    pass

try:
    # Triton's CUDA utils module is C compiled with gcc into the (maybe empty) cache, and
    # the backend's hash runs `ptxas --version`: neither calls CUDA, so both are done once
    # here; the workers inherit the built module on disk and the cached version.
    from triton.backends.nvidia.compiler import get_ptxas_version
    from triton.backends.nvidia.driver import CudaUtils

    CudaUtils()
    get_ptxas_version(90)
except Exception:  # noqa: BLE001 - not the NVIDIA backend: each worker pays it
    pass
