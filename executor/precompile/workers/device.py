"""A precompile worker's device: made current before the backends load, and its cached memory
freed after each job (worker.py runs the jobs)."""

from __future__ import annotations

import sys

EMPTY_CACHE_BYTES = 1 << 30  # a worker frees its cached GPU memory above this much


def device_setter(device: str, state: dict):
    """use_device(device), as a call that keeps its failure in the worker's errors."""
    def set_it() -> None:
        try:
            use_device(device)
        except Exception as e:  # noqa: BLE001 - the jobs will fail and say why
            state["errors"]["device"] = f"{type(e).__name__}: {e}"
    return set_it


def use_device(device: str) -> None:
    """Make the pool's device the worker's current CUDA device. A fresh process's current device
    is cuda:0, and DeepGEMM and Triton launch on the current device whatever device the tensors
    are on: the pool of a tensor-parallel rank on cuda:1 then launched its kernels on GPU 0 over
    GPU 1's memory (CUDA_ERROR_ILLEGAL_ADDRESS, 57 of 73 jobs failed on the H100 pair,
    bench/RESULTS.md part T). Only where a backend has imported torch already: workers that
    compile Triton offline stay without torch and without a CUDA context."""
    torch = sys.modules.get("torch")
    if torch is None or not str(device).startswith("cuda:"):
        return
    torch.cuda.set_device(int(str(device).split(":", 1)[1]))


def free_after(backend, step, device: str) -> None:
    """After a job: the backend lets go of the step, and where torch's allocator caches more than
    EMPTY_CACHE_BYTES, the cache is emptied (the pool's workers share the GPU with each other)."""
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
