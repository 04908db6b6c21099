"""`flashinfer_jit`: build FlashInfer's JIT modules ahead of their first call.

Each launch of a ``flashinfer_jit_module`` kernel step is a kernel_model.flashinfer_jit.JitModule:
its generator returns FlashInfer's JitSpec, and ``build_and_load`` runs ninja over the module's
sources into FlashInfer's workspace ($FLASHINFER_WORKSPACE_BASE, the same directory vLLM's process
reads: a precompile worker inherits it), under FlashInfer's own file lock, then loads it. A later
call, in vLLM's process, finds the .so: ninja has nothing to do and the load takes milliseconds.
Building needs no GPU (nvcc only), but the module is for the GPU's architecture, which FlashInfer
reads from the device: the backend asks for a CUDA device like the other GPU backends.
"""

from __future__ import annotations

import importlib

from kernel_model.flashinfer_jit import KERNEL

from .base import BaseBackend, Unavailable, torch_cuda_available

# FlashInfer reads the GPU's architecture from CUDA unless this names it (flashinfer/compilation_context.py):
# the precompile pool's CUDA-free workers are told it, from NVML.
FLASHINFER_ARCHS = "FLASHINFER_CUDA_ARCH_LIST"


class FlashInferJitBackend(BaseBackend):
    name = "flashinfer_jit"
    families = ("kernel",)
    compiles_for_cuda = True
    worker_preload = ("torch",)
    expected_job_s = 100.0  # one module: nvcc over several sources (105-125 s each on the H100, RESULTS part X)

    def __init__(self, device: str = "cuda", options=None):
        super().__init__(device, options)
        self.built: list[str] = []  # the modules this backend built or loaded, in order

    def available(self) -> tuple[bool, str]:
        ok, why = torch_cuda_available(self.device)
        if not ok:
            return ok, why
        return _jit_importable()

    def kernel(self, step, launches, tick):
        if step.kernel != KERNEL:
            raise Unavailable(f"flashinfer_jit builds {KERNEL} steps, not {step.kernel}")
        for module in launches:
            self._warm(module)
            tick(1)
        return len(launches)

    def _warm(self, module) -> None:
        generator(module.generator)().build_and_load()
        self.built.append(module.name)


def _jit_importable() -> tuple[bool, str]:
    try:
        importlib.import_module("flashinfer.jit")
    except Exception as e:  # noqa: BLE001 - no FlashInfer: vLLM does not call it either
        return False, f"flashinfer.jit is not importable ({type(e).__name__}: {e})"
    return True, ""


def generator(path: str):
    """FlashInfer's function 'module:function' that returns a module's JitSpec."""
    module, _, function = path.partition(":")
    if module.split(".")[0] != "flashinfer" or not function:  # a plan names FlashInfer's functions, nothing else
        raise Unavailable(f"{path}: a FlashInfer JIT module's generator is 'flashinfer...:function'")
    try:
        return getattr(importlib.import_module(module), function)
    except Exception as e:  # noqa: BLE001 - another FlashInfer: this step is unavailable, vLLM builds it
        raise Unavailable(f"{path} is not in this FlashInfer ({type(e).__name__}: {e})") from e


class FlashInferJitBuildOnly(FlashInferJitBackend):
    """The precompile worker's twin: builds a module (ninja, nvcc, under FlashInfer's file lock)
    and does not load it, so the worker holds no CUDA context and may run beside vLLM's memory
    profile (executor/precompile/workers/lanes.py). The GPU target comes from the pool (NVML), as
    FLASHINFER_CUDA_ARCH_LIST (workers/setup.py): FlashInfer then asks CUDA nothing. vLLM's process,
    calling the module first, waits on the same lock while a worker builds it and then finds the
    .so: ninja has nothing to do. A module FlashInfer's prebuilt JIT cache holds (flashinfer-jit-cache)
    is not built: FlashInfer loads that one (``is_aot``)."""

    cuda_free = True
    worker_preload = ()

    def __init__(self, device: str = "cuda", options=None):
        super().__init__(device, options)
        self.prebuilt: list[str] = []  # the modules flashinfer-jit-cache holds (nothing built)

    def available(self) -> tuple[bool, str]:
        import os

        if not os.environ.get(FLASHINFER_ARCHS):
            return False, (f"the GPU's architecture is unknown without CUDA ({FLASHINFER_ARCHS} unset, no NVML): "
                           "vLLM's process builds the modules")
        return _jit_importable()

    def _warm(self, module) -> None:
        (self.prebuilt if build_only(module.generator) == PREBUILT else self.built).append(module.name)

    def synchronize(self) -> None:
        pass  # nothing ran on a GPU


BUILT, UP_TO_DATE, PREBUILT = "built", "up to date", "prebuilt"


def build_only(path: str) -> str:
    """Build one module (generator 'module:function') without loading it: BUILT where ninja wrote
    its library, UP_TO_DATE where ninja found nothing to do, PREBUILT where FlashInfer's prebuilt JIT
    cache holds it (FlashInfer loads that one). FlashInfer's lock is held while ninja runs: a
    process that calls the module meanwhile waits for this build alone."""
    from executor.caches.flashinfer_jit import library_mtime

    spec = generator(path)()
    if spec.is_aot:
        return PREBUILT
    before = library_mtime(spec)
    spec.build(verbose=False)
    after = library_mtime(spec)
    return BUILT if after is not None and after != before else UP_TO_DATE
