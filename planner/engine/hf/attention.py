"""The engine's attention entries and KV-cache groups: which layers slide a window, the attention
backend vLLM picks for the model, the GPU and --kv-cache-dtype, and one attention entry and one
KV-cache group per kind of layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from .device import Gpu
from .layers import AttentionShape
from .model import MLA_BLOCK_SIZE, Model
from .source import HFConfig


@dataclass
class _KvCacheGroup:
    """vLLM's KV-cache group: the layers of one kind of attention, which share one block size."""

    kind: str                  # "full_attention" | "sliding_window"
    sliding_window: list[int]  # vLLM's (left, right) window; [-1, -1]: none
    num_layers: int


def _sliding_layers(ctx: HFConfig, family: str, num_layers: int) -> tuple[int | None, list[bool]]:
    """(window, per-layer flags): which layers use sliding-window attention."""
    window = ctx.get("sliding_window")
    if window is None or window is False:
        return None, [False] * num_layers
    window = ctx.pos_int("sliding_window")
    layer_types = ctx.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == num_layers:
        return window, [t == "sliding_attention" for t in layer_types]
    if family in ("qwen2", "qwen3", "qwen3_moe"):
        # Qwen keeps sliding_window in the config but uses it only with
        # use_sliding_window, and then only from max_window_layers on.
        if not ctx.get("use_sliding_window", False):
            return None, [False] * num_layers
        first = ctx.nonneg_int("max_window_layers", num_layers)
        return window, [i >= first for i in range(num_layers)]
    return window, [True] * num_layers


# KV-cache dtypes of the engine schema each backend takes (supported_kv_cache_dtypes, vLLM 0.33):
# FlashAttention takes fp8 with FA3 / FA4 only (SM 9.x, 10.x), never fp8_e5m2 or nvfp4; FlashInfer,
# next in vLLM's order on CUDA and installed with it, takes them all; FlashMLA and Triton MLA no e5m2, nvfp4.
_FA_KV_CACHE = ("auto", "float16", "bfloat16")
_FA_FP8_KV_CACHE = ("fp8", "fp8_e4m3")
_MLA_KV_CACHE = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3")


def _attention_backend(ctx: HFConfig, model: Model, gpu: Gpu, block_size: int) -> tuple[str, int | None, list]:
    """(vLLM attention backend, sliding window, per-layer sliding flags)."""
    major = int(gpu.capability.split(".")[0])
    if not model.mla:
        window, sliding = _sliding_layers(ctx, model.family, model.num_layers)
        kv = model.kv_cache_dtype
        fa = kv in _FA_KV_CACHE or (kv in _FA_FP8_KV_CACHE and major in (9, 10))
        return "FLASH_ATTN" if fa else "FLASHINFER", window, sliding
    # FlashMLA needs Hopper or later and its own page size; vLLM falls back to Triton MLA
    backend = "FLASHMLA" if block_size == MLA_BLOCK_SIZE and major >= 9 else "TRITON_MLA"
    if model.kv_cache_dtype not in _MLA_KV_CACHE:
        raise ctx.fail(f"--kv-cache-dtype {model.kv_cache_dtype}: {backend}, the MLA attention backend of this "
                       f"model, takes {', '.join(_MLA_KV_CACHE)}; vLLM refuses it")
    return backend, None, [False] * model.num_layers


def _kv_cache_groups(window: int | None, sliding: list[bool]) -> list[_KvCacheGroup]:
    """Full-attention layers first, then sliding-window ones: one KV-cache group per kind."""
    groups = []
    n_full = sliding.count(False)
    if n_full:
        groups.append(_KvCacheGroup("full_attention", [-1, -1], n_full))
    if len(sliding) - n_full:
        groups.append(_KvCacheGroup("sliding_window", [window - 1, 0], len(sliding) - n_full))
    return groups


def _attention_entry(shape: AttentionShape, group: _KvCacheGroup, index: int, softcap: float,
                     backend: str, kv_cache_dtype: str) -> dict:
    """The attention entry of one KV-cache group's layers (`index`: the group's, written past the first)."""
    entry = {"name": "attn" if index == 0 else "attn_sliding",
             "num_heads": shape.num_heads, "num_kv_heads": shape.num_kv_heads, "head_size": shape.head_size}
    if shape.head_size_v is not None:
        entry["head_size_v"] = shape.head_size_v
    entry.update({"count": group.num_layers, "scale": shape.scale, "logits_soft_cap": softcap,
                  "sliding_window": group.sliding_window, "kv_cache_dtype": kv_cache_dtype, "backend": backend})
    if index:
        entry["kv_cache_group"] = index
    return entry


def attention_and_kv_groups(ctx: HFConfig, model: Model, shape: AttentionShape, gpu: Gpu,
                            block_size: int) -> tuple[list[dict], list[dict]]:
    """(attention entries, kv_cache groups): one of each per KV-cache group."""
    backend, window, sliding = _attention_backend(ctx, model, gpu, block_size)
    softcap = ctx.number(ctx.get("attn_logit_softcapping") or 0.0, "attn_logit_softcapping")
    if softcap < 0:
        raise ctx.fail(f"attn_logit_softcapping must be >= 0, got {softcap!r}", "attn_logit_softcapping")
    groups = _kv_cache_groups(window, sliding)
    attention = [_attention_entry(shape, group, i, softcap, backend, model.kv_cache_dtype)
                 for i, group in enumerate(groups)]
    return attention, [{"block_size": block_size, "kind": group.kind} for group in groups]
