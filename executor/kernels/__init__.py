"""The executor's own Triton kernels (their torch references: tests/executor/kernel_refs.py).

    fp8_gemm.py           block-scaled FP8 GEMM (vLLM's ``w8a8_block_fp8_matmul``)
    grouped_gemm.py       grouped MoE FP8 GEMM, contiguous expert-sorted layout (DeepGEMM semantics)
    prefill_attention.py  varlen causal prefill attention (vLLM's ``context_attention_fwd``)
    configs.py            launch configs and their per-(N, K, device) tables (pure Python)
    reference.py          vLLM-style FP8 quantizers and dequantizers
    jit/                  the ``@triton.jit`` sources and launch functions of the three kernels,
                          importable without torch (precompile workers compile from sizes alone)
    _triton.py            the optional Triton import, kernels built on first call, Triton 3.6's int
                          specialization rule

Importing this package needs neither Triton nor a GPU: kernels are built on first
call (``HAS_TRITON`` says whether that can work). Each kernel module exposes
``specialization_key`` / ``specialization_classes`` (which sizes share a compiled
variant), ``alloc_*_inputs`` (scratch tensors, allocated once at the largest size
and sliced), ``warmup`` (one real launch: compile, launcher build and module load)
and ``precompile`` (compile only, ``JITFunction.warmup``: the module loads at the
first launch).
"""

from ._triton import HAS_TRITON

KERNEL_MODULES = ("fp8_gemm", "grouped_gemm", "prefill_attention")

__all__ = ["HAS_TRITON", "KERNEL_MODULES"]
