"""Engine config from a Hugging Face ``config.json``.

``engine_from_hf(hf, tp=..., gpu=...)`` turns the dict of a model's
``config.json`` into an engine config (schemas/engine.schema.json): the GEMM
shapes, fused-MoE layers and attention layers that one rank of a vLLM server
runs, after tensor-parallel (and expert-parallel) sharding, plus KV-cache,
scheduler, parallel and device facts. ``engine_to_yaml`` writes it as YAML.

This module imports only the standard library and the planner's YAML codec, whose
writer needs nothing else: ``warmup`` must start fast.

Sharding follows vLLM
---------------------
* Column-parallel layers split N (``qkv_proj``, ``gate_up_proj``, ``q_b_proj``,
  ``kv_b_proj``, the shared experts' ``gate_up_proj``, ``lm_head``);
  row-parallel layers split K (``o_proj``, ``down_proj``); replicated layers
  (the MoE router ``gate``, DeepSeek's ``fused_qkv_a_proj``) are whole.
* KV heads are replicated when there are fewer of them than ``tp``:
  per rank ``max(1, num_key_value_heads // tp)``.
* ``lm_head``: vLLM pads the vocabulary to a multiple of 64, then splits it
  over ``tp`` (``VocabParallelEmbedding``): ``n = pad64(vocab_size) / tp``.
* Fused MoE: without expert parallelism every rank holds every expert with
  ``moe_intermediate_size / (tp * dp)`` (vLLM flattens TP across DP for MoE;
  with ``dp == 1`` that is ``/ tp``); with ``enable_expert_parallel`` a rank
  holds ``num_experts / (tp * dp)`` whole experts.
* FP8 block quantization: vLLM refuses a sharded N (or K) that is not a
  multiple of the block (e.g. Qwen3-30B-A3B-FP8 at tp 4: 768 / 4 = 192); so
  does this module, with an HFConfigError.
* Embeddings, ``lm_head`` and router gates stay unquantized, except Qwen3-MoE's gate, which
  vLLM (0.25.0 and 0.33.0) builds with the model's quant_config.
  ``quantization_config.ignored_layers`` (or ``modules_to_not_convert``)
  entries match a module when equal to its full name
  (``model.layers.3.self_attn.o_proj``), when they are a dotted suffix of it
  (``lm_head``, ``mlp.gate``), or, with a ``re:`` prefix, as a regular
  expression. A role that is ignored in some layers only is split in two
  entries, the unquantized one named ``<role>.unquantized``.
* The DeepSeek MTP layer (``num_nextn_predict_layers``) is not part of the
  main model and is left out of its layers.
* Speculative decoding (``speculative``) is what the flags say, as vLLM's
  SpeculativeConfig takes it: a method of the engine schema and a number of
  draft tokens (1 to 256), required except where vLLM has a default (``mtp``:
  the model's ``num_nextn_predict_layers``, which it needs; ``suffix``: 24,
  vLLM's suffix_decoding_max_tree_depth). ``none`` (the default) is no
  speculation. The drafter's weights and KV cache are not in the estimate below.
* ``--kv-cache-dtype`` (vLLM's CacheConfig.cache_dtype, the engine schema's
  values) is every attention layer's ``kv_cache_dtype``; ``auto`` is the model
  dtype.
* What vLLM decides at start-up is its defaults as a user installs it
  (planner/engine/vllm_choices.py): every block-FP8 linear's ``kernel`` is what vLLM's
  kernel selection picks with FlashInfer installed (``pip install vllm==0.25.0``
  brings it): FlashInferFp8DeepGEMMDynamicBlockScaledKernel on SM 9.0, which the
  engine loader fills in, so it is not written; ``--fp8-linear-kernel deep_gemm``
  says FlashInfer is absent or VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER=0 (DeepGEMM's
  kernel, written on each layer). ``model_runner`` is
  ``auto`` (not written), each release's own choice for the model, decided for the plan of
  that release; ``--model-runner v1|v2`` pins it (VLLM_USE_V2_MODEL_RUNNER).

KV-cache size estimate (when ``num_blocks`` is not given)
---------------------------------------------------------
A rough upper bound of what vLLM's memory profiling finds, with
``--gpu-memory-utilization 0.9``::

    weights   = sum(linear n*k*count*bytes) + sum(moe count*E*3*I*H*bytes)
                + embedding (pad64(vocab)/tp * hidden * dtype bytes, unless tied)
                bytes: 1 for fp8 weights, the model dtype's size (2) otherwise;
                scales, norms and biases are ignored
    free      = 0.9 * memory_gib * 2**30 - weights
    per_block = num_layers * block_size * 2 (K and V) * kv_heads_per_rank
                * head_size * KV bytes
                (MLA: num_layers * block_size * (kv_lora_rank + qk_rope_head_dim)
                 * KV bytes, a single latent "head" and no separate V)
                KV bytes: the model dtype's size for ``auto``, 2 for 16-bit
                types, 1 for fp8, 0.5625 for nvfp4 (4 bits and an 8-bit scale
                per 16 values)
    num_blocks = floor(free / per_block) rounded down to a multiple of 16

It ignores activation memory, CUDA graphs and the sampler, so a real server
finds somewhat fewer blocks; pass ``num_blocks`` to pin the number. Where vLLM
would refuse to start (no free memory, or fewer blocks than one request of
max_model_len needs: its check_enough_kv_cache_memory), the config is refused with
the numbers and what to change (it used to get num_blocks 16, a warmup of 15
requests that every check passed); ``ignore_memory`` writes it anyway, with room
for one max_model_len request, and a warning.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from kernel_model.arith import cdiv

from ..limits import (FP8_LINEAR_KERNEL_CHOICES, KV_CACHE_DTYPES, MAX_BLOCKS, MAX_SEQS, MAX_SPECULATIVE_TOKENS,
                     MAX_TOKENS, MAX_VOCAB, MODEL_RUNNERS, SAMPLERS, SPECULATIVE_METHODS)
from .vllm_choices import default_linear_kernel
from ..yamlio import dump

__all__ = ["GPUS", "HFConfigError", "SUPPORTED_ARCHITECTURES", "engine_from_hf", "engine_to_yaml", "gpu_name"]


class HFConfigError(ValueError):
    """A config.json (or a flag next to it) that cannot become an engine config.

    `key` is the config.json key at fault where there is one (so that `warmup engine` can
    point at its line), and `reason` the message without the file in front."""

    def __init__(self, message: str, key: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.key, self.reason = key, reason

    def as_plan_error(self, file: str, text: str | None):
        """The one-line error of the config.json `file` (its `text`), at the key's line where known."""
        from ..errors import PlanError

        line = key_line(text, self.key) if text is not None and self.key is not None else None
        return PlanError(self.reason or str(self), file=file, line=line)


def key_line(text: str, key: str) -> int | None:
    """The line of the first `"key":` in a JSON text (json keeps no positions)."""
    match = re.search(r'"%s"\s*:' % re.escape(key), text)
    return text.count("\n", 0, match.start()) + 1 if match else None


# name -> device facts. memory_gib is the nominal size (used for scheduler
# defaults and the KV estimate).
GPUS: dict[str, dict] = {
    "H100": {"num_sms": 132, "capability": "9.0", "memory_gib": 80},
    "H200": {"num_sms": 132, "capability": "9.0", "memory_gib": 141},
    "H20": {"num_sms": 78, "capability": "9.0", "memory_gib": 96},
    "B200": {"num_sms": 148, "capability": "10.0", "memory_gib": 180},
    "A100": {"num_sms": 108, "capability": "8.0", "memory_gib": 80},
    "L40S": {"num_sms": 142, "capability": "8.9", "memory_gib": 48},
}

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

VOCAB_PADDING = 64          # vLLM DEFAULT_VOCAB_PADDING_SIZE
GPU_MEMORY_UTILIZATION = 0.9
MLA_BLOCK_SIZE = 64         # FlashMLA's page size
DEFAULT_BLOCK_SIZE = 16
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Bytes of one KV-cache value, times 16 (nvfp4: half a byte plus an fp8 scale per 16 values); auto: the model's
_KV_BYTES_X16 = {"bfloat16": 32, "float16": 32, "fp8": 16, "fp8_e4m3": 16, "fp8_e5m2": 16, "nvfp4": 9}
SUFFIX_TREE_DEPTH = 24      # vLLM's suffix_decoding_max_tree_depth: suffix decoding's default draft tokens
_DTYPE_ALIASES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
                  "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}
_MAX_LEN_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")

# The largest value read from each config.json key, and why. Every count and size is bounded
# at its key before anything is built from it: the layers and experts are built in loops, so a
# num_hidden_layers of 10^7 (a typo) used to run for minutes and 10^30 out of memory.
_LAYERS = (1 << 12, "no model has more than a few hundred decoder layers")
_HEADS = (1 << 12, "no model has more than a few hundred attention heads")
_EXPERTS = (1 << 14, "no model has more than a few hundred experts")
_BOUNDS: dict[str, tuple[int, str]] = {
    "num_hidden_layers": _LAYERS, "first_k_dense_replace": _LAYERS, "max_window_layers": _LAYERS,
    "decoder_sparse_step": _LAYERS, "moe_layer_freq": _LAYERS,
    "num_attention_heads": _HEADS, "num_key_value_heads": _HEADS,
    "num_experts": _EXPERTS, "num_local_experts": _EXPERTS, "n_routed_experts": _EXPERTS,
    "num_experts_per_tok": _EXPERTS, "n_shared_experts": _EXPERTS,
    "vocab_size": (MAX_VOCAB, "the engine schema's vocab_size bound"),
    "sliding_window": (MAX_TOKENS, "a token count, bounded as max_model_len"),
}
# Widths (hidden, intermediate, head and LoRA ranks): the largest real ones are tens of thousands.
_WIDTH = (1 << 20, "no model has a hidden, intermediate or head dimension past 2^20")
# The config's own context limit may exceed what a server runs (--max-model-len lowers it).
_CONTEXT = (1 << 62, "a context length")


# ----------------------------------------------------------------------------
# reading the config; the records passed between the steps of engine_from_hf

class _Ctx:
    """The config.json being read: typed lookups whose errors name the file and the key."""

    def __init__(self, hf: dict, source: str):
        self.hf = hf
        self.source = source

    def fail(self, message: str, key: str | None = None) -> HFConfigError:
        return _fail(self.source, message, key)

    def get(self, key: str, default=None):
        return self.hf.get(key, default)

    def pos_int(self, key: str, default=None) -> int:
        return self._int(key, default, 1, "a positive integer")

    def nonneg_int(self, key: str, default=None) -> int:
        return self._int(key, default, 0, "a non-negative integer")

    def _int(self, key: str, default, minimum: int, what: str) -> int:
        value = self.hf.get(key, default)
        if value is None:
            raise self.fail(f"{key} is missing")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"{key} must be {what}, got {_short(value)}", key)
        maximum, why = _BOUNDS.get(key, _CONTEXT if key in _MAX_LEN_KEYS else _WIDTH)
        if value > maximum:
            raise self.fail(f"{key} = {_short(value)} is over the bound of {maximum:,} ({why})", key)
        return value

    def number(self, value, key: str) -> float:
        """A finite JSON number (not a bool, a string or 10^400)."""
        try:
            ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        except OverflowError:
            ok = False
        if not ok:
            raise self.fail(f"{key} must be a finite number, got {_short(value)}", key.split(".")[0])
        return float(value)

    def div(self, value: int, key: str, by: int, flag: str) -> int:
        """value / by, or an error naming the config key and the flag."""
        if value % by:
            raise self.fail(f"{key} ({value}) is not divisible by {flag}")
        return value // by


def _fail(source: str, message: str, key: str | None = None) -> HFConfigError:
    return HFConfigError(f"{source}: {message}", key, message)


def _short(value) -> str:
    """A value for an error message, cut short (a typo may be thousands of digits long)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class _Parallel:
    """vLLM's ParallelConfig, as far as sharding goes."""

    tp: int
    dp: int
    ep: bool  # --enable-expert-parallel


@dataclass
class _Flags:
    """The command-line flags, checked; None where a flag was not given."""

    parallel: _Parallel
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    num_blocks: int | None
    block_size: int | None
    max_model_len: int | None
    speculative_method: str | None = None
    num_speculative_tokens: int | None = None
    kv_cache_dtype: str = "auto"


@dataclass
class _Gpu:
    name: str
    num_sms: int
    capability: str
    memory_gib: int


@dataclass
class _Model:
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


# eq=False: records compare (and hash) by identity, because one object stands for the
# same weight in every layer that has it; checks dedupe on that.
@dataclass(eq=False)
class _Linear:
    """One GEMM weight of one decoder layer, per rank."""

    role: str                 # entry name
    modules: list[str]        # HF module names (relative to the layer) fused into it
    n: int
    k: int
    mode: str                 # "column" | "row" | "replicated"
    parts: list[int] | None = None         # per-rank output partitions of merged GEMMs (None: [n])
    split_parts: list[bool] | None = None  # which parts TP splits (None: all)
    quantizable: bool = True

    def sharded_parts(self) -> list[int]:
        """The output partitions TP splits: each must be a whole number of FP8 blocks."""
        parts = self.parts or [self.n]
        return [p for p, split in zip(parts, self.split_parts or [True] * len(parts)) if split]


@dataclass(eq=False)
class _FusedMoE:
    """The routed experts of one MoE layer, per rank."""

    prefix: str               # HF module name, relative to the layer
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int


@dataclass
class _AttentionShape:
    num_heads: int
    num_kv_heads: int
    head_size: int
    scale: float
    head_size_v: int | None = None  # MLA only: V is narrower than the latent K


@dataclass
class _MlaDims:
    """DeepSeek's multi-head latent attention sizes (heads per rank)."""

    num_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass
class _DecoderLayers:
    """What each decoder layer of one rank runs (MoE None in dense layers)."""

    linears: list[list[_Linear]]
    moes: list[_FusedMoE | None]
    attention: _AttentionShape


@dataclass
class _QuantConfig:
    base: dict          # the quant entry of a quantized weight
    ignored: list[str]  # ignored_layers / modules_to_not_convert patterns

    @property
    def block(self) -> list[int] | None:
        return self.base.get("weight_block_size")


@dataclass
class _KvCacheGroup:
    kind: str                  # "full_attention" | "sliding_window"
    sliding_window: list[int]  # vLLM's (left, right) window; [-1, -1]: none
    num_layers: int


# ----------------------------------------------------------------------------
# flags, device, model

# Each flag's bound: the engine schema's, for the field the flag sets.
_FLAG_BOUNDS = {"--tp": MAX_SEQS, "--dp": MAX_SEQS, "--max-num-seqs": MAX_SEQS,
                "--max-num-batched-tokens": MAX_TOKENS, "--num-blocks": MAX_BLOCKS, "--block-size": MAX_TOKENS,
                "--max-model-len": MAX_TOKENS, "--num-speculative-tokens": MAX_SPECULATIVE_TOKENS}
# Each flag that takes a name: the engine schema's values for the field it sets.
_FLAG_CHOICES = {"--speculative-method": SPECULATIVE_METHODS, "--kv-cache-dtype": KV_CACHE_DTYPES}


def _flag_int(value, flag: str, source: str, *, allow_none: bool = True):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(source, f"{flag} must be a positive integer, got {_short(value)}")
    if value > _FLAG_BOUNDS[flag]:
        raise _fail(source, f"{flag} {value} is over the bound of {_FLAG_BOUNDS[flag]:,} "
                            "(schemas/engine.schema.json says why)")
    return value


def _flag_choice(value, flag: str, source: str):
    if value is None or (isinstance(value, str) and value in _FLAG_CHOICES[flag]):
        return value
    raise _fail(source, f"{flag} {_short(value)} is not one of {', '.join(_FLAG_CHOICES[flag])} "
                        "(schemas/engine.schema.json)")


def _check_flags(source: str, *, tp, dp, ep, max_num_seqs, max_num_batched_tokens, num_blocks,
                 block_size, max_model_len, speculative_method=None, num_speculative_tokens=None,
                 kv_cache_dtype=None) -> _Flags:
    parallel = _Parallel(_flag_int(tp, "--tp", source, allow_none=False),
                         _flag_int(dp, "--dp", source, allow_none=False), bool(ep))
    return _Flags(parallel,
                  _flag_int(max_num_seqs, "--max-num-seqs", source),
                  _flag_int(max_num_batched_tokens, "--max-num-batched-tokens", source),
                  _flag_int(num_blocks, "--num-blocks", source),
                  _flag_int(block_size, "--block-size", source),
                  _flag_int(max_model_len, "--max-model-len", source),
                  _flag_choice(speculative_method, "--speculative-method", source),
                  _draft_tokens(speculative_method, num_speculative_tokens, source),
                  _flag_choice(kv_cache_dtype, "--kv-cache-dtype", source) or "auto")


def _draft_tokens(method, k, source: str) -> int | None:
    """--num-speculative-tokens, checked against --speculative-method (0 goes with `none` only)."""
    if k is None:
        return None
    if method is None:
        raise _fail(source, f"--num-speculative-tokens {_short(k)} needs --speculative-method (one of "
                            f"{', '.join(m for m in SPECULATIVE_METHODS if m != 'none')})")
    if method == "none":
        if k == 0 and not isinstance(k, bool):
            return 0
        raise _fail(source, "--speculative-method none takes no draft tokens: --num-speculative-tokens must be 0 "
                            f"or left out, got {_short(k)}")
    return _flag_int(k, "--num-speculative-tokens", source)


def _speculative(ctx: _Ctx, flags: _Flags) -> dict:
    """The engine's `speculative` section: the flags, with vLLM's defaults where it has them."""
    method, k = flags.speculative_method or "none", flags.num_speculative_tokens
    if method == "mtp":
        k = _mtp_draft_tokens(ctx, k)
    elif method == "suffix" and k is None:
        k = SUFFIX_TREE_DEPTH
    elif method != "none" and k is None:
        raise ctx.fail(f"--speculative-method {method} needs --num-speculative-tokens N (1 to "
                       f"{MAX_SPECULATIVE_TOKENS}): vLLM has no default for it")
    return {"method": method, "num_speculative_tokens": k or 0}


def _mtp_draft_tokens(ctx: _Ctx, k: int | None) -> int:
    """MTP drafts with the model's own next-token layers: vLLM needs them, defaults k to their
    number, and refuses a larger k that is not a multiple of it (SpeculativeConfig)."""
    layers = ctx.get("num_nextn_predict_layers")
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise ctx.fail("--speculative-method mtp needs a model with MTP layers (num_nextn_predict_layers >= 1, "
                       f"as DeepSeek-V3 has), got num_nextn_predict_layers = {_short(layers)}",
                       "num_nextn_predict_layers")
    layers = ctx.pos_int("num_nextn_predict_layers")
    if k is not None and k > layers and k % layers:
        raise ctx.fail(f"--num-speculative-tokens {k} with --speculative-method mtp must be at most "
                       f"num_nextn_predict_layers = {layers} or a multiple of it (vLLM refuses it)",
                       "num_nextn_predict_layers")
    return layers if k is None else k


def gpu_name(gpu) -> str | None:
    """The GPUS name `gpu` spells, in any case (`h200` -> `H200`); None for an unknown GPU."""
    if isinstance(gpu, str):
        for name in GPUS:
            if name.lower() == gpu.lower():
                return name
    return None


def _resolve_gpu(gpu: str, source: str) -> _Gpu:
    name = gpu_name(gpu)
    if name is None:
        raise _fail(source, f"--gpu {gpu!r} is not known; known GPUs: {', '.join(GPUS)}")
    return _Gpu(name, **GPUS[name])


def _architecture(ctx: _Ctx) -> tuple[str, str]:
    """(HF architecture, model family)."""
    archs = ctx.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ctx.fail("architectures is missing (expected a list such as [\"LlamaForCausalLM\"])")
    family = SUPPORTED_ARCHITECTURES.get(archs[0])
    if family is None:
        raise ctx.fail(f"architectures: {archs[0]} is not supported; supported: "
                       f"{', '.join(sorted(SUPPORTED_ARCHITECTURES))}")
    return archs[0], family


def _dtype(ctx: _Ctx) -> str:
    raw = ctx.get("torch_dtype", ctx.get("dtype")) or "bfloat16"
    dtype = _DTYPE_ALIASES.get(str(raw).replace("torch.", ""))
    if dtype is None:
        raise ctx.fail(f"torch_dtype {raw!r} is not supported (bfloat16, float16, float32)")
    return dtype


def _max_model_len(ctx: _Ctx, flag: int | None) -> tuple[int, int | None]:
    """(max_model_len, the config's own limit): the flag may lower the limit, not raise it."""
    key = next((k for k in _MAX_LEN_KEYS if ctx.get(k) is not None), None)
    limit = None if key is None else ctx.pos_int(key)
    if flag is None:
        if limit is None:
            raise ctx.fail("max_position_embeddings is missing; pass --max-model-len")
        return limit, limit
    if limit is not None and flag > limit:
        raise ctx.fail(f"--max-model-len {flag} exceeds {key} ({limit})")
    return flag, limit


def _bounded_context(ctx: _Ctx, lengths: tuple[int, int | None]) -> tuple[int, int | None]:
    """The engine schema bounds max_model_len: a longer config limit needs --max-model-len."""
    if lengths[0] > MAX_TOKENS:
        key = next(k for k in _MAX_LEN_KEYS if ctx.get(k) is not None)
        raise ctx.fail(f"{key} = {lengths[0]:,} is over the bound of {MAX_TOKENS:,} tokens for max_model_len; "
                       "pass --max-model-len", key)
    return lengths


def _model_config(ctx: _Ctx, flags: _Flags) -> _Model:
    architecture, family = _architecture(ctx)
    hidden = ctx.pos_int("hidden_size")
    num_layers = ctx.pos_int("num_hidden_layers")
    vocab = ctx.pos_int("vocab_size")
    dtype = _dtype(ctx)
    return _Model(architecture, family, hidden, num_layers, vocab, dtype,
                  *_bounded_context(ctx, _max_model_len(ctx, flags.max_model_len)), flags.kv_cache_dtype)


# ----------------------------------------------------------------------------
# per-layer structure of each model family

def _dense_attention(ctx: _Ctx, hidden: int, tp: int) -> tuple[list[_Linear], _AttentionShape]:
    heads = ctx.pos_int("num_attention_heads")
    kv_heads = ctx.pos_int("num_key_value_heads", heads)
    if ctx.get("head_dim") is None:
        head_dim = ctx.div(hidden, "hidden_size", heads, f"num_attention_heads ({heads})")
    else:
        head_dim = ctx.pos_int("head_dim")
    heads_r = ctx.div(heads, "num_attention_heads", tp, f"--tp {tp}")
    kv_split = kv_heads >= tp
    if kv_split:
        kv_r = ctx.div(kv_heads, "num_key_value_heads", tp, f"--tp {tp}")
    elif tp % kv_heads:
        raise ctx.fail(f"--tp {tp} is not divisible by num_key_value_heads ({kv_heads}) "
                       "(vLLM replicates KV heads only when tp is a multiple of them)")
    else:
        kv_r = 1
    q, kv = heads_r * head_dim, kv_r * head_dim
    projections = [
        _Linear("qkv_proj", ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
                q + 2 * kv, hidden, "column", [q, kv, kv], [True, kv_split, kv_split]),
        _Linear("o_proj", ["self_attn.o_proj"], hidden, q, "row"),
    ]
    return projections, _AttentionShape(heads_r, kv_r, head_dim, head_dim ** -0.5)


def _dense_mlp(ctx: _Ctx, hidden: int, inter: int, key: str, tp: int, prefix: str = "mlp",
               role_prefix: str = "") -> list[_Linear]:
    inter_r = ctx.div(inter, key, tp, f"--tp {tp}")
    return [
        _Linear(role_prefix + "gate_up_proj", [f"{prefix}.gate_proj", f"{prefix}.up_proj"],
                2 * inter_r, hidden, "column", [inter_r, inter_r]),
        _Linear(role_prefix + "down_proj", [f"{prefix}.down_proj"], hidden, inter_r, "row"),
    ]


def _routed_experts(ctx: _Ctx, prefix: str, num_experts: int, experts_key: str, inter_key: str,
                    hidden: int, par: _Parallel, gate_quantized: bool = False) -> tuple[_Linear, _FusedMoE]:
    """The router gate and the experts of an MoE layer, sharded as vLLM's FusedMoE does:
    without EP every rank holds every expert, with I / (tp * dp); with EP whole experts.
    `gate_quantized`: the model hands the gate vLLM's quant_config (Qwen3-MoE does, in 0.25.0 and
    0.33.0); the others build it with quant_config=None."""
    top_k = ctx.pos_int("num_experts_per_tok")
    inter = ctx.pos_int(inter_key)
    ranks = par.tp * par.dp
    flag = f"--tp {par.tp}" if par.dp == 1 else f"--tp {par.tp} x --dp {par.dp} ({ranks} ranks)"
    if par.ep:
        local = ctx.div(num_experts, experts_key, ranks, flag + " with --enable-expert-parallel")
    else:
        local, inter = num_experts, ctx.div(inter, inter_key, ranks, flag)
    gate = _Linear("gate", [f"{prefix}.gate"], num_experts, hidden, "replicated", quantizable=gate_quantized)
    return gate, _FusedMoE(f"{prefix}.experts", local, top_k, hidden, inter)


def _stack(attention: _AttentionShape, projections: list[_Linear], is_moe: list[bool],
           dense_mlp: list[_Linear] | None = None, moe_linears: list[_Linear] | None = None,
           moe: _FusedMoE | None = None) -> _DecoderLayers:
    """Every layer runs the attention projections, then its MoE block or its dense MLP."""
    return _DecoderLayers([projections + (moe_linears if m else dense_mlp) for m in is_moe],
                          [moe if m else None for m in is_moe], attention)


def _dense_layers(ctx: _Ctx, model: _Model, par: _Parallel) -> _DecoderLayers:
    """Llama, Qwen2, Qwen3: attention and a dense MLP in every layer."""
    projections, attention = _dense_attention(ctx, model.hidden_size, par.tp)
    mlp = _dense_mlp(ctx, model.hidden_size, ctx.pos_int("intermediate_size"), "intermediate_size", par.tp)
    return _stack(attention, projections, [False] * model.num_layers, dense_mlp=mlp)


def _mixtral_layers(ctx: _Ctx, model: _Model, par: _Parallel) -> _DecoderLayers:
    projections, attention = _dense_attention(ctx, model.hidden_size, par.tp)
    num_experts = ctx.pos_int("num_local_experts")
    gate, moe = _routed_experts(ctx, "block_sparse_moe", num_experts, "num_local_experts",
                                "intermediate_size", model.hidden_size, par)
    return _stack(attention, projections, [True] * model.num_layers, moe_linears=[gate], moe=moe)


def _qwen3_moe_layers(ctx: _Ctx, model: _Model, par: _Parallel) -> _DecoderLayers:
    """MoE every decoder_sparse_step-th layer, except mlp_only_layers (dense)."""
    projections, attention = _dense_attention(ctx, model.hidden_size, par.tp)
    # transformers 5 writes Qwen3-MoE's num_experts as num_local_experts (what vLLM loaded and
    # `--from-vllm` reads); config.json files on the Hub say num_experts.
    experts_key = "num_experts" if ctx.get("num_experts") is not None else "num_local_experts"
    num_experts = ctx.nonneg_int(experts_key, 0)
    step = ctx.pos_int("decoder_sparse_step", 1)
    mlp_only = ctx.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list):
        raise ctx.fail(f"mlp_only_layers must be a list of layer indices, got {mlp_only!r}")
    is_moe = [num_experts > 0 and i not in mlp_only and (i + 1) % step == 0 for i in range(model.num_layers)]
    moe_linears = moe = mlp = None
    if any(is_moe):
        # vLLM's Qwen3MoeSparseMoeBlock passes its quant_config to the gate: block-FP8 unless the
        # checkpoint's ignored_layers name it (Qwen's own FP8 checkpoints do, layer by layer).
        gate, moe = _routed_experts(ctx, "mlp", num_experts, experts_key, "moe_intermediate_size",
                                    model.hidden_size, par, gate_quantized=True)
        moe_linears = [gate]
    if not all(is_moe):
        mlp = _dense_mlp(ctx, model.hidden_size, ctx.pos_int("intermediate_size"), "intermediate_size", par.tp)
    return _stack(attention, projections, is_moe, dense_mlp=mlp, moe_linears=moe_linears, moe=moe)


def _mla_dims(ctx: _Ctx, tp: int) -> _MlaDims:
    heads = ctx.pos_int("num_attention_heads")
    kv_lora = ctx.pos_int("kv_lora_rank")
    nope = ctx.pos_int("qk_nope_head_dim")
    rope = ctx.pos_int("qk_rope_head_dim")
    v_dim = ctx.pos_int("v_head_dim")
    return _MlaDims(ctx.div(heads, "num_attention_heads", tp, f"--tp {tp}"), kv_lora, nope, rope, v_dim)


def _mla_projections(ctx: _Ctx, dims: _MlaDims, hidden: int) -> list[_Linear]:
    heads, kv_lora, rope = dims.num_heads, dims.kv_lora_rank, dims.qk_rope_head_dim
    qk = dims.qk_nope_head_dim + rope
    if ctx.get("q_lora_rank") is not None:
        q_lora = ctx.pos_int("q_lora_rank")
        projections = [
            _Linear("fused_qkv_a_proj", ["self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"],
                    q_lora + kv_lora + rope, hidden, "replicated", [q_lora, kv_lora + rope]),
            _Linear("q_b_proj", ["self_attn.q_b_proj"], heads * qk, q_lora, "column"),
        ]
    else:  # DeepSeek-V2-Lite style: no q compression
        projections = [
            _Linear("q_proj", ["self_attn.q_proj"], heads * qk, hidden, "column"),
            _Linear("kv_a_proj_with_mqa", ["self_attn.kv_a_proj_with_mqa"], kv_lora + rope, hidden, "replicated"),
        ]
    return projections + [
        _Linear("kv_b_proj", ["self_attn.kv_b_proj"], heads * (dims.qk_nope_head_dim + dims.v_head_dim),
                kv_lora, "column"),
        _Linear("o_proj", ["self_attn.o_proj"], hidden, heads * dims.v_head_dim, "row"),
    ]


def _mla_scale(ctx: _Ctx, qk_head_dim: int) -> float:
    scale = qk_head_dim ** -0.5
    rope = ctx.get("rope_scaling") or ctx.get("rope_parameters")
    if isinstance(rope, dict) and rope.get("factor") is not None:
        # vLLM DeepseekV2MLAAttention: yarn_get_mscale(factor, mscale_all_dim) ** 2
        factor = ctx.number(rope["factor"], "rope_scaling.factor")
        mscale_all_dim = ctx.number(rope.get("mscale_all_dim") or 0.0, "rope_scaling.mscale_all_dim")
        mscale = 1.0 if factor <= 1 else 0.1 * mscale_all_dim * math.log(factor) + 1.0
        scale *= mscale * mscale
    if not 0 < scale < math.inf:
        raise ctx.fail(f"rope_scaling gives a softmax scale of {scale!r}, expected a positive finite number")
    return scale


def _shared_experts(ctx: _Ctx, hidden: int, tp: int) -> list[_Linear]:
    """DeepSeek's shared experts: one dense MLP of n_shared_experts x moe_intermediate_size."""
    shared = ctx.nonneg_int("n_shared_experts", 0)
    if not shared:
        return []
    inter = ctx.pos_int("moe_intermediate_size")
    if inter * shared % tp:
        raise ctx.fail(f"moe_intermediate_size ({inter}) x n_shared_experts ({shared}) = "
                       f"{inter * shared} is not divisible by --tp {tp}")
    return _dense_mlp(ctx, hidden, inter * shared, "moe_intermediate_size", tp,
                      prefix="mlp.shared_experts", role_prefix="shared_experts.")


def _deepseek_layers(ctx: _Ctx, model: _Model, par: _Parallel) -> _DecoderLayers:
    """MLA in every layer; dense MLPs in the first first_k_dense_replace layers, MoE after."""
    hidden = model.hidden_size
    dims = _mla_dims(ctx, par.tp)
    projections = _mla_projections(ctx, dims, hidden)
    first_dense = ctx.nonneg_int("first_k_dense_replace", 0)
    freq = ctx.pos_int("moe_layer_freq", 1)
    num_experts = ctx.nonneg_int("n_routed_experts", 0)
    is_moe = [num_experts > 0 and i >= first_dense and i % freq == 0 for i in range(model.num_layers)]
    mlp = moe_linears = moe = None
    if not all(is_moe):
        mlp = _dense_mlp(ctx, hidden, ctx.pos_int("intermediate_size"), "intermediate_size", par.tp)
    if any(is_moe):
        gate, moe = _routed_experts(ctx, "mlp", num_experts, "n_routed_experts", "moe_intermediate_size",
                                    hidden, par)
        moe_linears = [gate] + _shared_experts(ctx, hidden, par.tp)
    # the cache holds one latent "head" per token: kv_lora_rank + qk_rope_head_dim wide, V inside it
    attention = _AttentionShape(dims.num_heads, 1, dims.kv_lora_rank + dims.qk_rope_head_dim,
                                _mla_scale(ctx, dims.qk_nope_head_dim + dims.qk_rope_head_dim),
                                head_size_v=dims.kv_lora_rank)
    return _stack(attention, projections, is_moe, dense_mlp=mlp, moe_linears=moe_linears, moe=moe)


_FAMILY_LAYERS = {"mixtral": _mixtral_layers, "qwen3_moe": _qwen3_moe_layers, "deepseek_v3": _deepseek_layers}


def _decoder_layers(ctx: _Ctx, model: _Model, par: _Parallel) -> _DecoderLayers:
    return _FAMILY_LAYERS.get(model.family, _dense_layers)(ctx, model, par)


# ----------------------------------------------------------------------------
# quantization

def _quant_config(ctx: _Ctx) -> _QuantConfig:
    qc = ctx.get("quantization_config")
    if qc is None:
        return _QuantConfig({"method": "none"}, [])
    if not isinstance(qc, dict):
        raise ctx.fail(f"quantization_config must be an object, got {type(qc).__name__}")
    method = qc.get("quant_method")
    if method != "fp8":
        raise ctx.fail(f"quantization_config.quant_method {method!r} is not supported (supported: 'fp8')")
    ignored = qc.get("ignored_layers") or qc.get("modules_to_not_convert") or []
    if not isinstance(ignored, list) or not all(isinstance(x, str) for x in ignored):
        raise ctx.fail("quantization_config.ignored_layers / modules_to_not_convert must be a list of names")
    block = qc.get("weight_block_size")
    if block is None:
        return _QuantConfig({"method": "fp8_per_tensor"}, list(ignored))
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ctx.fail(f"quantization_config.weight_block_size must be two positive integers, got {block!r}")
    return _QuantConfig({"method": "fp8", "weight_block_size": [block[0], block[1]]}, list(ignored))


def _matches(name: str, patterns: list[str]) -> bool:
    for p in patterns:
        if p.startswith("re:"):
            if re.match(p[3:], name):
                return True
        elif name == p or name.endswith("." + p):
            return True
    return False


def _linear_quant(ctx: _Ctx, lin: _Linear, layer: int, quant: _QuantConfig) -> dict:
    if not lin.quantizable or quant.base["method"] == "none":
        return {"method": "none"}
    prefix = f"model.layers.{layer}."
    skipped = [_matches(prefix + m, quant.ignored) for m in lin.modules]
    if all(skipped):
        return {"method": "none"}
    if any(skipped):
        raise ctx.fail(
            f"quantization_config ignores only some of the modules that vLLM fuses into {lin.role} "
            f"in layer {layer} ({', '.join(prefix + m for m in lin.modules)}); vLLM refuses that")
    return dict(quant.base)


def _moe_quant(moe: _FusedMoE, layer: int, quant: _QuantConfig) -> dict:
    if quant.base["method"] == "none":
        return {"method": "none"}
    prefix = f"model.layers.{layer}.{moe.prefix}"
    if _matches(prefix, quant.ignored) or any(p.startswith(prefix + ".") for p in quant.ignored):
        return {"method": "none"}
    return dict(quant.base)


def _check_block(ctx: _Ctx, what: str, value: int, block: int, dim: str, hint: str = "") -> None:
    if value % block:
        raise ctx.fail(
            f"quantization_config.weight_block_size: {what} = {value} per rank is not divisible by "
            f"block_{dim} {block}; vLLM refuses this shard{hint}")


def _check_fp8_blocks(ctx: _Ctx, layers: _DecoderLayers, quant: _QuantConfig, par: _Parallel) -> None:
    """Refuse what vLLM refuses: a sharded N (or K) that is not a whole number of blocks."""
    block = quant.block
    if not block:
        return
    if par.tp > 1:  # unsharded linears are whole weights, any shape loads
        for lin in dict.fromkeys(lin for lins in layers.linears for lin in lins if lin.quantizable):
            if lin.mode == "column":
                for part in lin.sharded_parts():
                    _check_block(ctx, f"{lin.role} output partition", part, block[0], "n")
            elif lin.mode == "row":
                _check_block(ctx, f"{lin.role} input", lin.k, block[1], "k")
    hint = "" if par.ep else " (try --enable-expert-parallel)"
    for moe in dict.fromkeys(moe for moe in layers.moes if moe is not None):
        _check_block(ctx, "moe_intermediate_size", moe.intermediate_size, block[0], "n", hint)
        if par.tp * par.dp > 1 and not par.ep:
            _check_block(ctx, "moe_intermediate_size", moe.intermediate_size, block[1], "k", hint)


# ----------------------------------------------------------------------------
# engine entries

def _name_unquantized(entries: list[dict]) -> list[dict]:
    """A name that is quantized in some layers only: its unquantized entry is <name>.unquantized."""
    methods: dict = {}
    for entry in entries:
        methods.setdefault(entry["name"], set()).add(entry["quant"]["method"])
    for entry in entries:
        if len(methods[entry["name"]]) > 1 and entry["quant"]["method"] == "none":
            entry["name"] += ".unquantized"
    return entries


def _linear_entries(ctx: _Ctx, layers: _DecoderLayers, quant: _QuantConfig) -> list[dict]:
    """One entry per (role, shape, quantization), counting the layers that have it."""
    groups: dict = {}
    for i, lins in enumerate(layers.linears):
        for lin in lins:
            q = _linear_quant(ctx, lin, i, quant)
            key = (lin.role, lin.n, lin.k, tuple(sorted((k, str(v)) for k, v in q.items())))
            if key not in groups:
                groups[key] = {"name": lin.role, "n": lin.n, "k": lin.k, "count": 0, "quant": q}
            groups[key]["count"] += 1
    return _name_unquantized(list(groups.values()))


def _vocab_per_rank(ctx: _Ctx, model: _Model, tp: int) -> int:
    """lm_head's N: vLLM pads the vocabulary, then splits it over tp (VocabParallelEmbedding)."""
    padded = cdiv(model.vocab_size, VOCAB_PADDING) * VOCAB_PADDING
    return ctx.div(padded, f"vocab_size padded to a multiple of {VOCAB_PADDING}", tp, f"--tp {tp}")


def _lm_head(ctx: _Ctx, model: _Model, tp: int) -> dict:
    return {"name": "lm_head", "n": _vocab_per_rank(ctx, model, tp), "k": model.hidden_size, "count": 1,
            "quant": {"method": "none"}}


def _moe_entries(layers: _DecoderLayers, quant: _QuantConfig) -> list[dict]:
    """One entry per (experts, intermediate size, quantization), counting the layers."""
    groups: dict = {}
    for i, moe in enumerate(layers.moes):
        if moe is None:
            continue
        q = _moe_quant(moe, i, quant)
        key = (moe.num_experts, moe.intermediate_size, q["method"])
        if key not in groups:
            groups[key] = {"name": "experts", "num_experts": moe.num_experts, "top_k": moe.top_k,
                           "hidden_size": moe.hidden_size, "intermediate_size": moe.intermediate_size,
                           "count": 0, "quant": q}
        groups[key]["count"] += 1
    return _name_unquantized(list(groups.values()))


# ----------------------------------------------------------------------------
# attention and KV cache

def _sliding_layers(ctx: _Ctx, family: str, num_layers: int) -> tuple[int | None, list[bool]]:
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


def _attention_backend(ctx: _Ctx, model: _Model, gpu: _Gpu, block_size: int) -> tuple[str, int | None, list]:
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


def _attention_entry(shape: _AttentionShape, group: _KvCacheGroup, index: int, softcap: float,
                     backend: str, kv_cache_dtype: str) -> dict:
    entry = {"name": "attn" if index == 0 else "attn_sliding",
             "num_heads": shape.num_heads, "num_kv_heads": shape.num_kv_heads, "head_size": shape.head_size}
    if shape.head_size_v is not None:
        entry["head_size_v"] = shape.head_size_v
    entry.update({"count": group.num_layers, "scale": shape.scale, "logits_soft_cap": softcap,
                  "sliding_window": group.sliding_window, "kv_cache_dtype": kv_cache_dtype, "backend": backend})
    if index:
        entry["kv_cache_group"] = index
    return entry


def _attention_and_kv_groups(ctx: _Ctx, model: _Model, shape: _AttentionShape, gpu: _Gpu,
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


def _weight_bytes(ctx: _Ctx, model: _Model, linear: list[dict], moe: list[dict], tp: int) -> int:
    """The weights of one rank (see the module docstring): fp8 weights take 1 byte."""
    def size(quant: dict) -> int:
        return 1 if quant["method"] in ("fp8", "fp8_per_tensor") else model.dtype_bytes
    weights = sum(e["n"] * e["k"] * e["count"] * size(e["quant"]) for e in linear)
    weights += sum(e["count"] * e["num_experts"] * 3 * e["intermediate_size"] * e["hidden_size"]
                   * size(e["quant"]) for e in moe)
    if not ctx.get("tie_word_embeddings", False):
        weights += _vocab_per_rank(ctx, model, tp) * model.hidden_size * model.dtype_bytes
    return weights


@dataclass
class _KvRoom:
    """What the KV-cache estimate weighs, in bytes, for the error that says it does not fit."""

    weights: int        # one rank's weights
    budget: float       # GPU_MEMORY_UTILIZATION of the GPU's memory
    per_block: int      # one KV block across every layer
    num_blocks: int     # blocks that fit beside the weights, rounded down to a multiple of 16
    needed: int         # blocks of one max_model_len request, which vLLM refuses to start without


def _kv_room(ctx: _Ctx, model: _Model, shape: _AttentionShape, linear: list[dict], moe: list[dict],
             gpu: _Gpu, block_size: int, tp: int) -> _KvRoom:
    """KV blocks that fit beside the weights (the estimate of the module docstring)."""
    weights = _weight_bytes(ctx, model, linear, moe, tp)
    budget = GPU_MEMORY_UTILIZATION * gpu.memory_gib * 2 ** 30
    if model.mla:  # one latent head, no separate V
        per_block = model.kv_bytes(model.num_layers * block_size * shape.head_size)
    else:
        per_block = model.kv_bytes(model.num_layers * block_size * 2 * shape.num_kv_heads * shape.head_size)
    blocks = min(int(max(budget - weights, 0) // per_block) // 16 * 16, MAX_BLOCKS)
    return _KvRoom(weights, budget, per_block, blocks, cdiv(model.max_model_len, block_size))


def _gib(count: float) -> str:
    return f"{count / 2 ** 30:.1f} GiB"


def _does_not_fit(room: _KvRoom, model: _Model, gpu: _Gpu, par: _Parallel, block_size: int) -> str | None:
    """Why vLLM would refuse to start this model on this GPU, or None when the estimate fits."""
    budget = (f"the {_gib(room.budget)} budget ({GPU_MEMORY_UTILIZATION:.0%} of the {gpu.name}'s "
              f"{gpu.memory_gib} GiB)")
    fixes = (f"use more tensor parallelism (--tp, now {par.tp}) or a GPU with more memory (--gpu), or pass "
             "--num-blocks with the count your server reports")
    if room.weights >= room.budget:
        return (f"the weights do not fit: {_gib(room.weights)} per rank against {budget}, which leaves no "
                f"room for the KV cache; {fixes}")
    if room.num_blocks < room.needed:
        longest = room.num_blocks * block_size
        return (f"the KV cache does not hold one request of max_model_len {model.max_model_len}: "
                f"{_gib(room.weights)} of weights per rank leave {_gib(room.budget - room.weights)} of {budget}, "
                f"{room.num_blocks} blocks of {block_size} tokens where one request needs {room.needed} (vLLM "
                f"refuses to start); lower --max-model-len to at most {longest}, {fixes}")
    return None


def _estimate_num_blocks(ctx: _Ctx, model: _Model, layers: _DecoderLayers, linear: list[dict], moe: list[dict],
                         gpu: _Gpu, block_size: int, par: _Parallel, warn) -> tuple[int, str | None]:
    """(num_blocks, why the model does not fit or None). A model that does not fit is refused,
    or with `warn` (--ignore-memory) given room for one max_model_len request and a loud warning."""
    room = _kv_room(ctx, model, layers.attention, linear, moe, gpu, block_size, par.tp)
    reason = _does_not_fit(room, model, gpu, par, block_size)
    if reason is None:
        return room.num_blocks, None
    if warn is None:
        raise ctx.fail(reason + "; or --ignore-memory to write the engine config anyway")
    num_blocks = min(max(room.needed, 16), MAX_BLOCKS)
    warn(f"{reason}. --ignore-memory: writing num_blocks {num_blocks} (one max_model_len request), "
         "a configuration vLLM would refuse on this GPU")
    return num_blocks, reason


# ----------------------------------------------------------------------------
# scheduler, names, the engine config

def _scheduler_config(flags: _Flags, gpu: _Gpu, source: str) -> dict:
    """vLLM `vllm serve` defaults by GPU memory (`EngineArgs`, vllm/engine/arg_utils.py lines
    2590-2620, vLLM @ 017e9f4448b7), unless the flags set them."""
    if gpu.memory_gib >= 160:
        default_tokens, default_seqs = 16384, 1024
    elif gpu.memory_gib >= 70 and gpu.name != "A100":
        default_tokens, default_seqs = 8192, 1024
    else:
        default_tokens, default_seqs = 2048, 256
    seqs = flags.max_num_seqs if flags.max_num_seqs is not None else default_seqs
    tokens = flags.max_num_batched_tokens if flags.max_num_batched_tokens is not None else default_tokens
    if tokens < seqs:
        raise _fail(source, f"--max-num-batched-tokens ({tokens}) is smaller than "
                            f"--max-num-seqs ({seqs}); vLLM refuses that")
    return {"max_num_seqs": seqs, "max_num_batched_tokens": tokens}


def _model_name(hf: dict, source: str) -> str:
    path = hf.get("_name_or_path")
    if isinstance(path, str) and path.strip("/"):
        return os.path.basename(path.strip("/"))
    stem = os.path.basename(source)
    if stem.endswith(".json"):
        stem = stem[:-5]
    if stem and stem != "config":
        return stem
    model_type = hf.get("model_type")
    if isinstance(model_type, str) and model_type:
        return model_type
    return str((hf.get("architectures") or ["model"])[0])


def _engine_name(hf: dict, source: str, par: _Parallel, gpu: _Gpu) -> str:
    name = f"{_model_name(hf, source)}-tp{par.tp}"
    if par.dp > 1:
        name += f"-dp{par.dp}"
    if par.ep:
        name += "-ep"
    return name + f"-{gpu.name.lower()}"


def _description(source: str, model: _Model, flags: _Flags, gpu: _Gpu, block_size: int,
                 unfit: str | None = None) -> str:
    """How to regenerate the config: the command with every flag that is not a default."""
    par = flags.parallel
    given = [f"{flag} {value}" for flag, value, default in (
        ("--tp", par.tp, 1), ("--dp", par.dp, 1), ("--gpu", gpu.name, "H100"),
        ("--max-model-len", model.max_model_len, model.config_max_len),
        ("--max-num-seqs", flags.max_num_seqs, None),
        ("--max-num-batched-tokens", flags.max_num_batched_tokens, None),
        ("--num-blocks", flags.num_blocks, None),
        ("--block-size", block_size, model.default_block_size),
        ("--speculative-method", flags.speculative_method, None),
        ("--num-speculative-tokens", flags.num_speculative_tokens, None),
        ("--kv-cache-dtype", model.kv_cache_dtype, "auto")) if value != default]
    if par.ep:
        given.append("--enable-expert-parallel")
    if unfit:
        given.append("--ignore-memory")
    description = (f"Generated by `warmup engine --from-hf {source}{''.join(' ' + f for f in given)}` "
                   f"from {model.architecture}; every size is per rank.")
    if unfit:
        description += (f" The model does not fit ({unfit.split(';')[0]}): num_blocks holds one max_model_len "
                        "request, written with --ignore-memory; vLLM would refuse this configuration.")
    elif flags.num_blocks is None:
        description += (f" num_blocks is an estimate ({GPU_MEMORY_UTILIZATION:.0%} of {gpu.memory_gib} GiB "
                        "minus the weights; see planner/engine/hf.py).")
    return description


def _assemble(*, name: str, description: str, model: _Model, linear: list, moe: list, attention: list,
              kv_cache: dict, scheduler: dict, speculative: dict, par: _Parallel, gpu: _Gpu) -> dict:
    """The engine config, keys in schema order."""
    return {
        "name": name,
        "description": description,
        "model": {
            "architecture": model.architecture,
            "vocab_size": model.vocab_size,
            "max_model_len": model.max_model_len,
            "runner": "generate",
            "dtype": model.dtype,
            "hidden_size": model.hidden_size,
            "num_layers": model.num_layers,
            "linear": linear,
            "moe": moe,
            "attention": attention,
        },
        "kv_cache": kv_cache,
        "scheduler": scheduler,
        "speculative": speculative,
        "parallel": {"tensor_parallel_size": par.tp, "data_parallel_size": par.dp, "pipeline_parallel_size": 1,
                     "pipeline_rank": 0, "enable_expert_parallel": par.ep},
        "device": {"name": gpu.name, "num_sms": gpu.num_sms, "capability": gpu.capability},
    }


def engine_from_hf(hf: dict, *, tp: int = 1, dp: int = 1, enable_expert_parallel: bool = False,
                   max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                   num_blocks: int | None = None, block_size: int | None = None,
                   gpu: str = "H100", max_model_len: int | None = None,
                   name: str | None = None, source: str = "config.json", ignore_memory=None,
                   speculative_method: str | None = None, num_speculative_tokens: int | None = None,
                   kv_cache_dtype: str | None = None, fp8_linear_kernel: str | None = None,
                   model_runner: str | None = None, sampler: str | None = None) -> dict:
    """The engine config (a dict valid against schemas/engine.schema.json) of one rank.

    Raises HFConfigError, naming the config key or flag, when the config cannot
    be served that way (unsupported architecture, a size not divisible by tp,
    an FP8 block shape vLLM refuses, an unknown GPU, a size past its bound, weights
    that leave no room for one max_model_len request when num_blocks is estimated ...).
    `ignore_memory`, a function taking a warning, turns the last refusal into that warning.
    `fp8_linear_kernel`, `model_runner` and `sampler` say what vLLM chooses where its defaults do not hold
    (planner/engine/vllm_choices.py: by default FlashInfer installed, and each release's runner).
    """
    if not isinstance(hf, dict):
        raise _fail(source, f"expected a JSON object, got {type(hf).__name__}")
    ctx = _Ctx(hf, source)
    flags = _check_flags(source, tp=tp, dp=dp, ep=enable_expert_parallel, max_num_seqs=max_num_seqs,
                         max_num_batched_tokens=max_num_batched_tokens, num_blocks=num_blocks,
                         block_size=block_size, max_model_len=max_model_len, speculative_method=speculative_method,
                         num_speculative_tokens=num_speculative_tokens, kv_cache_dtype=kv_cache_dtype)
    par, device = flags.parallel, _resolve_gpu(gpu, source)
    model = _model_config(ctx, flags)
    speculative = _speculative(ctx, flags)
    layers = _decoder_layers(ctx, model, par)
    quant = _quant_config(ctx)
    _check_fp8_blocks(ctx, layers, quant, par)
    linear = _linear_entries(ctx, layers, quant) + [_lm_head(ctx, model, par.tp)]
    moe = _moe_entries(layers, quant)
    block_size = flags.block_size if flags.block_size is not None else model.default_block_size
    attention, kv_groups = _attention_and_kv_groups(ctx, model, layers.attention, device, block_size)
    num_blocks, unfit = flags.num_blocks, None
    if num_blocks is None:
        num_blocks, unfit = _estimate_num_blocks(ctx, model, layers, linear, moe, device, block_size, par,
                                                 ignore_memory)
    scheduler = _scheduler_config(flags, device, source)
    if name is None:
        name = _engine_name(hf, source, par, device)
    engine = _assemble(name=name, description=_description(source, model, flags, device, block_size, unfit),
                       model=model, linear=linear, moe=moe, attention=attention,
                       kv_cache={"num_blocks": num_blocks, "groups": kv_groups}, scheduler=scheduler,
                       speculative=speculative, par=par, gpu=device)
    return _vllm_choices(engine, fp8_linear_kernel, model_runner, source, sampler)


def _vllm_choices(engine: dict, fp8_linear_kernel: str | None, model_runner: str | None, source: str,
                  sampler: str | None = None) -> dict:
    """The model runner (`auto` unless --model-runner) and each block-FP8 linear's kernel: vLLM's
    choice with FlashInfer installed, or DeepGEMM's for `--fp8-linear-kernel deep_gemm`. Defaults are
    left out, as the engine schema's defaults are: the runner `auto`, and a kernel that is what the
    engine loader fills in (vLLM's choice with FlashInfer installed)."""
    for value, flag, choices in ((fp8_linear_kernel, "--fp8-linear-kernel", FP8_LINEAR_KERNEL_CHOICES),
                                 (model_runner, "--model-runner", MODEL_RUNNERS), (sampler, "--sampler", SAMPLERS)):
        if value is not None and value not in choices:
            raise _fail(source, f"{flag} {_short(value)} is not one of {', '.join(choices)}")
    capability = engine["device"]["capability"]
    if fp8_linear_kernel == "flashinfer_deep_gemm" and capability != "9.0":
        raise _fail(source, f"--fp8-linear-kernel flashinfer_deep_gemm: vLLM selects FlashInfer's block-FP8 "
                            f"kernel on SM 9.0 only (has_flashinfer_fp8_blockscale_gemm), and the GPU is SM {capability}")
    given = [f"{flag} {value}" for flag, value in (("--fp8-linear-kernel", fp8_linear_kernel),
                                                   ("--model-runner", model_runner), ("--sampler", sampler))
             if value is not None]
    if given:  # the command that regenerates the config names them too
        engine["description"] = engine["description"].replace("` from ", f" {' '.join(given)}` from ", 1)
    model = engine["model"]
    if model_runner not in (None, "auto"):  # auto, the schema's default, is left out as the shipped engines do
        model = engine["model"] = insert_after(model, "runner", "model_runner", model_runner)
    if sampler not in (None, "auto"):
        after = "model_runner" if "model_runner" in model else "runner"
        model = engine["model"] = insert_after(model, after, "sampler", sampler)
    for layer in model["linear"]:  # only where it is not the engine's default (planner/engine/config.py fills that in)
        kernel = default_linear_kernel(layer, model["dtype"], capability, fp8_linear_kernel != "deep_gemm")
        if kernel != default_linear_kernel(layer, model["dtype"], capability):
            layer["kernel"] = kernel
    return engine


def insert_after(mapping: dict, after: str, key: str, value) -> dict:
    """`mapping` with key: value right after `after` (the engine schema's key order)."""
    out = {}
    for name, item in mapping.items():
        out[name] = item
        if name == after:
            out[key] = value
    return out


def engine_to_yaml(engine: dict) -> str:
    """Readable, deterministic YAML: block maps, one flow-style line per list item (planner.yamlio)."""
    return dump(engine)
