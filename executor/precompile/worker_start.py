"""How a precompile worker starts: its settings, its backends' classes, its GPU target, Triton's costs.

Workers fork from a fork server that imported Triton and the kernel sources once
(executor/worker_preload.py; torch too only when DeepGEMM jobs need it), take the main
process's TRITON_*/DG_*/WARMUP_* settings, and compile Triton variants for the GPU's
compute capability read from NVML, without torch or a CUDA context (stand-in tensors:
executor/backends/triton_compile.py). The main process pays the same Triton costs
(prime_triton) while the workers start, and one worker builds Triton's CUDA utils for it.
"""

from __future__ import annotations

import os
import time

from .. import registry

WORKER_ENV_PREFIXES = ("TRITON_", "DG_", "WARMUP_")  # settings a worker takes from the main process
# A worker runs a backend's compile-only twin where it has one (no CUDA context: lanes.py).
WORKER_CLASSES = {"triton": ("executor.backends.triton_compile", "TritonCompileOnly"),
                  "flashinfer_jit": ("executor.backends.flashinfer_jit", "FlashInferJitBuildOnly")}
# FlashInfer reads the GPU's architecture from CUDA unless this names it (flashinfer/compilation_context.py)
FLASHINFER_ARCHS = "FLASHINFER_CUDA_ARCH_LIST"


def gpu_capability() -> int | None:
    """The GPUs' compute capability (90 for sm_90) from NVML, which creates no CUDA context;
    None when unknown: no NVML, or GPUs of different capabilities (which one the main
    process will use is then CUDA's to say, and workers ask CUDA themselves)."""
    found = _nvml_gpus()
    caps = {cap for _, cap in found or ()}
    return caps.pop() if found and len(caps) == 1 else None


def gpu_name() -> str | None:
    """The GPUs' model name from NVML ('NVIDIA H100 80GB HBM3'), where every GPU is the same model."""
    found = _nvml_gpus()
    names = {name for name, _ in found or ()}
    return names.pop() if found and len(names) == 1 else None


def _nvml_gpus() -> list[tuple[str, int]] | None:
    """(name, capability) of every GPU, from NVML (no CUDA context); None where NVML cannot tell."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    out = []
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        for index in range(count.value):
            handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
            name = ctypes.create_string_buffer(96)
            if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0
                    or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0
                    or nvml.nvmlDeviceGetName(handle, name, ctypes.c_uint(96)) != 0):
                return None
            out.append((name.value.decode(errors="replace"), major.value * 10 + minor.value))
    finally:
        nvml.nvmlShutdown()
    return out or None


def worker_setup(device: str, extra_env: dict | None = None, cuda_free: bool = False) -> dict:
    """What a worker takes from the main process: its TRITON_/DG_/WARMUP_ settings (the
    fork server may have started under others), with `extra_env` on top (what the caller wants
    the workers alone to see, e.g. a Triton cache directory of their own), and the GPU target
    to compile for. A CUDA-free worker (`cuda_free`: the compile lane) is also told the target
    FlashInfer would otherwise ask CUDA for: the same architecture, so the same ninja file and
    build directory as vLLM's process (a user's own FLASHINFER_CUDA_ARCH_LIST stays)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(WORKER_ENV_PREFIXES)}
    env.update({str(k): str(v) for k, v in (extra_env or {}).items()})
    capability = gpu_capability() if str(device).startswith("cuda") else None
    if cuda_free and capability and FLASHINFER_ARCHS not in os.environ:
        env[FLASHINFER_ARCHS] = f"{capability // 10}.{capability % 10}"
    return {"env": env, "capability": capability, "cuda_free": cuda_free}


def apply_setup(setup: dict) -> None:
    """Take the main process's settings (the fork server may have started under others)."""
    for key in [k for k in os.environ if k.startswith(WORKER_ENV_PREFIXES)]:
        if key not in setup["env"]:
            del os.environ[key]
    os.environ.update(setup["env"])


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


def worker_context(preload=()):
    """How workers start: forked from a fork server that imported Triton and the kernels
    once (executor/worker_preload.py), plus `preload` (the modules the backends' jobs need:
    ``worker_preload`` of their classes, e.g. torch for DeepGEMM's), else spawned (each
    imports them itself). The fork server is one per process: the first pool's preload list
    is the one it keeps."""
    import multiprocessing

    try:
        ctx = multiprocessing.get_context("forkserver")
    except ValueError:  # a platform without fork
        return multiprocessing.get_context("spawn")
    ctx.set_forkserver_preload(list(preload) + ["executor.worker_preload"])
    return ctx


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
        import importlib

        return bool(getattr(getattr(importlib.import_module(module), cls), "cuda_free", False))
    except Exception:  # noqa: BLE001 - a broken twin: its jobs fail and say it
        return False


def backend_attr(name: str, attr: str, default):
    """A class attribute of a registered backend (its default when the backend is unknown)."""
    try:
        return getattr(registry.load_backend(name), attr, default)
    except Exception:  # noqa: BLE001 - unknown or broken: the jobs will say it
        return default
