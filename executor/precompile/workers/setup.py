"""What a precompile worker takes from the main process: its settings and the GPU target to compile for.

Workers fork from a fork server that imported Triton and the kernel sources once
(executor/worker_preload.py; torch too only when DeepGEMM jobs need it), so they take the main
process's TRITON_*/DG_*/WARMUP_* settings here rather than the fork server's, and compile Triton
variants for the GPU's compute capability read from NVML (gpu.py), without torch or a CUDA context
(stand-in tensors: executor/backends/triton_compile.py).
"""

from __future__ import annotations

import os

from kernel_model.device import capability_text, sm_capability

from ...caches import deep_gemm_install
from ...backends.flashinfer_jit import FLASHINFER_ARCHS
from .gpu import gpu_capability

WORKER_ENV_PREFIXES = ("TRITON_", "DG_", "WARMUP_")  # settings a worker takes from the main process


def worker_setup(device: str, extra_env: dict | None = None, cuda_free: bool = False) -> dict:
    """What a worker takes from the main process: its TRITON_/DG_/WARMUP_ settings (the
    fork server may have started under others; DG_JIT_CACHE_DIR vLLM's when unset, as DeepGEMM
    under vLLM has it), with `extra_env` on top (what the caller wants
    the workers alone to see, e.g. a Triton cache directory of their own), and the GPU target
    to compile for. A CUDA-free worker (`cuda_free`: the compile lane) is also told the target
    FlashInfer would otherwise ask CUDA for: the same architecture, so the same ninja file and
    build directory as vLLM's process (a user's own FLASHINFER_CUDA_ARCH_LIST stays)."""
    # Read from this process's environment, not from resolved roots: what is handed down is the
    # environment itself, since Triton and DeepGEMM in the worker read their roots from it.
    env = {**deep_gemm_install.environment(),
           **{k: v for k, v in os.environ.items() if k.startswith(WORKER_ENV_PREFIXES)}}
    env.update({str(k): str(v) for k, v in (extra_env or {}).items()})
    capability = gpu_capability() if str(device).startswith("cuda") else None
    if cuda_free and capability and FLASHINFER_ARCHS not in os.environ:
        env[FLASHINFER_ARCHS] = capability_text(sm_capability(capability))
    return {"env": env, "capability": capability, "cuda_free": cuda_free}


def apply_setup(setup: dict) -> None:
    """Take the main process's settings (the fork server may have started under others)."""
    for key in [k for k in os.environ if k.startswith(WORKER_ENV_PREFIXES)]:
        if key not in setup["env"]:
            del os.environ[key]
    os.environ.update(setup["env"])
