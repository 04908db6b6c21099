"""What a vLLM release decides for an engine, where the engine config leaves the choice to it.

Three choices shape what a release warms and what it leaves to compile at first use:

- the model runner (`model.model_runner`): `auto` is each release's default for the model,
  decided by the release row of the plan's release (`vllm_release:` in the plan), because another
  release gives the same model another runner. vLLM 0.25.0 (vllm/config/vllm.py,
  `use_v2_model_runner`, `_is_default_v2_model_runner_model`,
  `_get_v2_model_runner_unsupported_features`): Model Runner V2 for generate models that are
  dense or of the three MoE architectures of DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, V1 for other
  MoE architectures (Qwen3-MoE, DeepSeek-V3, Mixtral), pooling and hybrid models, and speculative
  methods V2 lacks (ngram, suffix, draft_model; EAGLE3 with pipeline parallelism); DSpark forces
  V2. vLLM 0.33.0: V2 unless the speculative method is suffix. Only suffix is logged.
- the kernel of a block-FP8 linear (`model.linear[].kernel`): left out, vLLM's
  `choose_scaled_mm_linear_kernel` over its CUDA list (vllm/model_executor/kernels/linear/
  __init__.py, the same order in 0.25.0 and 0.33.0) as a user's install makes it, FlashInfer
  included (`pip install vllm==0.25.0` brings flashinfer-python and flashinfer-cubin 0.6.13):
  FlashInferFp8DeepGEMMDynamicBlockScaledKernel on SM 9.0 for [128, 128] blocks, bf16, N % 64 and
  K % 128; DeepGEMM's kernel on the other DeepGEMM architectures (SM 10.x, 12.x); CUTLASS's
  block kernel from SM 9.0, FP8 Marlin below SM 8.9, Triton otherwise.

- the top-k/top-p sampler (`model.sampler`): `auto` is FlashInfer's where a user's install
  has it (``sampler``), which makes FlashInfer build its sampling module at the first sample.

These are the rules; which release follows which rule is the release's row in
planner/engine/releases.py (VLLM_RELEASES), the one table of supported releases. `--from-vllm` and the
plugin record vLLM's own answers instead (vllm_bridge/engine/from_vllm.py), and tests/integration/vllm_parity checks
each row's rules against that release's functions.
"""

from __future__ import annotations

from kernel_model.device import parse_capability, sm_number

from .facts import EngineFacts, quant_of

# The linears whose kernel runs DeepGEMM's fp8_gemm_nt: every M (deep_gemm), or M >= 32 behind
# FlashInfer's fp8_blockscale_gemm_sm90 (flashinfer_deep_gemm).
DEEP_GEMM_LINEAR_KERNELS = ("deep_gemm", "flashinfer_deep_gemm")
FLASHINFER_MAX_M = 31  # FlashInferFp8DeepGEMMDynamicBlockScaledKernel: FlashInfer for M < 32
KERNEL_CLASSES = {"flashinfer_deep_gemm": "FlashInferFp8DeepGEMMDynamicBlockScaledKernel",
                  "deep_gemm": "DeepGemmFp8BlockScaledMMKernel"}


def deep_gemm_min_m(kernel: str | None) -> int | None:
    """The smallest M a linear on `kernel` runs DeepGEMM's fp8_gemm_nt for (None: never)."""
    if kernel == "deep_gemm":
        return 1
    return FLASHINFER_MAX_M + 1 if kernel == "flashinfer_deep_gemm" else None

# vllm/config/vllm.py @ v0.25.0: MoE architectures that keep Model Runner V2 by default.
V2_MOE_ARCHITECTURES_025 = ("DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM")
# _get_v2_model_runner_unsupported_features @ v0.25.0: the speculative methods V2 runs.
V2_SPECULATIVE_METHODS_025 = ("eagle", "eagle3", "mtp", "dflash", "dspark")


def v1_reason_025(engine: EngineFacts) -> str:
    """Why vLLM 0.25.0 runs the V1 model runner for this engine ('' for V2)."""
    model, method = engine.model, engine.speculative.method
    if method == "dspark":
        return ""  # use_v2_model_runner forces V2 for DSpark
    architecture = model.architecture or "an unnamed architecture"
    reasons = (
        (model.runner != "generate", "a pooling model (_is_default_v2_model_runner_model)"),
        (any(g.kind == "mamba" for g in engine.kv_cache.groups), "a hybrid model"),
        (bool(model.moe) and architecture not in V2_MOE_ARCHITECTURES_025,
         f"{architecture} is an MoE model outside DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES"),
        (method != "none" and method not in V2_SPECULATIVE_METHODS_025,
         f"Model Runner V2 does not support {method} speculative decoding"),
        (method == "eagle3" and engine.parallel.pipeline_parallel_size > 1,
         "Model Runner V2 does not support EAGLE3 with pipeline parallelism"))
    return next((why for hit, why in reasons if hit), "")


def v1_reason_033(engine: EngineFacts) -> str:
    """Why vLLM 0.33.0 runs the V1 model runner for this engine ('' for V2)."""
    method = engine.speculative.method
    return "Model Runner V2 does not support suffix speculative decoding" if method == "suffix" else ""


def flashinfer_sampler_025(release: str, engine: EngineFacts) -> tuple[str, str]:
    """`auto` under vLLM 0.25.0 as its wheel installs it (FlashInfer brought, VLLM_USE_FLASHINFER_SAMPLER
    on by default): flashinfer_sampler_supported() (v1/sample/ops/topk_topp_sampler.py) takes
    FlashInfer on SM 8.0 to 12.1 (FlashInferBackend.supports_compute_capability)."""
    major, minor = engine.device.capability
    if not (8, 0) <= (major, minor) <= (12, 1):
        return "triton", f"vLLM {release}: FlashInfer's sampler does not support SM {major}.{minor}"
    return "flashinfer", f"vLLM {release} with FlashInfer, as its wheel installs it"


def flashinfer_sampler_033(release: str, engine: EngineFacts) -> tuple[str, str]:
    """`auto` under vLLM 0.33.0: 0.25.0's rule, and FlashInfer's top-k masking needs more than 16 SMs."""
    if engine.device.num_sms <= 16 and (8, 0) <= engine.device.capability <= (12, 1):
        return "triton", f"vLLM {release}: FlashInfer's top-k masking needs more than 16 SMs"
    return flashinfer_sampler_025(release, engine)


def default_linear_kernel(layer: dict, dtype: str, capability: str, flashinfer: bool = True) -> str | None:
    """vLLM's kernel for a block-FP8 linear as a user's install selects it (None: no block-FP8 layer).
    `flashinfer`: FlashInfer installed and VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER on."""
    method, block = quant_of(layer)
    if method != "fp8" or block is None:
        return None
    major, minor = parse_capability(capability)
    sm = sm_number((major, minor))
    deep_gemm_shape = (block == (128, 128) and dtype == "bfloat16" and layer["n"] % 64 == 0
                       and layer["k"] % 128 == 0)
    if deep_gemm_shape and sm == 90 and flashinfer:
        return "flashinfer_deep_gemm"
    if deep_gemm_shape and (sm == 90 or major in (10, 12)):
        return "deep_gemm"
    if sm >= 90 and block[1] == 128:  # CUTLASS's block kernel takes (1, 128) activation groups
        return "cutlass"
    return "marlin" if sm < 89 else "triton"
