"""`vllm_triton`: vLLM's own Triton kernels that vLLM 0.25 leaves cold, warmed through vLLM's code.

Two kernels: the sampler's top-k/top-p kernel (kernel_model/vllm_sampler.py models its compile
keys; plans/vllm-0.25-plugin.yaml plans them), and the Triton ``fused_moe_kernel`` of MoE layers
(kernel_model/vllm_fused_moe.py; the fused_moe stage of both release plans). Each launch of a
plan's ``kernel`` step calls vLLM's own launcher on real tensors of the launch's shape
(``apply_top_k_top_p_triton``; ``invoke_fused_moe_triton_kernel`` after vLLM's
``_prepare_expert_assignment``, with vLLM's own ``try_get_optimal_moe_config``, which must be the
plan's), so the variant compiled is the one vLLM looks up: same JITFunction, same arguments.

Where the files go. A precompile worker writes to its own Triton cache directory (the
``staging`` setting, its TRITON_CACHE_DIR): the plugin pins vLLM's process's at load_model
(warmup/executor_options.py: pin_triton_cache), before the pool starts, and the staging directory is that one.
Where something set TRITON_CACHE_DIR after the pool started (vLLM's own compile does in some
releases), in vLLM's process, before its launches, the backend copies the staged entries into the
directory Triton reads at that moment (executor.caches.triton_entries, which points each entry's
group file at the copies; nothing where the two are one), so that the launches are disk loads and
the files land where vLLM's own later launches look.
"""

from __future__ import annotations

import importlib

from executor.backends.base import BaseBackend, Unavailable, torch_cuda_available
from executor.caches.triton_entries import install_entries

SAMPLER_MODULE = "vllm.v1.sample.ops.topk_topp_triton"
SAMPLER_FUNCTION = "apply_top_k_top_p_triton"
TOPK_TOPP_KERNEL = "_topk_topp_kernel"
TOP_K, TOP_P = 20, 0.9    # any values that keep the kernel's branches live
FUSED_MOE_MODULE = "vllm.model_executor.layers.fused_moe.fused_moe"
FUSED_MOE_KERNEL = "fused_moe_kernel"


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
        if step.kernel not in (TOPK_TOPP_KERNEL, FUSED_MOE_KERNEL):
            raise Unavailable(f"vllm_triton warms {TOPK_TOPP_KERNEL} and {FUSED_MOE_KERNEL}, not {step.kernel}")
        self.installed += install_entries(self.settings.get("staging"))
        if step.kernel == FUSED_MOE_KERNEL:
            fused_moe = _fused_moe_module(self.settings.get("fused_moe_module", FUSED_MOE_MODULE))
            for launch in launches:
                run_fused_moe(fused_moe, launch, self.device)
                tick(1)
        else:
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


def _fused_moe_module(name: str):
    try:
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - another vLLM: the step is unavailable, the server starts
        raise Unavailable(f"{name} is not importable ({type(e).__name__}: {e})") from e


def vllm_moe_config(fused_moe, launch) -> dict:
    """vLLM's own config for the launch's layer and token count; it must be the plan's."""
    fp8 = launch.quant == "fp8_block"
    w1 = (launch.num_experts, 2 * launch.intermediate, launch.hidden)
    w2 = (launch.num_experts, launch.hidden, launch.intermediate)
    block = [128, 128] if fp8 else None
    config = fused_moe.try_get_optimal_moe_config(w1, w2, launch.top_k, "fp8_w8a8" if fp8 else None,
                                                  launch.tokens, block_shape=block)
    planned = dict(launch.config)
    if any(config.get(name, planned[name]) != planned[name] for name in planned):
        raise ValueError(f"vLLM chooses {config} for {launch.tokens} tokens, the plan {planned}: "
                         "kernel_model.vllm_fused_moe no longer matches this vLLM")
    return dict(config)


def one_expert(shape: tuple, dtype, device: str):
    """An (E, N, K) weight whose experts all alias one expert's memory (every token is routed to
    expert 0): the expert stride is 0. Triton keys an int argument by its type and by whether it is
    1 or a multiple of 16 (0 and n * k alike give ('i32', 'D')), so the variant is the real
    layer's. (The full strides over one expert's storage would be out of bounds for torch:
    bench/RESULTS.md part T.)"""
    import torch

    experts, n, k = shape
    return torch.zeros(1, n, k, dtype=dtype, device=device).expand(experts, n, k)


def run_fused_moe(fused_moe, launch, device: str) -> None:
    """One GEMM of a MoE layer as TritonExperts.apply launches it for `launch.tokens` tokens."""
    import torch
    import triton.language as tl

    fp8 = launch.quant == "fp8_block"
    config = vllm_moe_config(fused_moe, launch)
    n, k, rows, kernel_top_k = launch.shape()
    operand = torch.float8_e4m3fn if fp8 else torch.bfloat16
    a = torch.zeros(rows, k, dtype=torch.bfloat16, device=device).to(operand)
    b = one_expert((launch.num_experts, n, k), operand, device)
    c = torch.empty(launch.tokens, launch.top_k, n, dtype=torch.bfloat16, device=device)
    a_scale = torch.ones(rows, k // 128, dtype=torch.float32, device=device) if fp8 else None
    b_scale = one_expert((launch.num_experts, n // 128, k // 128), torch.float32, device) if fp8 else None
    topk_ids = torch.zeros(launch.tokens, launch.top_k, dtype=torch.int32, device=device)
    weights = torch.ones(launch.tokens, launch.top_k, dtype=torch.float32, device=device)
    sorted_ids, expert_ids, padded = fused_moe._prepare_expert_assignment(
        topk_ids, config, launch.tokens, launch.top_k, launch.num_experts, None)
    fused_moe.invoke_fused_moe_triton_kernel(
        a, b, c, a_scale, b_scale, weights if launch.gemm == "w2" else None, sorted_ids, expert_ids, padded,
        launch.gemm == "w2", kernel_top_k, config, compute_type=tl.bfloat16, use_fp8_w8a8=fp8,
        use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False,
        block_shape=[128, 128] if fp8 else None)
