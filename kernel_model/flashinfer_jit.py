"""FlashInfer's JIT modules that a vLLM engine on Hopper builds at first use, one per compile key.

FlashInfer (``pip install vllm==0.25.0`` brings flashinfer-python 0.6.13; its flashinfer-cubin
holds no SM 9.0 module) compiles a module the first time one of its functions is called: a
JitSpec (flashinfer/jit/core.py) whose ``build_and_load`` runs ninja over its CUDA sources into
``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<arch>/cached_ops/<name>/<name>.so``,
under a file lock, then loads it; a later process finds the .so and ninja has nothing to do.
Each module is one nvcc build of several sources, serial inside vLLM's process: on the H100
(bench/RESULTS.md part U) the two below took most of the 103 s of CUDA-graph capture and the
88 s of the synthetic batches of a cold vLLM 0.25.0 start with FlashInfer.

Which modules a vLLM engine reaches, and why:

- ``fp8_blockscale_gemm_90``: FlashInferFp8DeepGEMMDynamicBlockScaledKernel runs FlashInfer's
  ``fp8_blockscale_gemm_sm90`` for M < 32 (flashinfer/gemm/gemm_base.py), on every block-FP8
  linear vLLM gives that kernel (the engine's ``model.linear[].kernel``: flashinfer_deep_gemm);
- ``sampling``: vLLM's top-k/top-p sampler calls FlashInfer's sampling functions where
  ``flashinfer_sampler_supported()`` says so (vllm/v1/sample/ops/topk_topp_sampler.py, 0.25.0 and
  0.33.0: VLLM_USE_FLASHINFER_SAMPLER, on by default, and a GPU FlashInfer's attention backend
  supports): the engine's sampler ``flashinfer``.

The DeepGEMM fork inside ``fp8_blockscale_gemm_90`` (TensorRT-LLM's) compiles its own kernels per
shape at first call, with nvcc, into ``<TRTLLM_DG_CACHE_DIR or ~/.tensorrt_llm>/cache/<name>/`` where
a later process finds them; those are not modules, and the calls of the plan's CUDA-graph sizes
reach them before ready.
"""

from __future__ import annotations

from dataclasses import dataclass

KERNEL = "flashinfer_jit_module"  # the name Kernel steps give these (planner.plan.steps.LAUNCH_MODELS)
KEY_PREFIX = "flashinfer.jit"


@dataclass(frozen=True)
class JitModule:
    """One FlashInfer JIT module: its name (the directory and .so FlashInfer builds) and the
    function of FlashInfer that returns its JitSpec, as 'module:function'."""

    name: str
    generator: str

    kernel = KERNEL  # not a field (read as the other launch models' is)

    def key(self) -> str:
        return f"{KEY_PREFIX}[{self.name}]"

    def spec(self) -> dict:
        """The module as plan data (``from_spec`` rebuilds it)."""
        return {"name": self.name, "generator": self.generator}

    @classmethod
    def from_spec(cls, kernel: str, spec: dict) -> "JitModule":
        if kernel != KERNEL:
            raise ValueError(f"{kernel}: a JitModule is a {KERNEL}")
        return cls(str(spec["name"]), str(spec["generator"]))


FP8_BLOCKSCALE_GEMM = JitModule("fp8_blockscale_gemm_90", "flashinfer.jit.gemm:gen_fp8_blockscale_gemm_sm90_module")
SAMPLING = JitModule("sampling", "flashinfer.jit.sampling:gen_sampling_module")


def modules(linear_kernels, sampler: str, device_capability: int) -> list[JitModule]:
    """The modules an engine builds at first use: `linear_kernels` are its block-FP8 linears'
    kernels, `sampler` its top-k/top-p sampler (flashinfer | triton), `device_capability` 90 for
    SM 9.0. fp8_blockscale_gemm_sm90 exists on SM 9.0 only (vLLM selects its kernel there only)."""
    out = []
    if device_capability == 90 and "flashinfer_deep_gemm" in set(linear_kernels):
        out.append(FP8_BLOCKSCALE_GEMM)
    if sampler == "flashinfer":
        out.append(SAMPLING)
    return out
