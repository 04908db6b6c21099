"""The worker side of the precompile pool: a worker's state, and running one job.

A worker (started as processes.py and setup.py say) loads the backends its jobs need once, with the
JIT monitor that counts what each job compiles. A job runs the backend's family method on
the step reduced to its one value; every failure is the job's (a record, never an exception),
and the main process then compiles that variant itself.
"""

from __future__ import annotations

import importlib
import os
import signal
import time

from planner.errors import one_line

from ...backends.base import Unavailable, is_oom
from ..claims.owner import claim_key
from ..jobs.job import Job, JobResult
from .device import device_setter, free_after
from .setup import apply_setup
from .triton_costs import prime_triton


_WORKER: dict | None = None  # this worker's backends, monitor and start-up errors (init_worker)


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
        if setup.get("nice"):
            os.nice(setup["nice"])
    except OSError:
        pass
    try:
        apply_setup(setup)
        if setup.get("capability") and "triton" in specs and not setup.get("real_triton_driver"):
            from executor.kernels.jit import stand_in

            stand_in.use_offline_driver(setup["capability"])
            state["target"] = f"cuda:{setup['capability']}"
    except Exception as e:  # noqa: BLE001 - Triton's own driver compiles instead (slower)
        state["errors"]["target"] = f"{type(e).__name__}: {e}"
    try:
        from ...jit_monitor import Monitor

        # No roots handed down: a worker is a process of its own, whose cache roots are the
        # environment the main process gave it (setup.py), as Triton and DeepGEMM here read them.
        state["monitor"] = Monitor("warn" if monitor_mode != "off" else "off").install()
    except Exception as e:  # noqa: BLE001
        state["errors"]["monitor"] = f"{type(e).__name__}: {e}"
    # A compile-lane worker never touches CUDA (torch may be preloaded: setting a device would
    # create a context, whose memory vLLM's profile would count).
    with_device = (lambda: None) if setup.get("cuda_free") else device_setter(device, state)
    with_device()  # torch preloaded by the fork server: the backends' checks run on the device too
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
    with_device()
    if state["target"]:
        # Triton's fixed per-process costs, for the offline target: no CUDA context, no torch.
        # (Without a target, Triton's own driver would create a context here: the jobs do it.)
        try:
            prime_triton()
        except Exception as e:  # noqa: BLE001 - the jobs will say it
            state["errors"]["prime"] = f"{type(e).__name__}: {e}"
    state["init_s"] = round(time.perf_counter() - start, 3)


def ready() -> dict:
    """A no-op task: submitting one per worker starts them all at once."""
    state = _WORKER or {}
    return {"pid": os.getpid(), "init_s": state.get("init_s"), "errors": dict(state.get("errors") or {}),
            "time": time.time(), "nice": os.nice(0)}

JOB_ERROR_CHARS = 400  # a job's error in the report: its first line, this long at most


def run_job(job: Job) -> JobResult:
    """Run one job in this worker; returns its record (never raises: errors are data)."""
    state = _WORKER
    out = JobResult.of(job, pid=os.getpid())
    if state is None:
        return out.ended("failed", "worker not initialised")
    backend = state["backends"].get(job.backend)
    if backend is None:
        why = state["errors"].get(job.backend) or "backend not loaded in the worker"
        return out.ended("unavailable", one_line(why, JOB_ERROR_CHARS))
    held = claim_key(job, out)
    if out.claim and out.claim["how"] != "mine":
        return out.ended("ok" if out.claim["how"] == "done" else "held", None)  # another process's key
    monitor = state["monitor"]
    if monitor is not None:
        monitor.begin_step(job.key)
    t0 = time.perf_counter()
    try:
        getattr(backend, job.step.family)(job.step, job.values, lambda n: None)
        backend.synchronize()
    except Exception as e:  # noqa: BLE001 - every failure is the job's, the main process compiles it
        out.status = "unavailable" if isinstance(e, Unavailable) else "failed"
        out.error = one_line(f"{type(e).__name__}: {e}", JOB_ERROR_CHARS)
        out.oom = is_oom(e)
    finally:
        out.wall_s, out.end = round(time.perf_counter() - t0, 4), time.time()
        counts = monitor.end_step() if monitor is not None else None
        if counts is not None:
            # a FlashInfer JIT module the job built with nvcc is a compile like a Triton kernel's
            out.compiled, out.disk_loads = counts.compiled + (counts.flashinfer_jit or 0), counts.disk_loads
            out.compile_ms = round(counts.compile_ms, 3)
            if getattr(backend, "jit_cache", None) == "deep_gemm":  # else they are its neighbours'
                out.deep_gemm_jit, out.deep_gemm_loads = counts.deep_gemm_jit, counts.deep_gemm_loads
                out.deep_gemm_entries = list(counts.deep_gemm_entries)
        if held is not None:  # the done mark once the entry is in the cache, or the claim given back
            held.end(out.status == "ok", counts.deep_gemm_entries if counts is not None else (), out.end)
        free_after(backend, job.step, state["device"])
    return out
