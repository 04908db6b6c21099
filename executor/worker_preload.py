"""Imported once by the precompile pool's fork server, before it forks every worker.

A worker compiles Triton variants from their sizes (executor/backends/triton_compile.py):
it needs Triton and the executor's kernel sources, not torch. So the fork server imports
Triton and not torch, whose import dominates a worker's start-up (bench/RESULTS.md, part P);
the pool adds torch to the preload list only when DeepGEMM jobs need it. Triton's native
argument specializer imports torch at its first call, for an optional fast path on
``torch.Tensor``: that first call is made here with torch hidden, so it never imports it in
a worker. Triton's hash of its own sources and libtriton (part of every cache key) is
computed here once, and the workers inherit it. Forking is safe:
nothing here creates a CUDA context (CUDA forbids only forking a process that has one).
"""

import sys

import triton  # noqa: F401

from executor.kernels.jit import fp8_gemm, grouped_gemm, prefill_attention  # noqa: F401
from executor.runner import kernels as _runner_kernels  # noqa: F401

try:
    from triton.runtime.cache import triton_key

    triton_key()
except Exception:  # noqa: BLE001 - another Triton: each worker pays it at its first compile
    pass

try:
    # The NVIDIA backend's hash runs `ptxas --version`: cached here for the workers.
    from triton.backends.nvidia.compiler import get_ptxas_version

    get_ptxas_version(90)
except Exception:  # noqa: BLE001 - not the NVIDIA backend: each worker pays it
    pass


def _specialize_without_torch() -> None:
    """Make Triton's native specializer's one-time set-up run now, with torch hidden: it
    tries ``from torch import Tensor`` (a fast path for torch tensors; without it, tensors
    take its generic ``data_ptr`` path, same result) and would import torch otherwise."""
    if "torch" in sys.modules:
        return  # preloaded for DeepGEMM: nothing to save
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend
    except ImportError:  # another Triton
        return
    sys.modules["torch"] = None  # `import torch` raises ImportError, which Triton expects
    try:
        native_specialize_impl(BaseBackend, 1, False, True, True)
    except Exception:  # noqa: BLE001 - best effort: a worker would import torch at its first compile
        pass
    finally:
        del sys.modules["torch"]


_specialize_without_torch()
