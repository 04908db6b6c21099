"""What a vLLM release decides at start-up for an engine, from its own functions (used by oracle.py,
in the subprocess whose sys.path holds that release).

- the model runner: `VllmConfig.use_v2_model_runner` on a stand-in of the config's attributes it
  reads (the private methods it calls are vLLM's own, bound to the stand-in);
- each block-FP8 linear's kernel: `choose_scaled_mm_linear_kernel` through
  vllm_bridge.engine.from_vllm.fp8_linear_kernel (the function `--from-vllm` and the plugin call), against
  the FlashInfer installed beside the release (0.25: flashinfer-python 0.6.13, its real
  `flashinfer.gemm.fp8_blockscale_gemm_sm90` export), once as installed and once with
  VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER=0;
- which linears the release's DeepGEMM warmup takes: 0.25's `_fp8_linear_may_use_deep_gemm` on a
  stand-in LinearBase module whose quant method holds the selected kernel; 0.33's
  `_deep_gemm_linear_data` on one stamped as process_weights_after_loading stamps it;
- V1's capture sizes (`resolve_cudagraph_mode_and_sizes` with use_v2_model_runner=False, then
  `CudagraphDispatcher.initialize_cudagraph_keys`);
- 0.25's FlashInfer autotune cache: `flashinfer_autotune` run with a recording world group and
  autotune context, persistent (a cache file) or in memory.

Stand-ins, each for a fact the CPU cannot give: vllm_bridge.cli.stand_in_vendored_deep_gemm
(vLLM's vendored DeepGEMM is in the wheel, its extension needs libtorch_cuda);
VLLM_HAS_FLASHINFER_CUBIN=1 for the flashinfer-cubin package (458 MB of prebuilt kernels that
vLLM 0.25's wheel requires and vLLM only looks for); DeepGEMM's M alignment, 128 on SM90
(get_mk_alignment_for_contiguous_layout asks the library).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from types import SimpleNamespace as NS


def model_runner(engine: dict) -> str:
    """'v1' or 'v2': vLLM's VllmConfig.use_v2_model_runner for the engine."""
    from vllm.config import VllmConfig
    from vllm.config.compilation import CompilationMode
    data = engine["data"]
    model, spec, par = data["model"], data["speculative"], data["parallel"]
    method = spec["method"]
    speculative = None if method == "none" else NS(
        method=method, num_speculative_tokens=spec["num_speculative_tokens"], parallel_drafting=False,
        use_heterogeneous_vocab=False, enable_adaptive_verification=False, draft_lm_head_quantization=None,
        draft_model_config=None, is_xpress=lambda: False, use_dspark=lambda: method == "dspark")
    config = NS(
        speculative_config=speculative, ec_transfer_config=None, watermark_config=None,
        attention_config=NS(hisparse_config=None), cache_config=NS(kv_sharing_fast_prefill=False),
        compilation_config=NS(mode=CompilationMode.VLLM_COMPILE, pass_config=NS(enable_sp=False)),
        model_config=NS(runner_type=model["runner"], is_hybrid=any(g["kind"] == "mamba" for g in data["kv_cache"]["groups"]),
                        is_attention_free=False, architectures=[model.get("architecture", "")], is_moe=bool(model["moe"]),
                        is_diffusion=False, enable_return_routed_experts=False, logits_processors=None,
                        enable_prompt_embeds=False, logprobs_mode="raw_logprobs"),
        parallel_config=NS(prefill_context_parallel_size=1, tensor_parallel_size=par["tensor_parallel_size"],
                           pipeline_parallel_size=par["pipeline_parallel_size"], distributed_executor_backend="mp",
                           enable_dbo=False, enable_elastic_ep=False, use_ubatching=False))
    for name, member in inspect.getmembers(VllmConfig, inspect.isfunction):
        if name.startswith("_") and not name.startswith("__"):
            setattr(config, name, functools.partial(member, config))
    pinned = {"v1": "0", "v2": "1"}.get(model["model_runner"])  # VLLM_USE_V2_MODEL_RUNNER pins it
    if pinned is not None:
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = pinned
    try:
        return "v2" if VllmConfig.use_v2_model_runner.fget(config) else "v1"
    finally:
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)


def kernel_config(engine: dict):
    """What choose_scaled_mm_linear_kernel reads from the current VllmConfig."""
    import torch
    return NS(model_config=NS(dtype=getattr(torch, engine["data"]["model"]["dtype"]),
                              hf_text_config=NS(model_type="llama")),
              kernel_config=NS(linear_backend="auto", linear_backend_per_quant=None))


def linear_kernels(engine: dict, flashinfer: bool) -> dict:
    """{layer name: kernel} of the block-FP8 linears, FlashInfer as installed or turned off."""
    from vllm_bridge.engine.from_vllm import fp8_linear_kernel
    with flashinfer_switch(flashinfer):
        config = kernel_config(engine)
        return {layer["name"]: fp8_linear_kernel(config, (layer["n"], layer["k"]), layer["quant"]["weight_block_size"])
                for layer in engine["data"]["model"]["linear"]
                if (layer.get("quant") or {}).get("method") == "fp8" and layer["quant"].get("weight_block_size")}


@contextlib.contextmanager
def flashinfer_switch(on: bool):
    """VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER as given, vLLM's cached answers forgotten before and after."""
    import vllm.utils.flashinfer as fi
    saved = os.environ.get("VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER")
    os.environ["VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER"] = "1" if on else "0"
    try:
        fi.is_flashinfer_fp8_blockscale_gemm_supported.cache_clear()
        fi.has_flashinfer_fp8_blockscale_gemm.cache_clear()
        yield
    finally:
        os.environ.pop("VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER")
        if saved is not None:
            os.environ["VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER"] = saved
        fi.is_flashinfer_fp8_blockscale_gemm_supported.cache_clear()


def flashinfer_installed() -> bool:
    import vllm.utils.flashinfer as fi
    return bool(fi.has_flashinfer_fp8_blockscale_gemm())


KERNEL_CLASSES = {"flashinfer_deep_gemm": "FlashInferFp8DeepGEMMDynamicBlockScaledKernel",
                  "deep_gemm": "DeepGemmFp8BlockScaledMMKernel", "cutlass": "CutlassFp8BlockScaledMMKernel",
                  "triton": "TritonFp8BlockScaledMMKernel"}


def warmed_linears(engine: dict, kernels: dict) -> list[str]:
    """The linears (by name) the release's DeepGEMM warmup takes, given each one's kernel."""
    import torch
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod
    from vllm.model_executor.warmup import deep_gemm_warmup as dgw
    dgw.get_mk_alignment_for_contiguous_layout = lambda: [128, 128]  # DeepGEMM's SM90 alignment
    out = []
    for layer in engine["data"]["model"]["linear"]:
        if layer["name"] not in kernels:
            continue
        kernel = object.__new__(getattr(linear, KERNEL_CLASSES.get(kernels[layer["name"]], "TritonFp8BlockScaledMMKernel")))
        module = LinearBase.__new__(LinearBase)
        torch.nn.Module.__init__(module)
        module.weight = torch.nn.Parameter(torch.empty(layer["n"], layer["k"], device="meta"), requires_grad=False)
        module.weight_scale_inv = torch.nn.Parameter(torch.empty(1, device="meta"), requires_grad=False)
        module.weight_block_size = layer["quant"]["weight_block_size"]
        method = object.__new__(Fp8LinearMethod)
        method.block_quant, method.use_marlin, method.fp8_linear = True, False, kernel
        method.quant_config = NS(weight_block_size=layer["quant"]["weight_block_size"])
        module.quant_method = method
        if hasattr(dgw, "_fp8_linear_may_use_deep_gemm"):  # 0.25: the kernel's class decides
            taken = dgw._fp8_linear_may_use_deep_gemm(module)
        else:  # 0.33: DeepGEMM's process_weights_after_loading stamps the provider, also as the fallback
            if kernels[layer["name"]] in ("deep_gemm", "flashinfer_deep_gemm"):
                module.deep_gemm_warmup_provider = object.__new__(linear.DeepGemmFp8BlockScaledMMKernel)
            taken = dgw._deep_gemm_linear_data(module) is not None
        if taken:
            out.append(layer["name"])
    return out


def v1_capture(engine: dict, config, cc) -> dict:
    """V1's sizes and FULL decode graph sizes after VllmConfig._set_cudagraph_sizes (`cc` holds them)."""
    from vllm.v1.attention.backend import AttentionCGSupport
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
    from vllm.config.compilation import CUDAGraphMode
    names = engine["names"]
    q = names["decode_query_len"]
    resolve = cc.resolve_cudagraph_mode_and_sizes
    extra = {"tensor_parallel_size": names["tensor_parallel_size"]} \
        if "tensor_parallel_size" in inspect.signature(resolve).parameters else {}
    mode = resolve(AttentionCGSupport.ALWAYS, None, q, use_v2_model_runner=False, **extra)
    if mode == CUDAGraphMode.NONE or not cc.cudagraph_capture_sizes:
        return {"sizes": list(cc.cudagraph_capture_sizes or []), "decode": []}
    dispatcher = object.__new__(CudagraphDispatcher)
    dispatcher.vllm_config = NS(scheduler_config=config.scheduler_config, lora_config=None)
    dispatcher.compilation_config, dispatcher.uniform_decode_query_len = cc, q
    dispatcher.cudagraph_keys = {CUDAGraphMode.PIECEWISE: set(), CUDAGraphMode.FULL: set()}
    dispatcher.specialize_lora_count, dispatcher.cudagraph_mode = False, CUDAGraphMode.NONE
    dispatcher.initialize_cudagraph_keys(mode, q)
    decode = sorted({d.num_tokens for d in dispatcher.cudagraph_keys[CUDAGraphMode.FULL] if d.uniform})
    return {"sizes": list(cc.cudagraph_capture_sizes), "decode": decode}


def flashinfer_cache(engine: dict) -> str | None:
    """'persistent' or 'memory': what 0.25's flashinfer_autotune does in a world of the engine's size
    (None where the release's function is not 0.25's)."""
    from vllm.model_executor.warmup import kernel_warmup
    import vllm.utils.flashinfer as fi
    import vllm.distributed.parallel_state as ps
    if "resolve_flashinfer_autotune_file" not in vars(kernel_warmup):
        return None
    used = []
    world = NS(world_size=engine["names"]["world_size"], rank_in_group=0, barrier=lambda: None,
               broadcast_object=lambda obj, src=0: None)

    @contextlib.contextmanager
    def autotune(*args, **kwargs):
        used.append("persistent" if "cache" in kwargs else "memory")
        yield
    saved = (ps.get_world_group, fi.autotune, kernel_warmup.resolve_flashinfer_autotune_file)
    ps.get_world_group, fi.autotune = (lambda: world), autotune
    kernel_warmup.resolve_flashinfer_autotune_file = lambda runner: NS(exists=lambda: False)
    try:
        runner = NS(scheduler_config=NS(max_num_batched_tokens=engine["names"]["max_num_batched_tokens"]),
                    _dummy_run=lambda **kwargs: None)
        kernel_warmup.flashinfer_autotune(runner)
    finally:
        ps.get_world_group, fi.autotune, kernel_warmup.resolve_flashinfer_autotune_file = saved
    return used[0] if used else None


def sampler(engine: dict) -> str | None:
    """'flashinfer' or 'triton': the release's flashinfer_sampler_supported() (v1/sample/ops/
    topk_topp_sampler.py) on the engine's GPU, with VLLM_USE_FLASHINFER_SAMPLER as a user leaves it
    (unset). Stood in for: the platform (CUDA, the engine's capability and SM count) and, on 0.33,
    FlashInfer's JIT reaching that GPU with the machine's toolchain (_flashinfer_jit_unsupported_reason,
    a fact of the machine). None where FlashInfer's attention backend does not import (no FlashInfer
    beside the release: 0.33's environment here)."""
    try:
        import importlib
        importlib.import_module("vllm.v1.attention.backends.flashinfer")  # flashinfer_sampler_supported imports it
        import vllm.v1.sample.ops.topk_topp_sampler as ts
    except Exception:  # noqa: BLE001
        return None
    from vllm.platforms.interface import DeviceCapability
    data = engine["data"]
    capability = DeviceCapability(*(int(x) for x in data["device"]["capability"].split(".")))
    platform = ts.current_platform
    stand_ins = {"is_cuda": lambda: True, "get_device_capability": lambda device_id=0: capability,
                 "num_compute_units": lambda device_id=0: data["device"]["num_sms"]}
    saved = {name: vars(platform).get(name) for name in stand_ins}
    saved_reason, saved_env = vars(ts).get("_flashinfer_jit_unsupported_reason"), os.environ.pop(
        "VLLM_USE_FLASHINFER_SAMPLER", None)
    saved_torch = ts.torch
    try:
        for name, value in stand_ins.items():
            setattr(platform, name, value)
        if saved_reason is not None:
            ts._flashinfer_jit_unsupported_reason = lambda c: None
        ts.torch = NS(accelerator=NS(current_device_index=lambda: 0))  # 0.33 asks the SM count of device 0
        return "flashinfer" if ts.flashinfer_sampler_supported() else "triton"
    finally:
        ts.torch = saved_torch
        for name, value in saved.items():
            if value is None:
                vars(platform).pop(name, None)
            else:
                setattr(platform, name, value)
        if saved_reason is not None:
            ts._flashinfer_jit_unsupported_reason = saved_reason
        if saved_env is not None:
            os.environ["VLLM_USE_FLASHINFER_SAMPLER"] = saved_env
