"""vLLM's ModelConfig, as the config.json gives it: the architecture and its layout (layouts.py;
one without is refused, refusal.py), the language model's config (text_config for a multimodal
model, with the config class's defaults), the hidden size, layers and vocabulary, the dtype
(`--dtype auto`'s: a float32 checkpoint is served in bfloat16, auto_dtype),
max_model_len (--max-model-len may lower the config's own limit, not raise it), and the KV
cache's dtype (--kv-cache-dtype, vLLM's CacheConfig.cache_dtype: every attention layer's; `auto`
is the model dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_model.arith import cdiv

from ...limits import MAX_TOKENS
from .flags import Flags
from .layouts import LAYOUTS, Layout, with_defaults
from .refusal import refuse_architecture
from .source import MAX_LEN_KEYS, HFConfig

# vLLM's MM_PREFIX_LM_MODELS (transformers_utils/model_arch_config_convertor.py, 0.25.0 and 0.33.0):
# the top-level model_type of multimodal models whose image tokens attend bidirectionally
# (ModelConfig.is_mm_prefix_lm), which FlashAttention 2/3 and FlashInfer cannot run.
MM_PREFIX_LM_MODELS = ("bagel", "gemma3", "molmo2", "moondream3", "paligemma", "umm")


DEFAULT_BLOCK_SIZE = 16
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Bytes of one KV-cache value, times 16 (nvfp4: half a byte plus an fp8 scale per 16 values); auto: the model's
_KV_BYTES_X16 = {"bfloat16": 32, "float16": 32, "fp8": 16, "fp8_e4m3": 16, "fp8_e5m2": 16, "nvfp4": 9}
_DTYPE_ALIASES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
                  "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}


@dataclass
class Model:
    """vLLM's ModelConfig: what the config.json says about the whole model."""

    architecture: str
    layout: Layout
    hidden_size: int
    num_layers: int
    vocab_size: int
    dtype: str
    max_model_len: int
    config_max_len: int | None  # the config's own limit (the default of --max-model-len)
    kv_cache_dtype: str = "auto"  # vLLM's CacheConfig.cache_dtype (--kv-cache-dtype)
    mla: bool = False             # multi-head latent attention (a kv_lora_rank: deepseek.py)
    mm_prefix: bool = False       # vLLM's is_mm_prefix_lm (MM_PREFIX_LM_MODELS)

    @property
    def dtype_bytes(self) -> int:
        return _DTYPE_BYTES[self.dtype]

    def kv_bytes(self, values: int) -> int:
        """Bytes of `values` KV-cache values in the cache's dtype (rounded up)."""
        per_16 = _KV_BYTES_X16.get(self.kv_cache_dtype, 16 * self.dtype_bytes)
        return cdiv(values * per_16, 16)


def architecture(ctx: HFConfig) -> tuple[str, Layout]:
    """(HF architecture, its layout), or the refusal that says what to do instead."""
    archs = ctx.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ctx.fail("architectures is missing (expected a list such as [\"LlamaForCausalLM\"])")
    layout = LAYOUTS.get(archs[0])
    if layout is None:
        raise refuse_architecture(ctx, archs[0])
    return archs[0], layout


def language_config(ctx: HFConfig, layout: Layout) -> HFConfig:
    """The language model's config as vLLM's config object reads it: text_config where the layout
    says so (the dtype the top level's where it gives one), with the config class's defaults."""
    config = ctx.hf
    if layout.text_config:
        config = ctx.get("text_config")
        if not isinstance(config, dict):
            raise ctx.fail("text_config is missing (the language model's config of a multimodal model)")
        dtype = {k: ctx.get(k) for k in ("torch_dtype", "dtype") if ctx.get(k) is not None}
        if dtype:  # the model's dtype (vllm_bridge writes the one vLLM resolved there)
            config = {**{k: v for k, v in config.items() if k not in ("torch_dtype", "dtype")}, **dtype}
    return HFConfig(with_defaults(config, layout), ctx.source)


# vLLM's _FLOAT16_NOT_SUPPORTED_MODELS (config/model.py, 0.25.0 and 0.33.0; 0.25.0 also plamo2,
# which --from-hf does not plan): model types `--dtype auto` never serves in float16.
FLOAT16_NOT_SUPPORTED_MODELS = ("gemma2", "gemma3", "gemma3_text", "glm4")


def _config_dtype(ctx: HFConfig) -> str:
    """The checkpoint's dtype: torch_dtype (or dtype); none given is transformers' float32."""
    raw = ctx.get("torch_dtype", ctx.get("dtype")) or "float32"
    dtype = _DTYPE_ALIASES.get(str(raw).replace("torch.", ""))
    if dtype is None:
        raise ctx.fail(f"torch_dtype {raw!r} is not supported (bfloat16, float16, float32)", "torch_dtype")
    return dtype


def auto_dtype(config_dtype: str, model_type) -> str:
    """The dtype `--dtype auto` serves (vLLM's _resolve_auto_dtype, config/model.py, 0.25.0 and
    0.33.0): a float32 checkpoint is downcast to the platform's first supported dtype, bfloat16 on
    every GPU the planner knows (CudaPlatform.supported_dtypes from SM 8.0); a model type of
    FLOAT16_NOT_SUPPORTED_MODELS gets bfloat16 for a float16 checkpoint too."""
    if config_dtype == "float32" or (config_dtype == "float16" and model_type in FLOAT16_NOT_SUPPORTED_MODELS):
        return "bfloat16"
    return config_dtype


def _dtype(ctx: HFConfig, top: HFConfig) -> str:
    """The model dtype vLLM serves with `--dtype auto`; `top`: the whole config.json, whose
    model_type vLLM keys the float16 rule by."""
    return auto_dtype(_config_dtype(ctx), top.get("model_type"))


def _max_model_len(ctx: HFConfig, flag: int | None) -> tuple[int, int | None]:
    """(max_model_len, the config's own limit): the flag may lower the limit, not raise it."""
    key = next((k for k in MAX_LEN_KEYS if ctx.get(k) is not None), None)
    limit = None if key is None else ctx.pos_int(key)
    if flag is None:
        if limit is None:
            raise ctx.fail("max_position_embeddings is missing; pass --max-model-len")
        return limit, limit
    if limit is not None and flag > limit:
        raise ctx.fail(f"--max-model-len {flag} exceeds {key} ({limit})")
    return flag, limit


def _bounded_context(ctx: HFConfig, lengths: tuple[int, int | None]) -> tuple[int, int | None]:
    """The engine schema bounds max_model_len: a longer config limit needs --max-model-len."""
    if lengths[0] > MAX_TOKENS:
        key = next(k for k in MAX_LEN_KEYS if ctx.get(k) is not None)
        raise ctx.fail(f"{key} = {lengths[0]:,} is over the bound of {MAX_TOKENS:,} tokens for max_model_len; "
                       "pass --max-model-len", key)
    return lengths


def model_config(ctx: HFConfig, top: HFConfig, architecture: str, layout: Layout, flags: Flags) -> Model:
    """The language model's facts (`ctx`, language_config); `top`: the whole config.json."""
    hidden = ctx.pos_int("hidden_size")  # read in this order: the first bad key is the one named
    num_layers = ctx.pos_int("num_hidden_layers")
    vocab = ctx.pos_int("vocab_size")
    dtype = _dtype(ctx, top)
    mm_prefix = bool(top.get("is_mm_prefix_lm", top.get("model_type") in MM_PREFIX_LM_MODELS))
    max_model_len, config_max_len = _bounded_context(ctx, _max_model_len(ctx, flags.max_model_len))
    return Model(architecture=architecture, layout=layout, hidden_size=hidden, num_layers=num_layers,
                 vocab_size=vocab, dtype=dtype, max_model_len=max_model_len, config_max_len=config_max_len,
                 kv_cache_dtype=flags.kv_cache_dtype, mla=ctx.get("kv_lora_rank") is not None, mm_prefix=mm_prefix)
