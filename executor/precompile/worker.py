"""The worker side of the precompile pool: start-up, and running one job.

Workers fork from a fork server that imported Triton and the kernel sources once
(executor/worker_preload.py; torch too only when DeepGEMM jobs need it), take the main
process's TRITON_*/DG_*/WARMUP_* settings, and compile Triton variants for the GPU's
compute capability read from NVML, without torch or a CUDA context (stand-in tensors:
executor/backends/triton_compile.py). A job runs the backend's family method on the step
reduced to its one value; every failure is the job's (a record, never an exception), and
the main process then compiles that variant itself.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time

from ..backends.base import Unavailable, is_oom
from .jobs import Job, JobResult

# A worker runs a backend's compile-only twin where it has one (no torch, no CUDA context).
WORKER_CLASSES = {"triton": ("executor.backends.triton_compile", "TritonCompileOnly")}
WORKER_ENV_PREFIXES = ("TRITON_", "DG_", "WARMUP_")  # settings a worker takes from the main process
EMPTY_CACHE_BYTES = 1 << 30  # a worker frees its cached GPU memory above this much


def gpu_capability() -> int | None:
    """The GPUs' compute capability (90 for sm_90) from NVML, which creates no CUDA context;
    None when unknown: no NVML, or GPUs of different capabilities (which one the main
    process will use is then CUDA's to say, and workers ask CUDA themselves)."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    caps = set()
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        for index in range(count.value):
            handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
            if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0
                    or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0):
                return None
            caps.add(major.value * 10 + minor.value)
    finally:
        nvml.nvmlShutdown()
    return caps.pop() if len(caps) == 1 else None


def worker_setup(device: str, extra_env: dict | None = None) -> dict:
    """What a worker takes from the main process: its TRITON_/DG_/WARMUP_ settings (the
    fork server may have started under others), with `extra_env` on top (what the caller wants
    the workers alone to see, e.g. a Triton cache directory of their own), and the GPU target
    to compile for."""
    env = {k: v for k, v in os.environ.items() if k.startswith(WORKER_ENV_PREFIXES)}
    env.update({str(k): str(v) for k, v in (extra_env or {}).items()})
    capability = gpu_capability() if str(device).startswith("cuda") else None
    return {"env": env, "capability": capability}


def _apply_setup(setup: dict) -> None:
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


_WORKER: dict | None = None


def init_worker(specs: dict, device: str, monitor_mode: str, options, setup: dict) -> None:
    """Pool initializer: settings, Triton's target, backends, Triton's per-process costs and
    the JIT monitor, once per worker.

    Never raises (a failing initializer would break the whole pool): errors are kept and
    each job of the backend reports them."""
    global _WORKER
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    except (ValueError, OSError):
        pass
    start = time.perf_counter()
    state = {"backends": {}, "errors": {}, "monitor": None, "device": device, "pid": os.getpid(),
             "target": None}
    _WORKER = state
    try:
        _apply_setup(setup)
        if setup.get("capability") and "triton" in specs and not setup.get("real_triton_driver"):
            from executor.kernels.jit import stand_in

            stand_in.use_offline_driver(setup["capability"])
            state["target"] = f"cuda:{setup['capability']}"
    except Exception as e:  # noqa: BLE001 - Triton's own driver compiles instead (slower)
        state["errors"]["target"] = f"{type(e).__name__}: {e}"
    try:
        from ..jit_monitor import Monitor

        state["monitor"] = Monitor("warn" if monitor_mode != "off" else "off").install()
    except Exception as e:  # noqa: BLE001
        state["errors"]["monitor"] = f"{type(e).__name__}: {e}"
    for name, (module, cls) in specs.items():
        try:
            instance = getattr(importlib.import_module(module), cls)(device, options)
            ok, why = instance.available()
        except Exception as e:  # noqa: BLE001
            ok, why = False, f"{type(e).__name__}: {e}"
        if ok:
            state["backends"][name] = instance
        else:
            state["errors"][name] = why or "unavailable"
    if state["target"]:
        # Triton's fixed per-process costs, for the offline target: no CUDA context, no torch.
        # (Without a target, Triton's own driver would create a context here: the jobs do it.)
        try:
            prime_triton()
        except Exception as e:  # noqa: BLE001 - the jobs will say it
            state["errors"]["prime"] = f"{type(e).__name__}: {e}"
    state["init_s"] = round(time.perf_counter() - start, 3)


def build_cuda_utils() -> float:
    """Build Triton's CUDA utils module (C, compiled with gcc into the shared cache; no CUDA
    call) for the main process, which would otherwise build it at its first kernel (its cost:
    bench/RESULTS.md, part P). Workers compiling offline never need it."""
    began = time.perf_counter()
    from triton.backends.nvidia.driver import CudaUtils

    CudaUtils()
    return round(time.perf_counter() - began, 3)


def ready() -> dict:
    """A no-op task: submitting one per worker starts them all at once."""
    state = _WORKER or {}
    return {"pid": os.getpid(), "init_s": state.get("init_s"), "errors": dict(state.get("errors") or {}),
            "time": time.time()}


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


def _first_line(text, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_job(job: Job) -> JobResult:
    """Run one job in this worker; returns its record (never raises: errors are data)."""
    state = _WORKER
    out = JobResult.of(job, pid=os.getpid())
    if state is None:
        return out.ended("failed", "worker not initialised")
    backend = state["backends"].get(job.backend)
    if backend is None:
        why = state["errors"].get(job.backend) or "backend not loaded in the worker"
        return out.ended("unavailable", _first_line(why))
    monitor = state["monitor"]
    if monitor is not None:
        monitor.begin_step(job.key)
    t0 = time.perf_counter()
    try:
        getattr(backend, job.step.family)(job.step, job.values, lambda n: None)
        backend.synchronize()
    except Exception as e:  # noqa: BLE001 - every failure is the job's, the main process compiles it
        out.status = "unavailable" if isinstance(e, Unavailable) else "failed"
        out.error = _first_line(f"{type(e).__name__}: {e}")
        out.oom = is_oom(e)
    finally:
        out.wall_s, out.end = round(time.perf_counter() - t0, 4), time.time()
        counts = monitor.end_step() if monitor is not None else None
        if counts is not None:
            out.compiled, out.disk_loads = counts.compiled, counts.disk_loads
            out.compile_ms = round(counts.compile_ms, 3)
            if getattr(backend, "jit_cache", None) == "deep_gemm":  # else they are its neighbours'
                out.deep_gemm_jit, out.deep_gemm_loads = counts.deep_gemm_jit, counts.deep_gemm_loads
                out.deep_gemm_entries = list(counts.deep_gemm_entries)
        _free(backend, job.step, state["device"])
    return out


def _free(backend, step, device: str) -> None:
    try:
        backend.release(step)
    except Exception:  # noqa: BLE001
        pass
    torch = sys.modules.get("torch")
    try:
        if torch is not None and str(device).startswith("cuda") and torch.cuda.is_initialized():
            if torch.cuda.memory_reserved() > EMPTY_CACHE_BYTES:
                torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass
