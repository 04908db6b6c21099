"""The engine's attention entries and KV-cache groups: which layers slide a window, the attention
backend vLLM picks for the model, the GPU and --kv-cache-dtype, and one attention entry and one
KV-cache group per kind of layer.

Which layers slide, by rule from the config (as vLLM reads the transformers config object):
* layer_types where the config gives them (one per layer: "sliding_attention" slides);
* else Qwen's use_sliding_window: from max_window_layers on, and nowhere without it (transformers'
  Qwen2Config drops sliding_window unless use_sliding_window);
* else every sliding_window_pattern-th layer is full and the others slide, the pattern the config's
  sliding_window_pattern or its config class's default (the layout's sliding_pattern: 2 for
  Gemma-2, 6 for Gemma-3, 4 for Cohere2);
* else, with a sliding_window, every layer slides (Mistral-7B-v0.1, Phi-3-mini-4k, Starcoder2):
  vLLM gives a model that is not interleaved CacheConfig.sliding_window (engine/arg_utils.py).
A window of w tokens is vLLM's (w - 1, 0); where the release's model code passes sliding_window + 1
(the row's sliding_window_plus_one in planner/engine/releases.py: vLLM 0.33.0's commandr.py for
Cohere2, whose layers see [pos - sliding_window, pos]), w is one more than the config's. The soft cap
is attn_logit_softcapping (Gemma-2; gemma3.py passes none, and its configs give none).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_model.arith import cdiv
from kernel_model.device import parse_capability

from ..releases import VllmRelease
from .device import Gpu
from .layers import AttentionShape
from .layouts import Layout
from .model import DEFAULT_BLOCK_SIZE, Model
from .source import HFConfig


@dataclass
class _KvCacheGroup:
    """vLLM's KV-cache group: the layers of one kind of attention, which share one block size."""

    kind: str                  # "full_attention" | "sliding_window"
    sliding_window: list[int]  # vLLM's (left, right) window; [-1, -1]: none
    num_layers: int


def _sliding_layers(ctx: HFConfig, layout: Layout, num_layers: int) -> tuple[int | None, list[bool]]:
    """(window, per-layer flags): which layers use sliding-window attention (module docstring)."""
    window = ctx.get("sliding_window")
    if window is None or window is False:
        return None, [False] * num_layers
    window = ctx.pos_int("sliding_window")
    layer_types = ctx.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == num_layers:
        return window, [t == "sliding_attention" for t in layer_types]
    if ctx.get("use_sliding_window") is not None:
        if not ctx.get("use_sliding_window"):
            return None, [False] * num_layers
        first = ctx.nonneg_int("max_window_layers", num_layers)
        return window, [i >= first for i in range(num_layers)]
    pattern = ctx.pos_int("sliding_window_pattern") if ctx.get("sliding_window_pattern") else layout.sliding_pattern
    if pattern:
        return window, [(i + 1) % pattern != 0 for i in range(num_layers)]
    return window, [True] * num_layers


def vllm_window(window: int | None, model: Model, release: VllmRelease) -> int | None:
    """The window vLLM's sliding layers get: the config's, plus one token where the release's model
    code adds it (module docstring; 0.25.0's commandr.py passes config.sliding_window)."""
    if window is not None and model.architecture in release.sliding_window_plus_one:
        return window + 1
    return window


# KV-cache dtypes of the engine schema each backend takes (supported_kv_cache_dtypes, vLLM 0.33):
# FlashAttention takes fp8 with FA3 / FA4 only (SM 9.x, 10.x), never fp8_e5m2 or nvfp4; FlashInfer,
# next in vLLM's order on CUDA and installed with it, takes them all; FlashMLA and Triton MLA no e5m2, nvfp4.
_FA_KV_CACHE = ("auto", "float16", "bfloat16")
_FA_FP8_KV_CACHE = ("fp8", "fp8_e4m3")
_MLA_KV_CACHE = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3")


def _dense_backend(model: Model, shape: AttentionShape, major: int) -> str:
    """vLLM's first backend that takes the layer (platforms/cuda.py's order on SM 8.x and 9.x:
    FLASH_ATTN, FLASHINFER, TRITON_ATTN, each backend's supports_* checks in v1/attention/backends/):
    FlashAttention takes head sizes that are multiples of 8 up to 256, sinks from SM 9.0 (FA3), no
    bidirectional multimodal prefix, and the KV dtypes above; FlashInfer head sizes 64, 128, 256 and
    512, no sinks (but on SM 10.x, where FlashAttention comes first), no multimodal prefix; Triton
    the rest (GPT-OSS below SM 9.0, Gemma-3's multimodal model)."""
    head, kv, sinks = shape.head_size, model.kv_cache_dtype, model.layout.sinks
    fa_kv = kv in _FA_KV_CACHE or (kv in _FA_FP8_KV_CACHE and major in (9, 10))
    if head % 8 == 0 and head <= 256 and fa_kv and not model.mm_prefix and not (sinks and major < 9):
        return "FLASH_ATTN"
    if head in (64, 128, 256, 512) and not model.mm_prefix and not sinks:
        return "FLASHINFER"
    return "TRITON_ATTN"


def mla_backend(major: int, block_size: int) -> str:
    """vLLM's first dense MLA backend that takes the layer: 0.25.0's and 0.33.0's order on CUDA
    (platforms/cuda.py, use_mla): on SM 10.x FLASHINFER_MLA first (pages of 32 or 64 tokens); elsewhere
    FLASH_ATTN_MLA (FlashAttention 3: SM 9.x, pages a multiple of 16), FLASHMLA (SM 9.0 and later, pages
    of 64), TRITON_MLA. What each needs compiles ahead of time (vLLM's wheel): nothing is planned for it."""
    if major == 10 and block_size in (32, 64):
        return "FLASHINFER_MLA"
    if major == 9 and block_size % 16 == 0:
        return "FLASH_ATTN_MLA"
    if major >= 9 and block_size == 64:
        return "FLASHMLA"
    return "TRITON_MLA"


def default_block_size(model: Model, gpu: Gpu) -> int:
    """vLLM's page when --block-size is not given: its default, 16, where the backend takes it, else the
    backend's smallest (AttentionBackend.get_preferred_block_size): FLASHINFER_MLA's 32 on SM 10.x."""
    major, _minor = parse_capability(gpu.capability)
    return 32 if model.mla and major == 10 else DEFAULT_BLOCK_SIZE


def _attention_backend(ctx: HFConfig, model: Model, shape: AttentionShape, gpu: Gpu,
                       block_size: int, release: VllmRelease) -> tuple[str, int | None, list]:
    """(vLLM attention backend, sliding window, per-layer sliding flags)."""
    major, _minor = parse_capability(gpu.capability)
    if not model.mla:
        window, sliding = _sliding_layers(ctx, model.layout, model.num_layers)
        return _dense_backend(model, shape, major), vllm_window(window, model, release), sliding
    backend = mla_backend(major, block_size)
    if model.kv_cache_dtype not in _MLA_KV_CACHE:
        raise ctx.fail(f"--kv-cache-dtype {model.kv_cache_dtype}: {backend}, the MLA attention backend of this "
                       f"model, takes {', '.join(_MLA_KV_CACHE)}; vLLM refuses it")
    return backend, None, [False] * model.num_layers


def _kv_cache_groups(window: int | None, sliding: list[bool]) -> list[_KvCacheGroup]:
    """vLLM's KV-cache groups of a model with full and sliding-window layers of one page size
    (_get_kv_cache_groups_uniform_page_size: vllm/v1/core/kv_cache_utils.py in 0.25.0, kv_cache_planning.py in 0.33.0):
    every group holds the same number of layers, the fewest layers of a kind, or the most where
    that is under 1.5 times the fewest; a kind of n layers is then cdiv(n, size) groups, the i-th
    its layers[i::groups]. So 8 full and 24 sliding layers (Cohere2's 3:1) are four groups, each
    with its own block table: a batch must give each of them block ids. Full-attention groups are
    written first (vLLM orders kinds by their first layer: the groups are the same, in another
    order, and a batch's block ids are alike for both kinds: stages/batches.BlockCounter)."""
    n_full = sliding.count(False)
    kinds = [(kind, n) for kind, n in (("full_attention", n_full), ("sliding_window", len(sliding) - n_full)) if n]
    fewest, most = min(n for _, n in kinds), max(n for _, n in kinds)
    size = most if most < 1.5 * fewest else fewest
    groups = []
    for kind, n in kinds:
        num_groups = cdiv(n, size)
        span = [-1, -1] if kind == "full_attention" else [window - 1, 0]
        groups += [_KvCacheGroup(kind, span, len(range(i, n, num_groups))) for i in range(num_groups)]
    return groups


def _attention_entry(shape: AttentionShape, group: _KvCacheGroup, index: int, name: str, softcap: float,
                     backend: str, kv_cache_dtype: str) -> dict:
    """The attention entry of one KV-cache group's layers (`index`: the group's, written past the first)."""
    entry = {"name": name,
             "num_heads": shape.num_heads, "num_kv_heads": shape.num_kv_heads, "head_size": shape.head_size}
    if shape.head_size_v is not None:
        entry["head_size_v"] = shape.head_size_v
    entry.update({"count": group.num_layers, "scale": shape.scale, "logits_soft_cap": softcap,
                  "sliding_window": group.sliding_window, "kv_cache_dtype": kv_cache_dtype, "backend": backend})
    if index:
        entry["kv_cache_group"] = index
    return entry


def _attention_names(groups: list[_KvCacheGroup]) -> list[str]:
    """attn for the full-attention layers (or every layer, where all are of one kind), attn_sliding
    for the sliding-window ones beside them; a kind split over several groups numbers the rest
    (attn_2, attn_sliding_2, ...)."""
    mixed = len({g.kind for g in groups}) > 1
    names, seen = [], {}
    for group in groups:
        base = "attn_sliding" if mixed and group.kind == "sliding_window" else "attn"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}_{seen[base]}")
    return names


def attention_and_kv_groups(ctx: HFConfig, model: Model, shape: AttentionShape, gpu: Gpu,
                            block_size: int, release: VllmRelease) -> tuple[list[dict], list[dict]]:
    """(attention entries, kv_cache groups): one of each per KV-cache group; `release`: the vLLM
    release whose model code the sliding window follows."""
    backend, window, sliding = _attention_backend(ctx, model, shape, gpu, block_size, release)
    softcap = ctx.number(ctx.get("attn_logit_softcapping") or 0.0, "attn_logit_softcapping")
    if softcap < 0:
        raise ctx.fail(f"attn_logit_softcapping must be >= 0, got {softcap!r}", "attn_logit_softcapping")
    groups = _kv_cache_groups(window, sliding)
    attention = [_attention_entry(shape, group, i, name, softcap, backend, model.kv_cache_dtype)
                 for i, (group, name) in enumerate(zip(groups, _attention_names(groups)))]
    return attention, [{"block_size": block_size, "kind": group.kind} for group in groups]
