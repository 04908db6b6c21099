"""The engine's facts as one typed record, built once from the engine config's canonical data.

Readers outside the engine modules (the stages, the lints, vLLM's choices, the executor's
runner) take their numbers from here as attributes, never by a path into the engine dict, so
a field that moves in the schema moves in one place. A layer's quantization is read from the
dict here only (quant_of). The questions asked across layers (the distinct block-FP8 linears, the
MoE weights) are asked of this record in planner/engine/queries.py, which imports this module
(this one imports nothing of the planner). Named tuples: the record is on `warmup plan`'s path
(planner/__init__.py's start-up rule).
"""

from __future__ import annotations

from typing import NamedTuple

from kernel_model.device import parse_capability, sm_number


class Quant(NamedTuple):
    """A layer's weight quantization (`quant`): the method, and the block where it has one."""

    method: str                    # "none" where the engine gives no quant
    block: tuple[int, int] | None  # weight_block_size as (block N, block K); None: not block-quantized

    def is_block_fp8(self, block: int = 128) -> bool:
        """FP8 in [block, block] scale blocks (DeepGEMM's and the Triton block-FP8 GEMMs' layout;
        vLLM's fused_moe Triton tables are for [128, 128])."""
        return self.method == "fp8" and self.block == (block, block)

    @property
    def is_fp8(self) -> bool:
        """FP8 of any scales, block or per-tensor."""
        return str(self.method).startswith("fp8")


def quant_of(layer: dict) -> Quant:
    """The quantization of a layer of the engine dict (`quant`); a layer without it is unquantized.
    The engine modules and vLLM's choices ask it while they build the engine; readers of the
    record read LinearLayer.quant / MoeLayer.quant."""
    quant = layer.get("quant") or {}
    block = quant.get("weight_block_size")
    return Quant(quant.get("method", "none"), (block[0], block[1]) if block else None)


class LinearLayer(NamedTuple):
    """One linear layer kind (model.linear[])."""

    name: str
    n: int
    k: int
    count: int
    quant: Quant
    kernel: str | None           # vLLM's block-FP8 kernel (planner/engine/config.py fills the default)


class MoeLayer(NamedTuple):
    """One fused-MoE layer kind (model.moe[]): per-rank experts and sizes."""

    name: str
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    count: int
    quant: Quant


class KvCacheGroup(NamedTuple):
    """One KV-cache group (kv_cache.groups[]): layers that share a block table."""

    block_size: int
    kind: str                    # full_attention, sliding_window, mamba, cross_attention, ...
    mamba_cache_mode: str        # none | all | align
    num_speculative_blocks: int


class KvCache(NamedTuple):
    num_blocks: int
    groups: tuple[KvCacheGroup, ...]


class AttentionLayer(NamedTuple):
    """One attention layer kind (model.attention[]), schema defaults applied."""

    name: str
    num_heads: int
    num_kv_heads: int
    head_size: int
    head_size_v: int             # head_size where the engine gives none (not MLA)
    count: int
    scale: float | None          # None: vLLM's 1 / sqrt(head_size)
    logits_soft_cap: float
    sliding_window: tuple[int, int]
    kv_cache_dtype: str
    backend: str
    kv_cache_group: int

    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else self.head_size ** -0.5

    @property
    def is_mla(self) -> bool:
        """Whether values are narrower than keys (DeepSeek's MLA): the reference runner has no kernel."""
        return self.head_size_v != self.head_size


class Model(NamedTuple):
    """model's scalar fields and its attention layers."""

    architecture: str | None
    vocab_size: int
    max_model_len: int
    max_encoder_len: int
    runner: str                  # generate | pooling
    model_runner: str            # auto | v1 | v2 (planner/engine/vllm_choices.py resolves auto)
    sampler: str                 # auto | flashinfer | triton
    dtype: str
    hidden_size: int | None
    attention: tuple[AttentionLayer, ...]
    linear: tuple[LinearLayer, ...]
    moe: tuple[MoeLayer, ...]


class Scheduler(NamedTuple):
    max_num_seqs: int
    max_num_batched_tokens: int


class Speculative(NamedTuple):
    method: str
    num_speculative_tokens: int

    @property
    def decode_query_len(self) -> int:
        """A uniform decode step's tokens per request: one verified token plus the drafts."""
        return 1 + self.num_speculative_tokens


class Parallel(NamedTuple):
    tensor_parallel_size: int
    data_parallel_size: int
    pipeline_parallel_size: int
    pipeline_rank: int
    enable_expert_parallel: bool


class Device(NamedTuple):
    name: str
    num_sms: int
    capability: tuple[int, int]  # (major, minor)

    @property
    def capability_number(self) -> int:
        """9.0 -> 90, as plans write `device_capability`."""
        return sm_number(self.capability)


class Compilation(NamedTuple):
    cudagraph_mode: str
    enforce_eager: bool
    cudagraph_capture_sizes: tuple[int, ...] | None  # None: vLLM's default list
    max_cudagraph_capture_size: int | None           # None: the plan's (vLLM's) default
    performance_mode: str


class EngineFacts(NamedTuple):
    name: str
    model: Model
    kv_cache: KvCache
    scheduler: Scheduler
    speculative: Speculative
    parallel: Parallel
    compilation: Compilation
    device: Device


def engine_facts(data: dict) -> EngineFacts:
    """The record of an engine config's canonical data (planner/engine/config.py applies the schema's
    defaults; the executor reads the same data from an expanded plan)."""
    model, kv, sched = data["model"], data["kv_cache"], data["scheduler"]
    spec, par, dev = data["speculative"], data["parallel"], data["device"]
    return EngineFacts(
        name=data["name"],
        model=Model(model.get("architecture"), model["vocab_size"], model["max_model_len"],
                    model.get("max_encoder_len", 0), model.get("runner", "generate"),
                    model.get("model_runner", "auto"), model.get("sampler", "auto"), model.get("dtype", "bfloat16"),
                    model.get("hidden_size"), tuple(_attention(a) for a in model.get("attention") or ()),
                    tuple(LinearLayer(x["name"], x["n"], x["k"], x.get("count", 1), quant_of(x), x.get("kernel"))
                          for x in model.get("linear") or ()),
                    tuple(MoeLayer(x["name"], x["num_experts"], x["top_k"], x["hidden_size"], x["intermediate_size"],
                                   x.get("count", 1), quant_of(x)) for x in model.get("moe") or ())),
        kv_cache=KvCache(kv["num_blocks"], tuple(
            KvCacheGroup(g["block_size"], g.get("kind", "full_attention"), g.get("mamba_cache_mode", "none"),
                         g.get("num_speculative_blocks", 0))
            for g in kv["groups"])),
        scheduler=Scheduler(sched["max_num_seqs"], sched["max_num_batched_tokens"]),
        speculative=Speculative(spec.get("method", "none"), spec.get("num_speculative_tokens", 0)),
        parallel=Parallel(par.get("tensor_parallel_size", 1), par.get("data_parallel_size", 1),
                          par.get("pipeline_parallel_size", 1), par.get("pipeline_rank", 0),
                          bool(par.get("enable_expert_parallel", False))),
        compilation=_compilation(data.get("compilation") or {}),
        device=Device(dev["name"], dev["num_sms"], parse_capability(str(dev["capability"]))))


def _compilation(comp: dict) -> Compilation:
    sizes = comp.get("cudagraph_capture_sizes")
    return Compilation(comp.get("cudagraph_mode", "FULL_AND_PIECEWISE"), bool(comp.get("enforce_eager", False)),
                       None if sizes is None else tuple(sizes), comp.get("max_cudagraph_capture_size"),
                       comp.get("performance_mode", "default"))


def _attention(a: dict) -> AttentionLayer:
    window = a.get("sliding_window", (-1, -1))
    return AttentionLayer(a["name"], a["num_heads"], a["num_kv_heads"], a["head_size"],
                          a.get("head_size_v") or a["head_size"], a.get("count", 1), a.get("scale"),
                          a.get("logits_soft_cap", 0.0), (window[0], window[1]), a.get("kv_cache_dtype", "auto"),
                          a.get("backend", "FLASH_ATTN"), a.get("kv_cache_group", 0))
