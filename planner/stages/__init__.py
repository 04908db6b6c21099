"""Stage kinds: each turns one plan stage plus the engine into concrete steps.

One kind, one small module, found through this explicit registry.
"""

from . import attention, autotune, batches, cudagraph, deep_gemm, runner_kernels, triton_gemm

HANDLERS = {
    "synthetic_batches": batches.expand,
    "deep_gemm": deep_gemm.expand,
    "triton_gemm": triton_gemm.expand,
    "flashinfer_autotune": autotune.expand_flashinfer,
    "kernel_autotune": autotune.expand_kernel,
    "prefill_attention": attention.expand,
    "cudagraph_capture": cudagraph.expand,
    "runner_kernels": runner_kernels.expand,
}
