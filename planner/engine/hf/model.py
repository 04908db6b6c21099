"""vLLM's ModelConfig, as the config.json gives it: the architecture and its model family, the
hidden size, layers and vocabulary, the dtype, max_model_len (--max-model-len may lower the
config's own limit, not raise it), and the KV cache's dtype (--kv-cache-dtype, vLLM's
CacheConfig.cache_dtype: every attention layer's; `auto` is the model dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_model.arith import cdiv

from ...limits import MAX_TOKENS
from .flags import Flags
from .source import MAX_LEN_KEYS, HFConfig


# HF architecture -> family. MistralForCausalLM runs on vLLM's Llama model.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "MixtralForCausalLM": "mixtral",
    "DeepseekV3ForCausalLM": "deepseek_v3",
}


MLA_BLOCK_SIZE = 64         # FlashMLA's page size
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
    family: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    dtype: str
    max_model_len: int
    config_max_len: int | None  # the config's own limit (the default of --max-model-len)
    kv_cache_dtype: str = "auto"  # vLLM's CacheConfig.cache_dtype (--kv-cache-dtype)

    @property
    def mla(self) -> bool:  # DeepSeek's multi-head latent attention
        return self.family == "deepseek_v3"

    @property
    def dtype_bytes(self) -> int:
        return _DTYPE_BYTES[self.dtype]

    def kv_bytes(self, values: int) -> int:
        """Bytes of `values` KV-cache values in the cache's dtype (rounded up)."""
        per_16 = _KV_BYTES_X16.get(self.kv_cache_dtype, 16 * self.dtype_bytes)
        return cdiv(values * per_16, 16)

    @property
    def default_block_size(self) -> int:
        return MLA_BLOCK_SIZE if self.mla else DEFAULT_BLOCK_SIZE


def _architecture(ctx: HFConfig) -> tuple[str, str]:
    """(HF architecture, model family)."""
    archs = ctx.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ctx.fail("architectures is missing (expected a list such as [\"LlamaForCausalLM\"])")
    family = SUPPORTED_ARCHITECTURES.get(archs[0])
    if family is None:
        raise ctx.fail(f"architectures: {archs[0]} is not supported; supported: "
                       f"{', '.join(sorted(SUPPORTED_ARCHITECTURES))}")
    return archs[0], family


def _dtype(ctx: HFConfig) -> str:
    raw = ctx.get("torch_dtype", ctx.get("dtype")) or "bfloat16"
    dtype = _DTYPE_ALIASES.get(str(raw).replace("torch.", ""))
    if dtype is None:
        raise ctx.fail(f"torch_dtype {raw!r} is not supported (bfloat16, float16, float32)")
    return dtype


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


def model_config(ctx: HFConfig, flags: Flags) -> Model:
    architecture, family = _architecture(ctx)
    hidden = ctx.pos_int("hidden_size")
    num_layers = ctx.pos_int("num_hidden_layers")
    vocab = ctx.pos_int("vocab_size")
    dtype = _dtype(ctx)
    return Model(architecture, family, hidden, num_layers, vocab, dtype,
                 *_bounded_context(ctx, _max_model_len(ctx, flags.max_model_len)), flags.kv_cache_dtype)
