"""The engine config (schemas/engine.schema.json) of what vLLM resolved: `engine_from_vllm_config`.

`warmup engine --from-vllm` calls it on the VllmConfig it builds from `vllm serve` arguments, and
the vLLM plugin calls it inside each worker on the live VllmConfig. It reads the VllmConfig's
attributes only: it imports neither vLLM nor torch itself (the stand-ins are the CLI's business),
so it runs wherever a VllmConfig exists.

What vLLM resolved is taken from vLLM: capture sizes and CUDA-graph mode, scheduler limits, the
speculative method, parallel sizes, max_model_len, block size, KV blocks (when given or profiled),
an attention backend the user chose, the model runner (VllmConfig.use_v2_model_runner), the
top-k/top-p sampler (vLLM's flashinfer_sampler_supported() on a GPU) and each
block-FP8 linear's kernel, through vLLM's own choose_scaled_mm_linear_kernel in this environment
(FlashInfer installed or not, VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER, --linear-backend). The model's per-rank shapes come from the HF config vLLM
loaded, through planner/engine/hf/ (the same derivation as `--from-hf`, so the two cannot drift).
"""

from __future__ import annotations

import copy
import inspect
import os
import re
import sys

from planner.engine import hf
from planner.engine.config import Engine, engine_from_document
from planner.engine.facts import EngineFacts
from planner.engine.facts import quant_of
from planner.schema import load_schema
from planner.yamlio import Document

__all__ = ["engine_from_vllm_config", "gpu_of_device_name", "installed_release", "kernel_counts", "kernels_mismatch",
           "live_block_fp8_linears", "live_kv_cache", "live_linear_kernels", "shapes_mismatch", "with_live_kv_cache",
           "with_live_linears"]


def engine_from_vllm_config(vllm_config, device: str | None = None) -> Engine:
    """The engine config of one rank of the server `vllm_config` describes.

    `device` is a GPU name of planner.engine.hf.GPUS (`--gpu`); None takes it from vLLM's current
    platform (the GPU the worker runs on). Raises planner.engine.hf.HFConfigError for a model config the
    planner cannot shard, ValueError for a resolved setting the engine schema cannot express."""
    model_config, cache_config = vllm_config.model_config, vllm_config.cache_config
    source = os.path.join(str(model_config.model), "config.json")
    config = _hf_config_dict(model_config)
    _check_quantization(model_config, config)
    data = hf.engine_from_hf(config, _request(vllm_config, device or _platform_gpu(), source))
    data["speculative"] = _speculative(vllm_config.speculative_config)
    data["compilation"] = _compilation(vllm_config)
    _apply_attention_backend(data, getattr(vllm_config, "attention_config", None))
    _apply_linear_kernels(data, vllm_config)
    _apply_sampler(data)
    data["description"] = _description(data, model_config, cache_config)
    data = {key: data[key] for key in load_schema("engine")["properties"] if key in data}  # schema order
    return engine_from_document(Document(data=data, file=f"<VllmConfig of {source}>"))


def installed_release() -> str | None:
    """The version of the vLLM this process imported (the shapes are that release's), None without one."""
    return getattr(sys.modules.get("vllm"), "__version__", None)


def _hf_config_dict(model_config) -> dict:
    """The HF config vLLM loaded, with the dtype vLLM resolved (`--dtype`, or the config's)."""
    config = model_config.hf_config.to_dict()
    config["torch_dtype"] = str(model_config.dtype).removeprefix("torch.")
    config.pop("dtype", None)  # newer transformers write both; torch_dtype is the one resolved
    return config


def _check_quantization(model_config, config: dict) -> None:
    """Linear shapes and quant follow the checkpoint's quantization_config; vLLM quantizing an
    unquantized checkpoint at load (`--quantization fp8`) runs kernels the engine would not describe."""
    method = getattr(model_config, "quantization", None)
    if method and "quantization_config" not in config:
        raise ValueError(f"quantization {method!r} is applied at load time (the checkpoint has no "
                         "quantization_config); the engine config models checkpoint quantization only")


def _num_blocks(cache_config) -> int | None:
    """KV blocks: profiled (num_gpu_blocks, set in workers after profiling) or the user's override;
    None lets planner/engine/hf/memory.py estimate them as `--from-hf` does."""
    for attribute in ("num_gpu_blocks", "num_gpu_blocks_override"):
        value = getattr(cache_config, attribute, None)
        if value:
            return value
    return None


def _request(vllm_config, gpu: str, source: str) -> hf.EngineRequest:
    """What vLLM resolved, as the flags `--from-hf` would take for it."""
    parallel, scheduler = vllm_config.parallel_config, vllm_config.scheduler_config
    return hf.EngineRequest(
        tp=parallel.tensor_parallel_size, dp=parallel.data_parallel_size,
        enable_expert_parallel=bool(parallel.enable_expert_parallel), max_num_seqs=scheduler.max_num_seqs,
        max_num_batched_tokens=scheduler.max_num_batched_tokens, max_model_len=vllm_config.model_config.max_model_len,
        num_blocks=_num_blocks(vllm_config.cache_config),
        block_size=getattr(vllm_config.cache_config, "block_size", None),
        model_runner="v2" if vllm_config.use_v2_model_runner else "v1",  # vLLM's own answer, not `auto`
        vllm_release=installed_release(), gpu=gpu, source=source)


def _schema_enum(*path: str) -> list[str]:
    """An enum of schemas/engine.schema.json, so that the accepted names live in one place."""
    node = load_schema("engine")
    for key in path:
        node = node["properties"][key] if key != "items" else node["items"]
    return node["enum"]


def _speculative(speculative_config) -> dict:
    """vLLM's SpeculativeConfig as the engine names it; DeepSeek/Qwen/... MTP methods are `mtp`
    (their drafts take the same path: SpeculativeConfig.use_eagle())."""
    if speculative_config is None:
        return {"method": "none", "num_speculative_tokens": 0}
    method = str(speculative_config.method)
    if method.endswith("_mtp"):
        method = "mtp"
    known = _schema_enum("speculative", "method")
    if method not in known:
        raise ValueError(f"speculative method {speculative_config.method!r} is not one the engine config "
                         f"models (known: {', '.join(m for m in known if m != 'none')})")
    return {"method": method, "num_speculative_tokens": int(speculative_config.num_speculative_tokens)}


def _compilation(vllm_config) -> dict:
    """CUDA-graph facts vLLM resolved (VllmConfig._set_cudagraph_sizes ran in its __post_init__):
    the sizes are written out, so the plan captures vLLM's list rather than recomputing it."""
    compilation_config = vllm_config.compilation_config
    mode = compilation_config.cudagraph_mode
    sizes = list(compilation_config.cudagraph_capture_sizes or [])
    out = {"cudagraph_mode": getattr(mode, "name", str(mode)),
           "enforce_eager": bool(vllm_config.model_config.enforce_eager),
           "cudagraph_capture_sizes": sorted(sizes),
           "max_cudagraph_capture_size": compilation_config.max_cudagraph_capture_size}
    # 0.33's performance_mode shapes only the default sizes, which are written out above; the
    # schema keeps "interactivity" so a reader sees it (vLLM's "balanced"/"throughput" are default).
    if str(getattr(vllm_config, "performance_mode", "")) == "interactivity":
        out["performance_mode"] = "interactivity"
    return out


def _apply_attention_backend(data: dict, attention_config) -> None:
    """A backend the user chose (`--attention-backend`, `--attention-config`); vLLM picks its own
    automatic choice only when the model is built, so otherwise planner/engine/hf/choices.py's choice stays."""
    backend = getattr(attention_config, "backend", None)
    if backend is None:
        return
    name = getattr(backend, "name", str(backend))
    known = _schema_enum("model", "attention", "items", "backend")
    if name not in known:
        raise ValueError(f"attention backend {name} is not one the engine config models "
                         f"(known: {', '.join(known)})")
    for entry in data["model"]["attention"]:
        entry["backend"] = name


# vLLM's block-FP8 linear kernel classes (the CUDA list of _POSSIBLE_FP8_BLOCK_KERNELS in 0.25.0 and
# 0.33.0) -> the engine schema's fp8_linear_kernel names.
KERNEL_NAMES = {
    "FlashInferFp8DeepGEMMDynamicBlockScaledKernel": "flashinfer_deep_gemm",
    "DeepGemmFp8BlockScaledMMKernel": "deep_gemm",
    "CutlassFp8BlockScaledMMKernel": "cutlass",
    "B12xFp8BlockScaledMMKernel": "b12x",
    "MarlinFP8ScaledMMLinearKernel": "marlin",
    "HummingFP8ScaledMMLinearKernel": "humming",
    "TritonFp8BlockScaledMMKernel": "triton",
    "BlockWiseTorchFP8ScaledMMLinearKernel": "torch",
}


def _apply_linear_kernels(data: dict, vllm_config) -> None:
    """Every block-FP8 linear's kernel as vLLM selects it here, once per distinct shape."""
    chosen: dict = {}
    for layer in data["model"]["linear"]:
        method, block = quant_of(layer)
        if method != "fp8" or block is None:
            continue  # block-FP8 linears only: vLLM's answer is written even where it is the default
        key = (layer["n"], layer["k"], block)
        if key not in chosen:
            chosen[key] = fp8_linear_kernel(vllm_config, (layer["n"], layer["k"]), list(block))
        layer["kernel"] = chosen[key]


def _apply_sampler(data: dict) -> None:
    """The top-k/top-p sampler, where this process can say which one vLLM takes (else `auto`)."""
    chosen = sampler_of_this_process()
    if chosen is not None:
        model = data["model"]
        after = "model_runner" if "model_runner" in model else "runner"
        data["model"] = hf.insert_after(model, after, "sampler", chosen)


def sampler_of_this_process() -> str | None:
    """'flashinfer' or 'triton' as vLLM decides it here: on a GPU (the plugin, inside vLLM's
    worker) vLLM's own flashinfer_sampler_supported() (v1/sample/ops/topk_topp_sampler.py, 0.25.0
    and 0.33.0); elsewhere (`--from-vllm` on a machine without one) VLLM_USE_FLASHINFER_SAMPLER=0
    says triton, and otherwise the engine keeps `auto`, the release's default (None)."""
    if os.environ.get("VLLM_USE_FLASHINFER_SAMPLER", "").strip() == "0":
        return "triton"
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available():
            return None
        from vllm.v1.sample.ops.topk_topp_sampler import flashinfer_sampler_supported

        return "flashinfer" if flashinfer_sampler_supported() else "triton"
    except Exception:  # noqa: BLE001 - FlashInfer's import failed: vLLM samples with Triton
        return "triton"


def fp8_linear_kernel(vllm_config, weight_shape: tuple, block: list) -> str:
    """The kernel vLLM's choose_scaled_mm_linear_kernel picks for a block-FP8 linear of
    `weight_shape` (N, K), as Fp8LinearMethod asks it (dynamic (1, block) activation groups, the
    model dtype in and out), with `vllm_config` current: the engine schema's name for it. The
    parity tests call it too. Raises ValueError where vLLM finds no kernel."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape, create_fp8_quant_key

    dtype = vllm_config.model_config.dtype
    config = linear.FP8ScaledMMLinearLayerConfig(
        weight_quant_key=create_fp8_quant_key(static=True, group_shape=GroupShape(*block)),
        activation_quant_key=create_fp8_quant_key(static=False, group_shape=GroupShape(1, block[0])),
        input_dtype=dtype, out_dtype=dtype, weight_shape=tuple(weight_shape))
    choose = linear.choose_scaled_mm_linear_kernel
    extra = {"quantization": "fp8_block_w8a8"} if "quantization" in inspect.signature(choose).parameters else {}
    with set_current_vllm_config(vllm_config):
        kernel = choose(config, linear._POSSIBLE_FP8_BLOCK_KERNELS, **extra)
    if kernel.__name__ not in KERNEL_NAMES:
        raise ValueError(f"vLLM selected {kernel.__name__} for a block-FP8 linear, a kernel the engine config "
                         f"does not name (known: {', '.join(KERNEL_NAMES)})")
    return KERNEL_NAMES[kernel.__name__]


def live_block_fp8_linears(model) -> dict:
    """{(N, K, engine schema kernel name): how many layers} of the block-FP8 linears of a loaded vLLM
    model: the shape each rank holds (LinearBase's output/input_size_per_partition) and the kernel
    vLLM built its quant method with (Fp8LinearMethod.fp8_linear, or a compressed-tensors layer's
    CompressedTensorsW8A8Fp8.fp8_linear, 0.25.0 and 0.33.0); a kernel class the engine config does
    not name counts under its class name."""
    found: dict = {}
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        scheme = getattr(module, "scheme", None)  # compressed-tensors: the layer's scheme holds the kernel
        kernel = getattr(method, "fp8_linear", None) or getattr(scheme, "fp8_linear", None)
        block = getattr(method, "block_quant", False) or getattr(scheme, "weight_block_size", None) is not None
        if kernel is None or not block:
            continue
        name = KERNEL_NAMES.get(type(kernel).__name__, type(kernel).__name__)
        key = (getattr(module, "output_size_per_partition", None), getattr(module, "input_size_per_partition", None),
               name)
        found[key] = found.get(key, 0) + 1
    return found


def live_linear_kernels(model) -> dict:
    """{engine schema kernel name: how many layers} of the block-FP8 linears of a loaded vLLM model."""
    return kernel_counts(live_block_fp8_linears(model))


def kernel_counts(live: dict) -> dict:
    """{kernel name: layers} of live_block_fp8_linears' answer, by name."""
    counts: dict = {}
    for (_, _, name), layers in live.items():
        counts[name] = counts.get(name, 0) + layers
    return dict(sorted(counts.items()))


def kernels_mismatch(engine: EngineFacts, live: dict) -> str | None:
    """One line where the live layers run kernels the engine config did not record (None: they agree)."""
    recorded = sorted({layer.kernel for layer in engine.model.linear if layer.kernel})
    if not live or sorted(live) == recorded:
        return None
    return (f"the loaded model's block-FP8 linears run {', '.join(f'{k} ({n})' for k, n in live.items())}, the "
            f"engine config the plan was made for records {', '.join(recorded) or 'none'}: the plan's DeepGEMM "
            "steps may miss what serving compiles (set WARMUP_ENGINE to an engine config with model.linear[].kernel)")


def missing_shapes(engine: EngineFacts, live: dict) -> list[tuple]:
    """(N, K, kernel, layers) of the live block-FP8 shapes the engine config lists no block-FP8 linear
    of, in order; a module whose sizes could not be read is not judged."""
    listed = {(layer.n, layer.k) for layer in engine.model.linear
              if layer.quant.method == "fp8" and layer.quant.block is not None}
    return [(n, k, kernel, layers) for (n, k, kernel), layers in sorted(live.items())
            if n is not None and k is not None and (n, k) not in listed]


def shapes_mismatch(engine: EngineFacts, live: dict) -> str | None:
    """One line naming the live block-FP8 shapes the engine config lacks (None: every live shape is
    there): the plan warms no GEMM of theirs, so each compiles at first use."""
    missing = missing_shapes(engine, live)
    if not missing:
        return None
    shapes = ", ".join(f"n{n} k{k} on {kernel} ({layers} layers)" for n, k, kernel, layers in missing)
    return (f"the loaded model has block-FP8 linears the engine config the plan was made for does not list: {shapes}; "
            "their GEMM kernels compile at first use (the checkpoint's quantization_config decides which "
            "layers are FP8: see planner/engine/hf/quantization.py)")


def with_live_linears(engine: Engine, live: dict) -> Engine | None:
    """`engine` plus a block-FP8 linear for each live shape (N, K, kernel) it does not list, named
    live_n<N>_k<K>, with the block of its other block-FP8 linears ([128, 128] where it has none);
    None when nothing is missing. Raises PlanError where the result is no valid engine config (a
    kernel the schema does not name)."""
    missing = missing_shapes(engine.facts, live)
    if not missing:
        return None
    block = next((list(layer.quant.block) for layer in engine.facts.model.linear
                  if layer.quant.method == "fp8" and layer.quant.block is not None), [128, 128])
    data = copy.deepcopy(engine.data)
    data["model"]["linear"] += [{"name": f"live_n{n}_k{k}", "n": n, "k": k, "count": layers,
                                 "quant": {"method": "fp8", "weight_block_size": block}, "kernel": kernel}
                                for n, k, kernel, layers in missing]
    return engine_from_document(Document(data=data, file=f"{engine.file} and the loaded model's layers"))


# --- the live KV cache: vLLM's groups and blocks, known once it has sized the cache ---------------------

# vLLM's KVCacheSpec classes (vllm/v1/kv_cache_interface.py) by the engine's group kind; the first
# match in a class's method order wins, so MLA's and every other full-attention spec are full_attention
LIVE_KV_KINDS = (("SlidingWindowSpec", "sliding_window"), ("ChunkedLocalAttentionSpec", "chunked_local"),
                 ("MambaSpec", "mamba"), ("CrossAttentionSpec", "cross_attention"),
                 ("FullAttentionSpec", "full_attention"))


def live_kv_cache(model_runner) -> dict | None:
    """{"num_blocks": n, "groups": [{"block_size", "kind"}, ...]} of the KV cache vLLM allocated
    (the model runner's kv_cache_config, set before compile_or_warm_up_model), None before it is.
    A spec of a kind the engine schema has no name for is ValueError."""
    config = getattr(model_runner, "kv_cache_config", None)
    if config is None:
        return None
    groups = [{"block_size": int(g.kv_cache_spec.block_size), "kind": _live_kind(g.kv_cache_spec)}
              for g in config.kv_cache_groups]
    return {"num_blocks": int(config.num_blocks), "groups": groups}


def _live_kind(spec) -> str:
    names = [cls.__name__ for cls in type(spec).__mro__]
    for name, kind in LIVE_KV_KINDS:
        if name in names:
            return kind
    raise ValueError(f"vLLM's KV-cache group spec {type(spec).__name__} has no engine kind")


def kv_cache_mismatch(facts: EngineFacts, live: dict) -> str | None:
    """One line where the engine's KV-cache groups are not vLLM's: their count, block sizes and
    kinds, in any order (a batch hands each group the blocks its kind and block size need, so the
    order of groups alike changes nothing; vLLM orders kinds by their first layer)."""
    mine = [(g.block_size, g.kind) for g in facts.kv_cache.groups]
    theirs = [(g["block_size"], g["kind"]) for g in live["groups"]]
    if sorted(mine) == sorted(theirs):
        return None
    def show(groups):
        return ", ".join(f"{kind} {size}" for size, kind in groups)
    return (f"vLLM's KV cache has {len(theirs)} groups ({show(theirs)}), the engine config "
            f"{len(mine)} ({show(mine)})")


def with_live_kv_cache(engine: Engine, live: dict) -> Engine | None:
    """`engine` with vLLM's allocated KV cache: its block count, and its groups where they differ
    (a group the engine lacks gets the kind and block size vLLM gave it); None when nothing differs.
    The plan's batches then give every group block ids that exist (PlanError where the result is no
    valid engine config)."""
    kv = engine.facts.kv_cache
    groups_differ = kv_cache_mismatch(engine.facts, live) is not None
    if not groups_differ and kv.num_blocks == live["num_blocks"]:
        return None
    data = copy.deepcopy(engine.data)
    data["kv_cache"]["num_blocks"] = live["num_blocks"]
    if groups_differ:
        data["kv_cache"]["groups"] = [dict(g) for g in live["groups"]]
    return engine_from_document(Document(data=data, file=f"{engine.file} and vLLM's allocated KV cache"))


def _description(data: dict, model_config, cache_config) -> str:
    """Where the config came from, and whether num_blocks is vLLM's or the planner's estimate."""
    text = (f"Derived from vLLM's resolved VllmConfig of {os.path.basename(str(model_config.model).rstrip('/'))} "
            f"({data['model']['architecture']}); every size is per rank.")
    if _num_blocks(cache_config) is None:
        text += (f" num_blocks is an estimate ({hf.GPU_MEMORY_UTILIZATION:.0%} of the "
                 f"{data['device']['name']}'s memory minus the weights; see planner/engine/hf/memory.py).")
    return text


def _platform_gpu() -> str:
    from vllm.platforms import current_platform  # only here: the worker's own GPU
    return gpu_of_device_name(current_platform.get_device_name())


def gpu_of_device_name(device_name: str) -> str:
    """NVML's name ("NVIDIA H100 80GB HBM3") -> the planner's GPU name ("H100")."""
    words = {w.upper() for w in re.split(r"[^A-Za-z0-9]+", device_name)}
    for name in hf.GPUS:
        if name.upper() in words:
            return name
    raise ValueError(f"GPU {device_name!r} is not one the planner knows (known: {', '.join(hf.GPUS)}); "
                     "pass its name as the device")
