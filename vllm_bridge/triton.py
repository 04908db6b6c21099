"""`vllm_triton`: vLLM's own Triton kernels that vLLM 0.25 leaves cold, warmed through vLLM's code.

The one kernel so far is the sampler's top-k/top-p kernel (kernel_model/vllm_sampler.py models
its compile keys; plans/vllm-0.25-plugin.yaml plans them). Each launch of a plan's ``kernel``
step calls vLLM's ``apply_top_k_top_p_triton`` on real tensors of the launch's shape, so the
variant compiled is the one vLLM's sampler looks up: same JITFunction, same arguments.

Where the files go. A precompile worker writes to its own Triton cache directory (the
``staging`` setting, its TRITON_CACHE_DIR), since the directory vLLM's process reads from is
not known yet when the pool starts: Inductor pins TRITON_CACHE_DIR under its own cache the first
time it builds a kernel, during vLLM's profile run. In vLLM's process, before its launches, the
backend copies the staged entries into the directory Triton reads at that moment
(executor.triton_cache, which points each entry's group file at the copies), so that the launches
are disk loads and the files land where vLLM's own later launches look.
"""

from __future__ import annotations

import importlib

from executor.backends.base import BaseBackend, Unavailable, torch_cuda_available
from executor.triton_cache import install_entries

SAMPLER_MODULE = "vllm.v1.sample.ops.topk_topp_triton"
SAMPLER_FUNCTION = "apply_top_k_top_p_triton"
TOPK_TOPP_KERNEL = "_topk_topp_kernel"
TOP_K, TOP_P = 20, 0.9    # any values that keep the kernel's branches live


class VllmTritonBackend(BaseBackend):
    name = "vllm_triton"
    families = ("kernel",)
    compiles_for_cuda = True
    worker_preload = ("torch",)  # a worker runs vLLM's function on real tensors
    needs_triton_driver = True   # ... through Triton's own CUDA driver (no offline stand-in)

    def __init__(self, device: str = "cuda", options=None):
        super().__init__(device, options)
        self._apply = None
        self.installed = 0  # staged entries copied into this process's Triton cache

    def available(self) -> tuple[bool, str]:
        ok, why = torch_cuda_available(self.device)
        if not ok:
            return ok, why
        module = self.settings.get("module", SAMPLER_MODULE)
        try:
            self._apply = getattr(importlib.import_module(module), SAMPLER_FUNCTION)
        except Exception as e:  # noqa: BLE001 - another vLLM: its steps are unavailable, the server starts
            return False, f"{module}.{SAMPLER_FUNCTION} is not importable ({type(e).__name__}: {e})"
        return True, ""

    def synchronize(self) -> None:
        import torch
        torch.cuda.synchronize(self.device)

    def kernel(self, step, launches, tick):
        if step.kernel != TOPK_TOPP_KERNEL:
            raise Unavailable(f"vllm_triton warms {TOPK_TOPP_KERNEL} only, not {step.kernel}")
        self.installed += install_entries(self.settings.get("staging"))
        for launch in launches:
            self._apply(*sampler_inputs(launch, self.device))
            tick(1)
        self.synchronize()
        return len(launches)


def sampler_inputs(launch, device: str) -> tuple:
    """(logits, k, p) as vLLM's sampler passes them: float32 logits (batch x vocab, contiguous),
    int32 top-k and float32 top-p per row, or None where no request of the batch uses them."""
    import torch

    rows, vocab = launch.batch_size, launch.vocab_size
    logits = torch.randn(rows, vocab, device=device, dtype=torch.float32)
    k = torch.full((rows,), min(TOP_K, vocab), device=device, dtype=torch.int32) if launch.top_k else None
    p = torch.full((rows,), TOP_P, device=device, dtype=torch.float32) if launch.top_p else None
    return logits, k, p
