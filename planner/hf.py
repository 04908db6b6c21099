"""Engine config from a Hugging Face ``config.json``.

``engine_from_hf(hf, tp=..., gpu=...)`` turns the dict of a model's
``config.json`` into an engine config (schemas/engine.schema.json): the GEMM
shapes, fused-MoE layers and attention layers that one rank of a vLLM server
runs, after tensor-parallel (and expert-parallel) sharding, plus KV-cache,
scheduler, parallel and device facts. ``engine_to_yaml`` writes it as YAML.

This module imports only the standard library: ``warmup`` must start fast.

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
* Router gates, embeddings and ``lm_head`` stay unquantized.
  ``quantization_config.ignored_layers`` (or ``modules_to_not_convert``)
  entries match a module when equal to its full name
  (``model.layers.3.self_attn.o_proj``), when they are a dotted suffix of it
  (``lm_head``, ``mlp.gate``), or, with a ``re:`` prefix, as a regular
  expression. A role that is ignored in some layers only is split in two
  entries, the unquantized one named ``<role>.unquantized``.
* The DeepSeek MTP layer (``num_nextn_predict_layers``) is not part of the
  main model and is left out (speculative decoding is ``none``).

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
                * head_size * dtype bytes
                (MLA: num_layers * block_size * (kv_lora_rank + qk_rope_head_dim)
                 * dtype bytes, a single latent "head" and no separate V)
    num_blocks = max(16, floor(free / per_block) rounded down to a multiple of 16)

It ignores activation memory, CUDA graphs and the sampler, so a real server
finds somewhat fewer blocks; pass ``num_blocks`` to pin the number.
"""

from __future__ import annotations

import math
import os
import re

from .output import yaml_scalar

__all__ = ["GPUS", "HFConfigError", "SUPPORTED_ARCHITECTURES", "engine_from_hf", "engine_to_yaml"]


class HFConfigError(ValueError):
    """A config.json (or a flag next to it) that cannot become an engine config."""


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
_DTYPE_ALIASES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
                  "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}


# ----------------------------------------------------------------------------
# small helpers

class _Ctx:
    """What every check needs to word its message."""

    def __init__(self, hf: dict, source: str):
        self.hf = hf
        self.source = source

    def fail(self, message: str) -> HFConfigError:
        return HFConfigError(f"{self.source}: {message}")

    def get(self, key: str, default=None):
        return self.hf.get(key, default)

    def pos_int(self, key: str, default=None) -> int:
        value = self.hf.get(key, default)
        if value is None:
            raise self.fail(f"{key} is missing")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(f"{key} must be a positive integer, got {value!r}")
        return value

    def nonneg_int(self, key: str, default=None) -> int:
        value = self.hf.get(key, default)
        if value is None:
            raise self.fail(f"{key} is missing")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(f"{key} must be a non-negative integer, got {value!r}")
        return value

    def div(self, value: int, key: str, by: int, flag: str) -> int:
        """value / by, or an error naming the config key and the flag."""
        if value % by:
            raise self.fail(f"{key} ({value}) is not divisible by {flag}")
        return value // by


def _flag_int(value, flag: str, source: str, *, allow_none: bool = True):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HFConfigError(f"{source}: {flag} must be a positive integer, got {value!r}")
    return value


def _pad(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class _Lin:
    """One GEMM weight of one decoder layer (or of the model, for lm_head)."""

    __slots__ = ("role", "modules", "n", "k", "mode", "parts", "split_parts", "quantizable")

    def __init__(self, role, modules, n, k, mode, parts=None, split_parts=None, quantizable=True):
        self.role = role                  # entry name
        self.modules = modules            # HF module names (relative to the layer) fused into it
        self.n = n
        self.k = k
        self.mode = mode                  # "column" | "row" | "replicated"
        self.parts = parts or [n]         # per-rank output partitions (merged GEMMs)
        self.split_parts = split_parts    # which parts TP splits (None: all)
        self.quantizable = quantizable


class _Moe:
    __slots__ = ("prefix", "num_experts", "top_k", "hidden", "inter")

    def __init__(self, prefix, num_experts, top_k, hidden, inter):
        self.prefix, self.num_experts, self.top_k, self.hidden, self.inter = (
            prefix, num_experts, top_k, hidden, inter)


# ----------------------------------------------------------------------------
# quantization

def _base_quant(ctx: _Ctx) -> tuple[dict, list]:
    qc = ctx.get("quantization_config")
    if qc is None:
        return {"method": "none"}, []
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
        return {"method": "fp8_per_tensor"}, list(ignored)
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ctx.fail(f"quantization_config.weight_block_size must be two positive integers, got {block!r}")
    return {"method": "fp8", "weight_block_size": [block[0], block[1]]}, list(ignored)


def _matches(name: str, patterns: list) -> bool:
    for p in patterns:
        if p.startswith("re:"):
            if re.match(p[3:], name):
                return True
        elif name == p or name.endswith("." + p):
            return True
    return False


def _linear_quant(ctx: _Ctx, lin: _Lin, layer: int | None, base: dict, ignored: list) -> dict:
    if not lin.quantizable or base["method"] == "none":
        return {"method": "none"}
    prefix = "" if layer is None else f"model.layers.{layer}."
    skipped = [_matches(prefix + m, ignored) for m in lin.modules]
    if all(skipped):
        return {"method": "none"}
    if any(skipped):
        raise ctx.fail(
            f"quantization_config ignores only some of the modules that vLLM fuses into {lin.role} "
            f"in layer {layer} ({', '.join(prefix + m for m in lin.modules)}); vLLM refuses that")
    return dict(base)


def _moe_quant(moe: _Moe, layer: int, base: dict, ignored: list) -> dict:
    if base["method"] == "none":
        return {"method": "none"}
    prefix = f"model.layers.{layer}.{moe.prefix}"
    if _matches(prefix, ignored) or any(p.startswith(prefix + ".") for p in ignored):
        return {"method": "none"}
    return dict(base)


def _check_block(ctx: _Ctx, what: str, value: int, block: int, dim: str, hint: str = "") -> None:
    if value % block:
        raise ctx.fail(
            f"quantization_config.weight_block_size: {what} = {value} per rank is not divisible by "
            f"block_{dim} {block}; vLLM refuses this shard{hint}")


# ----------------------------------------------------------------------------
# model families

def _dense_attention(ctx: _Ctx, hidden: int, tp: int) -> tuple[list, dict]:
    heads = ctx.pos_int("num_attention_heads")
    kv_heads = ctx.pos_int("num_key_value_heads", heads)
    head_dim = ctx.get("head_dim")
    if head_dim is None:
        head_dim = ctx.div(hidden, "hidden_size", heads, f"num_attention_heads ({heads})")
    else:
        head_dim = ctx.pos_int("head_dim")
    heads_r = ctx.div(heads, "num_attention_heads", tp, f"--tp {tp}")
    if kv_heads >= tp:
        kv_r = ctx.div(kv_heads, "num_key_value_heads", tp, f"--tp {tp}")
        kv_split = True
    else:
        if tp % kv_heads:
            raise ctx.fail(f"--tp {tp} is not divisible by num_key_value_heads ({kv_heads}) "
                           "(vLLM replicates KV heads only when tp is a multiple of them)")
        kv_r = 1
        kv_split = False
    q, kv = heads_r * head_dim, kv_r * head_dim
    lins = [
        _Lin("qkv_proj", ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
             q + 2 * kv, hidden, "column", [q, kv, kv], [True, kv_split, kv_split]),
        _Lin("o_proj", ["self_attn.o_proj"], hidden, q, "row"),
    ]
    attn = {"num_heads": heads_r, "num_kv_heads": kv_r, "head_size": head_dim,
            "scale": head_dim ** -0.5}
    return lins, attn


def _dense_mlp(ctx: _Ctx, hidden: int, inter: int, key: str, tp: int, prefix: str = "mlp",
               role_prefix: str = "") -> list:
    inter_r = ctx.div(inter, key, tp, f"--tp {tp}")
    return [
        _Lin(role_prefix + "gate_up_proj", [f"{prefix}.gate_proj", f"{prefix}.up_proj"],
             2 * inter_r, hidden, "column", [inter_r, inter_r]),
        _Lin(role_prefix + "down_proj", [f"{prefix}.down_proj"], hidden, inter_r, "row"),
    ]


def _moe_split(ctx: _Ctx, num_experts: int, experts_key: str, inter: int, inter_key: str,
               tp: int, dp: int, ep: bool) -> tuple[int, int]:
    """(experts on this rank, intermediate size per rank) as vLLM's FusedMoE shards them."""
    ranks = tp * dp
    flag = f"--tp {tp}" if dp == 1 else f"--tp {tp} x --dp {dp} ({ranks} ranks)"
    if ep:
        return ctx.div(num_experts, experts_key, ranks, flag + " with --enable-expert-parallel"), inter
    return num_experts, ctx.div(inter, inter_key, ranks, flag)


def _sliding_layers(ctx: _Ctx, family: str, num_layers: int) -> tuple[int | None, list]:
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


def _build_dense_family(ctx: _Ctx, family: str, hidden: int, num_layers: int, tp: int, dp: int,
                        ep: bool) -> tuple[list, list, dict]:
    """Per-layer linears and MoE for Llama / Qwen2 / Qwen3 / Qwen3-MoE / Mixtral."""
    attn_lins, attn = _dense_attention(ctx, hidden, tp)
    per_layer_lin, per_layer_moe = [], []
    if family == "mixtral":
        num_experts = ctx.pos_int("num_local_experts")
        top_k = ctx.pos_int("num_experts_per_tok")
        inter = ctx.pos_int("intermediate_size")
        local, inter_r = _moe_split(ctx, num_experts, "num_local_experts", inter, "intermediate_size",
                                    tp, dp, ep)
        gate = _Lin("gate", ["block_sparse_moe.gate"], num_experts, hidden, "replicated", quantizable=False)
        moe = _Moe("block_sparse_moe.experts", local, top_k, hidden, inter_r)
        for _ in range(num_layers):
            per_layer_lin.append(attn_lins + [gate])
            per_layer_moe.append(moe)
    elif family == "qwen3_moe":
        num_experts = ctx.nonneg_int("num_experts", 0)
        step = ctx.pos_int("decoder_sparse_step", 1)
        mlp_only = ctx.get("mlp_only_layers") or []
        if not isinstance(mlp_only, list):
            raise ctx.fail(f"mlp_only_layers must be a list of layer indices, got {mlp_only!r}")
        is_moe = [num_experts > 0 and i not in mlp_only and (i + 1) % step == 0 for i in range(num_layers)]
        moe = gate = dense = None
        if any(is_moe):
            top_k = ctx.pos_int("num_experts_per_tok")
            inter = ctx.pos_int("moe_intermediate_size")
            local, inter_r = _moe_split(ctx, num_experts, "num_experts", inter, "moe_intermediate_size",
                                        tp, dp, ep)
            gate = _Lin("gate", ["mlp.gate"], num_experts, hidden, "replicated", quantizable=False)
            moe = _Moe("mlp.experts", local, top_k, hidden, inter_r)
        if not all(is_moe):
            dense = _dense_mlp(ctx, hidden, ctx.pos_int("intermediate_size"), "intermediate_size", tp)
        for i in range(num_layers):
            if is_moe[i]:
                per_layer_lin.append(attn_lins + [gate])
                per_layer_moe.append(moe)
            else:
                per_layer_lin.append(attn_lins + dense)
                per_layer_moe.append(None)
    else:  # llama, qwen2, qwen3
        dense = _dense_mlp(ctx, hidden, ctx.pos_int("intermediate_size"), "intermediate_size", tp)
        for _ in range(num_layers):
            per_layer_lin.append(attn_lins + dense)
            per_layer_moe.append(None)
    return per_layer_lin, per_layer_moe, attn


def _deepseek_scale(ctx: _Ctx, qk_head_dim: int) -> float:
    scale = qk_head_dim ** -0.5
    rope = ctx.get("rope_scaling") or ctx.get("rope_parameters")
    if isinstance(rope, dict) and rope.get("factor") is not None:
        # vLLM DeepseekV2MLAAttention: yarn_get_mscale(factor, mscale_all_dim) ** 2
        factor = float(rope["factor"])
        mscale_all_dim = float(rope.get("mscale_all_dim") or 0.0)
        mscale = 1.0 if factor <= 1 else 0.1 * mscale_all_dim * math.log(factor) + 1.0
        scale *= mscale * mscale
    return scale


def _build_deepseek(ctx: _Ctx, hidden: int, num_layers: int, tp: int, dp: int, ep: bool):
    heads = ctx.pos_int("num_attention_heads")
    q_lora = ctx.get("q_lora_rank")
    kv_lora = ctx.pos_int("kv_lora_rank")
    nope = ctx.pos_int("qk_nope_head_dim")
    rope = ctx.pos_int("qk_rope_head_dim")
    v_dim = ctx.pos_int("v_head_dim")
    heads_r = ctx.div(heads, "num_attention_heads", tp, f"--tp {tp}")
    qk = nope + rope
    if q_lora is not None:
        q_lora = ctx.pos_int("q_lora_rank")
        attn_lins = [
            _Lin("fused_qkv_a_proj", ["self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"],
                 q_lora + kv_lora + rope, hidden, "replicated", [q_lora, kv_lora + rope]),
            _Lin("q_b_proj", ["self_attn.q_b_proj"], heads_r * qk, q_lora, "column"),
        ]
    else:  # DeepSeek-V2-Lite style: no q compression
        attn_lins = [
            _Lin("q_proj", ["self_attn.q_proj"], heads_r * qk, hidden, "column"),
            _Lin("kv_a_proj_with_mqa", ["self_attn.kv_a_proj_with_mqa"], kv_lora + rope, hidden, "replicated"),
        ]
    attn_lins += [
        _Lin("kv_b_proj", ["self_attn.kv_b_proj"], heads_r * (nope + v_dim), kv_lora, "column"),
        _Lin("o_proj", ["self_attn.o_proj"], hidden, heads_r * v_dim, "row"),
    ]
    first_dense = ctx.nonneg_int("first_k_dense_replace", 0)
    freq = ctx.pos_int("moe_layer_freq", 1)
    num_experts = ctx.nonneg_int("n_routed_experts", 0)
    is_moe = [num_experts > 0 and i >= first_dense and i % freq == 0 for i in range(num_layers)]
    dense = moe_lins = moe = None
    if not all(is_moe):
        dense = _dense_mlp(ctx, hidden, ctx.pos_int("intermediate_size"), "intermediate_size", tp)
    if any(is_moe):
        top_k = ctx.pos_int("num_experts_per_tok")
        inter = ctx.pos_int("moe_intermediate_size")
        local, inter_r = _moe_split(ctx, num_experts, "n_routed_experts", inter, "moe_intermediate_size",
                                    tp, dp, ep)
        moe_lins = [_Lin("gate", ["mlp.gate"], num_experts, hidden, "replicated", quantizable=False)]
        shared = ctx.nonneg_int("n_shared_experts", 0)
        if shared:
            shared_inter = inter * shared
            if shared_inter % tp:
                raise ctx.fail(f"moe_intermediate_size ({inter}) x n_shared_experts ({shared}) = "
                               f"{shared_inter} is not divisible by --tp {tp}")
            moe_lins += _dense_mlp(ctx, hidden, shared_inter, "moe_intermediate_size", tp,
                                   prefix="mlp.shared_experts", role_prefix="shared_experts.")
        moe = _Moe("mlp.experts", local, top_k, hidden, inter_r)
    per_layer_lin, per_layer_moe = [], []
    for i in range(num_layers):
        if is_moe[i]:
            per_layer_lin.append(attn_lins + moe_lins)
            per_layer_moe.append(moe)
        else:
            per_layer_lin.append(attn_lins + dense)
            per_layer_moe.append(None)
    attn = {"num_heads": heads_r, "num_kv_heads": 1, "head_size": kv_lora + rope,
            "head_size_v": kv_lora, "scale": _deepseek_scale(ctx, qk)}
    return per_layer_lin, per_layer_moe, attn


# ----------------------------------------------------------------------------
# the public entry points

def _resolve_gpu(gpu: str, source: str) -> tuple[str, dict]:
    for name, facts in GPUS.items():
        if isinstance(gpu, str) and name.lower() == gpu.lower():
            return name, facts
    raise HFConfigError(f"{source}: --gpu {gpu!r} is not known; known GPUs: {', '.join(GPUS)}")


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


def engine_from_hf(hf: dict, *, tp: int = 1, dp: int = 1, enable_expert_parallel: bool = False,
                   max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                   num_blocks: int | None = None, block_size: int | None = None,
                   gpu: str = "H100", max_model_len: int | None = None,
                   name: str | None = None, source: str = "config.json") -> dict:
    """The engine config (a dict valid against schemas/engine.schema.json) of one rank.

    Raises HFConfigError, naming the config key or flag, when the config cannot
    be served that way (unsupported architecture, a size not divisible by tp,
    an FP8 block shape vLLM refuses, an unknown GPU ...).
    """
    if not isinstance(hf, dict):
        raise HFConfigError(f"{source}: expected a JSON object, got {type(hf).__name__}")
    ctx = _Ctx(hf, source)
    tp = _flag_int(tp, "--tp", source, allow_none=False)
    dp = _flag_int(dp, "--dp", source, allow_none=False)
    max_num_seqs = _flag_int(max_num_seqs, "--max-num-seqs", source)
    max_num_batched_tokens = _flag_int(max_num_batched_tokens, "--max-num-batched-tokens", source)
    num_blocks = _flag_int(num_blocks, "--num-blocks", source)
    block_size = _flag_int(block_size, "--block-size", source)
    max_model_len = _flag_int(max_model_len, "--max-model-len", source)
    ep = bool(enable_expert_parallel)
    gpu_name, gpu_facts = _resolve_gpu(gpu, source)

    archs = hf.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ctx.fail("architectures is missing (expected a list such as [\"LlamaForCausalLM\"])")
    arch = archs[0]
    family = SUPPORTED_ARCHITECTURES.get(arch)
    if family is None:
        raise ctx.fail(f"architectures: {arch} is not supported; supported: "
                       f"{', '.join(sorted(SUPPORTED_ARCHITECTURES))}")

    hidden = ctx.pos_int("hidden_size")
    num_layers = ctx.pos_int("num_hidden_layers")
    vocab = ctx.pos_int("vocab_size")
    raw_dtype = hf.get("torch_dtype", hf.get("dtype")) or "bfloat16"
    dtype = _DTYPE_ALIASES.get(str(raw_dtype).replace("torch.", ""))
    if dtype is None:
        raise ctx.fail(f"torch_dtype {raw_dtype!r} is not supported (bfloat16, float16, float32)")
    act_bytes = _DTYPE_BYTES[dtype]

    derived_len = None
    for key in ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"):
        if hf.get(key) is not None:
            derived_len = ctx.pos_int(key)
            len_key = key
            break
    if max_model_len is None:
        if derived_len is None:
            raise ctx.fail("max_position_embeddings is missing; pass --max-model-len")
        max_model_len = derived_len
    elif derived_len is not None and max_model_len > derived_len:
        raise ctx.fail(f"--max-model-len {max_model_len} exceeds {len_key} ({derived_len})")

    # --- per-layer structure -------------------------------------------------
    mla = family == "deepseek_v3"
    if mla:
        per_layer_lin, per_layer_moe, attn = _build_deepseek(ctx, hidden, num_layers, tp, dp, ep)
    else:
        per_layer_lin, per_layer_moe, attn = _build_dense_family(ctx, family, hidden, num_layers, tp, dp, ep)

    base_quant, ignored = _base_quant(ctx)
    block = base_quant.get("weight_block_size")

    # --- FP8 block shapes vLLM refuses ----------------------------------------
    if block:
        seen = set()
        for lins in per_layer_lin:
            for lin in lins:
                if id(lin) in seen or not lin.quantizable:
                    continue
                seen.add(id(lin))
                if tp > 1 and lin.mode == "column":
                    for part, split in zip(lin.parts, lin.split_parts or [True] * len(lin.parts)):
                        if split:
                            _check_block(ctx, f"{lin.role} output partition", part, block[0], "n")
                if tp > 1 and lin.mode == "row":
                    _check_block(ctx, f"{lin.role} input", lin.k, block[1], "k")
        moes = {id(m): m for m in per_layer_moe if m is not None}
        for moe in moes.values():
            hint = "" if ep else " (try --enable-expert-parallel)"
            _check_block(ctx, "moe_intermediate_size", moe.inter, block[0], "n", hint)
            if tp * dp > 1 and not ep:
                _check_block(ctx, "moe_intermediate_size", moe.inter, block[1], "k", hint)

    # --- linear entries: group layers by (role, shape, quant) ------------------
    groups: dict = {}
    for i, lins in enumerate(per_layer_lin):
        for lin in lins:
            quant = _linear_quant(ctx, lin, i, base_quant, ignored)
            key = (lin.role, lin.n, lin.k, tuple(sorted((k, str(v)) for k, v in quant.items())))
            if key not in groups:
                groups[key] = {"name": lin.role, "n": lin.n, "k": lin.k, "count": 0, "quant": quant}
            groups[key]["count"] += 1
    linear = list(groups.values())
    quant_states: dict = {}
    for entry in linear:
        quant_states.setdefault(entry["name"], set()).add(entry["quant"]["method"])
    for entry in linear:
        if len(quant_states[entry["name"]]) > 1 and entry["quant"]["method"] == "none":
            entry["name"] += ".unquantized"
    vocab_padded = _pad(vocab, VOCAB_PADDING)
    lm_n = ctx.div(vocab_padded, f"vocab_size padded to a multiple of {VOCAB_PADDING}", tp, f"--tp {tp}")
    linear.append({"name": "lm_head", "n": lm_n, "k": hidden, "count": 1, "quant": {"method": "none"}})

    # --- MoE entries -----------------------------------------------------------
    moe_groups: dict = {}
    for i, moe in enumerate(per_layer_moe):
        if moe is None:
            continue
        quant = _moe_quant(moe, i, base_quant, ignored)
        key = (moe.num_experts, moe.inter, quant["method"])
        if key not in moe_groups:
            moe_groups[key] = {"name": "experts", "num_experts": moe.num_experts, "top_k": moe.top_k,
                               "hidden_size": moe.hidden, "intermediate_size": moe.inter,
                               "count": 0, "quant": quant}
        moe_groups[key]["count"] += 1
    moe_entries = list(moe_groups.values())
    if len({e["quant"]["method"] for e in moe_entries}) > 1:
        for e in moe_entries:
            if e["quant"]["method"] == "none":
                e["name"] += ".unquantized"

    # --- attention and KV cache ------------------------------------------------
    if block_size is None:
        block_size = MLA_BLOCK_SIZE if mla else DEFAULT_BLOCK_SIZE
    if mla:
        major = int(gpu_facts["capability"].split(".")[0])
        backend = "FLASHMLA" if block_size == MLA_BLOCK_SIZE and major >= 9 else "TRITON_MLA"
        window, sliding = None, [False] * num_layers
    else:
        backend = "FLASH_ATTN"
        window, sliding = _sliding_layers(ctx, family, num_layers)
    softcap = float(hf.get("attn_logit_softcapping") or 0.0)
    kinds = []  # (kind, sliding_window, count) in kv_cache group order
    n_full = sliding.count(False)
    if n_full:
        kinds.append(("full_attention", [-1, -1], n_full))
    if num_layers - n_full:
        kinds.append(("sliding_window", [window - 1, 0], num_layers - n_full))
    attention, kv_groups = [], []
    for group_index, (kind, sw, count) in enumerate(kinds):
        entry = {"name": "attn" if group_index == 0 else "attn_sliding",
                 "num_heads": attn["num_heads"], "num_kv_heads": attn["num_kv_heads"],
                 "head_size": attn["head_size"]}
        if "head_size_v" in attn:
            entry["head_size_v"] = attn["head_size_v"]
        entry.update({"count": count, "scale": attn["scale"], "logits_soft_cap": softcap,
                      "sliding_window": sw, "kv_cache_dtype": "auto", "backend": backend})
        if group_index:
            entry["kv_cache_group"] = group_index
        attention.append(entry)
        kv_groups.append({"block_size": block_size, "kind": kind})

    estimated = num_blocks is None
    if estimated:
        def wbytes(quant):
            return 1 if quant["method"] in ("fp8", "fp8_per_tensor") else act_bytes
        weights = sum(e["n"] * e["k"] * e["count"] * wbytes(e["quant"]) for e in linear)
        weights += sum(e["count"] * e["num_experts"] * 3 * e["intermediate_size"] * e["hidden_size"]
                       * wbytes(e["quant"]) for e in moe_entries)
        if not hf.get("tie_word_embeddings", False):
            weights += lm_n * hidden * act_bytes
        free = GPU_MEMORY_UTILIZATION * gpu_facts["memory_gib"] * 2 ** 30 - weights
        if mla:
            per_block = num_layers * block_size * attn["head_size"] * act_bytes
        else:
            per_block = num_layers * block_size * 2 * attn["num_kv_heads"] * attn["head_size"] * act_bytes
        num_blocks = max(16, int(max(free, 0) // per_block) // 16 * 16)

    # --- scheduler defaults (vLLM `vllm serve`, reference §2.6) ----------------
    mem = gpu_facts["memory_gib"]
    if mem >= 160:
        default_tokens, default_seqs = 16384, 1024
    elif mem >= 70 and gpu_name != "A100":
        default_tokens, default_seqs = 8192, 1024
    else:
        default_tokens, default_seqs = 2048, 256
    seqs = max_num_seqs if max_num_seqs is not None else default_seqs
    tokens = max_num_batched_tokens if max_num_batched_tokens is not None else default_tokens
    if tokens < seqs:
        raise HFConfigError(f"{source}: --max-num-batched-tokens ({tokens}) is smaller than "
                            f"--max-num-seqs ({seqs}); vLLM refuses that")

    # --- names -------------------------------------------------------------------
    if name is None:
        name = f"{_model_name(hf, source)}-tp{tp}"
        if dp > 1:
            name += f"-dp{dp}"
        if ep:
            name += "-ep"
        name += f"-{gpu_name.lower()}"
    flags = []
    for flag, value, default in (("--tp", tp, 1), ("--dp", dp, 1), ("--gpu", gpu_name, "H100"),
                                 ("--max-model-len", max_model_len, derived_len),
                                 ("--max-num-seqs", max_num_seqs, None),
                                 ("--max-num-batched-tokens", max_num_batched_tokens, None),
                                 ("--num-blocks", None if estimated else num_blocks, None),
                                 ("--block-size", block_size, MLA_BLOCK_SIZE if mla else DEFAULT_BLOCK_SIZE)):
        if value != default:
            flags.append(f"{flag} {value}")
    if ep:
        flags.append("--enable-expert-parallel")
    description = (f"Generated by `warmup engine --from-hf {source}{''.join(' ' + f for f in flags)}` "
                   f"from {arch}; every size is per rank.")
    if estimated:
        description += (f" num_blocks is an estimate ({GPU_MEMORY_UTILIZATION:.0%} of {mem} GiB minus "
                        "the weights; see planner/hf.py).")

    return {
        "name": name,
        "description": description,
        "model": {
            "architecture": arch,
            "vocab_size": vocab,
            "max_model_len": max_model_len,
            "runner": "generate",
            "dtype": dtype,
            "hidden_size": hidden,
            "num_layers": num_layers,
            "linear": linear,
            "moe": moe_entries,
            "attention": attention,
        },
        "kv_cache": {"num_blocks": num_blocks, "groups": kv_groups},
        "scheduler": {"max_num_seqs": seqs, "max_num_batched_tokens": tokens},
        "speculative": {"method": "none", "num_speculative_tokens": 0},
        "parallel": {"tensor_parallel_size": tp, "data_parallel_size": dp, "pipeline_parallel_size": 1,
                     "pipeline_rank": 0, "enable_expert_parallel": ep},
        "device": {"name": gpu_name, "num_sms": gpu_facts["num_sms"], "capability": gpu_facts["capability"]},
    }


# ----------------------------------------------------------------------------
# YAML text, written by hand (no PyYAML at import, and full control of style)

_FLOW_LISTS = {"linear", "moe", "attention", "groups"}
_scalar = yaml_scalar  # the expanded-plan writer's scalars: one quoting rule for all our YAML


def _flow(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return _scalar(value)


def _block(value: dict, indent: int, lines: list) -> None:
    pad = " " * indent
    for key, item in value.items():
        k = _scalar(key)
        if isinstance(item, dict):
            if item:
                lines.append(f"{pad}{k}:")
                _block(item, indent + 2, lines)
            else:
                lines.append(f"{pad}{k}: {{}}")
        elif isinstance(item, (list, tuple)):
            if not item:
                lines.append(f"{pad}{k}: []")
            elif key in _FLOW_LISTS or any(isinstance(x, (dict, list, tuple)) for x in item):
                lines.append(f"{pad}{k}:")
                for x in item:
                    lines.append(f"{pad}  - {_flow(x)}")
            else:
                lines.append(f"{pad}{k}: {_flow(item)}")
        else:
            lines.append(f"{pad}{k}: {_scalar(item)}")


def engine_to_yaml(engine: dict) -> str:
    """Readable, deterministic YAML: block maps, one flow-style line per list item."""
    lines: list = []
    _block(engine, 0, lines)
    return "\n".join(lines) + "\n"
