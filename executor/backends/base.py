"""The protocol every backend implements, and the exceptions handlers turn into step statuses.

A backend implements some kernel families (``families``, of planner.plan.steps.FAMILIES):
``gemm`` (one weight shape, called once per M), ``grouped_gemm`` (MoE, contiguous layout,
once per M_sum), ``attention`` (one layer key, once per batch of sequences), ``kernel``
(compile-only launches of a model runner's kernel) and ``autotune``. Every family method
takes the plan's typed step unchanged plus the values to run, so that the hot-path check
(executor.verify) and the precompile workers can call the same code at other values.
Scratch tensors are allocated once per shape at the largest size and sliced.
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable


class Unavailable(Exception):
    """The step cannot run here (library missing, no GPU, unsupported variant): status `unavailable`."""


class Skipped(Exception):
    """The step was deliberately not run: status `skipped`."""


Tick = Callable[[int], None]  # progress: n kernel calls done


@runtime_checkable
class Backend(Protocol):
    name: str
    families: tuple[str, ...]

    def available(self) -> tuple[bool, str]:
        """(True, "") or (False, why not), without raising."""

    def gemm(self, step, m_values: list[int], tick: Tick) -> int:
        """Run the step's GEMM at each M; returns the kernel calls made."""

    def grouped_gemm(self, step, m_values: list[int], tick: Tick) -> int:
        """Run the grouped GEMM at each M_sum (multiples of step['alignment'])."""

    def attention(self, step, batches: list[list[int]], tick: Tick) -> int:
        """Run the attention kernel once per batch (a list of sequence lengths)."""

    def kernel(self, step, launches: list, tick: Tick) -> int:
        """Compile (and load) each launch of a model runner's kernel, running nothing."""

    def autotune(self, step, tick: Tick, ctx) -> dict:
        """Tune (or load tuned results); returns details for the report."""

    def synchronize(self) -> None:
        """Wait for queued device work, so errors surface inside the step that caused them."""

    def release(self, step) -> None:
        """Free the scratch tensors of one step (when the hot-path check will not need them)."""

    def close(self) -> None:
        """Free everything."""


class BaseBackend:
    """Defaults: no family implemented, nothing to free.

    ``jit_cache`` names the on-disk cache a backend's compiles land in when that is not
    Triton's ("deep_gemm": the precompile pool and the JIT monitor count those kernels as
    entries appearing in DeepGEMM's cache). ``settings`` are the backend's own, from
    ``Options.backend_settings[name]``: a backend that lives outside the executor (the vLLM
    bridge's) gets what it needs through its constructor, in the main process and in every
    precompile worker alike."""

    name = "base"
    families: tuple[str, ...] = ()
    jit_cache: str | None = None
    compiles_for_cuda = False        # its precompile jobs only make sense on a CUDA device
    needs_triton_driver = False      # launches Triton kernels for real in a precompile worker
    worker_preload: tuple = ()       # modules a precompile worker running it imports up front
    cuda_free = False                # its precompile worker holds no CUDA context (a compile-only twin)
    expected_job_s = 1.0             # a precompile job's seconds before one was measured (the pool's order)

    def __init__(self, device: str = "cuda", options=None):
        self.device = device
        self.options = options
        # The device whose tuned tables the kernels read (the engine's: Options.table_device), else the GPU's.
        self.table_device = getattr(options, "table_device", None)
        self.settings = dict((getattr(options, "backend_settings", None) or {}).get(self.name) or {})

    def available(self) -> tuple[bool, str]:
        return True, ""

    def _unsupported(self, family: str):
        raise Unavailable(f"backend {self.name!r} does not implement {family}")

    def gemm(self, step, m_values, tick):
        self._unsupported("gemm")

    def grouped_gemm(self, step, m_values, tick):
        self._unsupported("grouped_gemm")

    def attention(self, step, batches, tick):
        self._unsupported("attention")

    def kernel(self, step, launches, tick):
        self._unsupported("kernel")

    def autotune(self, step, tick, ctx):
        self._unsupported("autotune")

    def synchronize(self) -> None:
        pass

    def release(self, step) -> None:
        pass

    def close(self) -> None:
        pass


def torch_cuda_available(device: str) -> tuple[bool, str]:
    """Common check: torch importable and, for a CUDA device, a GPU present."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return False, f"torch is not importable ({type(e).__name__}: {e})"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        return False, "no CUDA device (torch.cuda.is_available() is False)"
    return True, ""


def is_oom(exc: BaseException) -> bool:
    return (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or "out of memory" in str(exc).lower())
