"""The KV-cache size estimate (when ``num_blocks`` is not given), and the refusal of a model
that vLLM would not start.

A rough upper bound of what vLLM's memory profiling finds, with
``--gpu-memory-utilization 0.9``::

    weights   = sum(linear n*k*count*bytes) + sum(moe count*E*3*I*H*bytes)
                + embedding (pad64(vocab)/tp * hidden * dtype bytes, unless tied)
                bytes: 1 for fp8 weights, bits / 8 for awq, gptq and mxfp4 ones
                (quantization.weight_bytes), the model dtype's size (2) otherwise;
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

from dataclasses import dataclass

from kernel_model.arith import cdiv

from ...limits import MAX_BLOCKS
from .device import Gpu
from .entries import vocab_per_rank
from .flags import Parallel
from .layers import AttentionShape, DecoderLayers
from .model import Model
from .quantization import QuantConfig, weight_bytes
from .source import HFConfig


GPU_MEMORY_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default: its share of the GPU's memory


def _weight_bytes(ctx: HFConfig, model: Model, linear: list[dict], moe: list[dict], tp: int,
                  quant: QuantConfig) -> int:
    """The weights of one rank (see the module docstring)."""
    def size(entry: dict) -> float:
        return weight_bytes(entry, model.dtype_bytes, quant)
    weights = sum(e["n"] * e["k"] * e["count"] * size(e["quant"]) for e in linear)
    weights += sum(e["count"] * e["num_experts"] * 3 * e["intermediate_size"] * e["hidden_size"]
                   * size(e["quant"]) for e in moe)
    if not ctx.get("tie_word_embeddings", False):
        weights += vocab_per_rank(ctx, model, tp) * model.hidden_size * model.dtype_bytes
    return int(weights)


@dataclass
class _KvRoom:
    """What the KV-cache estimate weighs, in bytes, for the error that says it does not fit."""

    weights: int        # one rank's weights
    budget: float       # GPU_MEMORY_UTILIZATION of the GPU's memory
    per_block: int      # one KV block across every layer
    num_blocks: int     # blocks that fit beside the weights, rounded down to a multiple of 16
    needed: int         # blocks of one max_model_len request, which vLLM refuses to start without


def _kv_room(ctx: HFConfig, model: Model, shape: AttentionShape, linear: list[dict], moe: list[dict],
             gpu: Gpu, block_size: int, tp: int, quant: QuantConfig) -> _KvRoom:
    """KV blocks that fit beside the weights (the estimate of the module docstring)."""
    weights = _weight_bytes(ctx, model, linear, moe, tp, quant)
    budget = GPU_MEMORY_UTILIZATION * gpu.memory_gib * 2 ** 30
    if model.mla:  # one latent head, no separate V
        per_block = model.kv_bytes(model.num_layers * block_size * shape.head_size)
    else:
        per_block = model.kv_bytes(model.num_layers * block_size * 2 * shape.num_kv_heads * shape.head_size)
    blocks = min(int(max(budget - weights, 0) // per_block) // 16 * 16, MAX_BLOCKS)
    return _KvRoom(weights, budget, per_block, blocks, cdiv(model.max_model_len, block_size))


def _gib(count: float) -> str:
    return f"{count / 2 ** 30:.1f} GiB"


def _does_not_fit(room: _KvRoom, model: Model, gpu: Gpu, par: Parallel, block_size: int) -> str | None:
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


def estimate_num_blocks(ctx: HFConfig, model: Model, layers: DecoderLayers, linear: list[dict], moe: list[dict],
                        gpu: Gpu, block_size: int, par: Parallel, warn, quant: QuantConfig) -> tuple[int, str | None]:
    """(num_blocks, why the model does not fit or None). A model that does not fit is refused,
    or with `warn` (--ignore-memory) given room for one max_model_len request and a loud warning."""
    room = _kv_room(ctx, model, layers.attention, linear, moe, gpu, block_size, par.tp, quant)
    reason = _does_not_fit(room, model, gpu, par, block_size)
    if reason is None:
        return room.num_blocks, None
    if warn is None:
        raise ctx.fail(reason + "; or --ignore-memory to write the engine config anyway")
    num_blocks = min(max(room.needed, 16), MAX_BLOCKS)
    warn(f"{reason}. --ignore-memory: writing num_blocks {num_blocks} (one max_model_len request), "
         "a configuration vLLM would refuse on this GPU")
    return num_blocks, reason
