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
    return Quant(method=quant.get("method", "none"), block=(block[0], block[1]) if block else None)


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
    defaults; the executor reads the same data from an expanded plan). Every default is the engine
    schema's, so a field the schema defaults is read as given; .get is for the fields it leaves out
    (architecture, hidden_size, a layer's quant, kernel, scale, head_size_v), which mean "none"."""
    model, kv, sched = data["model"], data["kv_cache"], data["scheduler"]
    spec, par, dev, comp = data["speculative"], data["parallel"], data["device"], data["compilation"]
    return EngineFacts(
        name=data["name"],
        model=_model(model),
        kv_cache=KvCache(num_blocks=kv["num_blocks"], groups=tuple(_kv_cache_group(g) for g in kv["groups"])),
        scheduler=Scheduler(max_num_seqs=sched["max_num_seqs"], max_num_batched_tokens=sched["max_num_batched_tokens"]),
        speculative=Speculative(method=spec["method"], num_speculative_tokens=spec["num_speculative_tokens"]),
        parallel=Parallel(tensor_parallel_size=par["tensor_parallel_size"],
                          data_parallel_size=par["data_parallel_size"],
                          pipeline_parallel_size=par["pipeline_parallel_size"], pipeline_rank=par["pipeline_rank"],
                          enable_expert_parallel=bool(par["enable_expert_parallel"])),
        compilation=_compilation(comp),
        device=Device(name=dev["name"], num_sms=dev["num_sms"], capability=parse_capability(str(dev["capability"]))))


def _model(model: dict) -> Model:
    return Model(
        architecture=model.get("architecture"), vocab_size=model["vocab_size"], max_model_len=model["max_model_len"],
        max_encoder_len=model["max_encoder_len"], runner=model["runner"], model_runner=model["model_runner"],
        sampler=model["sampler"], dtype=model["dtype"], hidden_size=model.get("hidden_size"),
        attention=tuple(_attention(a) for a in model["attention"]),
        linear=tuple(LinearLayer(name=x["name"], n=x["n"], k=x["k"], count=x["count"], quant=quant_of(x),
                                 kernel=x.get("kernel"))
                     for x in model["linear"]),
        moe=tuple(MoeLayer(name=x["name"], num_experts=x["num_experts"], top_k=x["top_k"],
                           hidden_size=x["hidden_size"], intermediate_size=x["intermediate_size"],
                           count=x["count"], quant=quant_of(x))
                  for x in model["moe"]))


def _kv_cache_group(group: dict) -> KvCacheGroup:
    return KvCacheGroup(block_size=group["block_size"], kind=group["kind"],
                        mamba_cache_mode=group["mamba_cache_mode"],
                        num_speculative_blocks=group["num_speculative_blocks"])


def _compilation(comp: dict) -> Compilation:
    sizes = comp["cudagraph_capture_sizes"]
    return Compilation(cudagraph_mode=comp["cudagraph_mode"], enforce_eager=bool(comp["enforce_eager"]),
                       cudagraph_capture_sizes=None if sizes is None else tuple(sizes),
                       max_cudagraph_capture_size=comp["max_cudagraph_capture_size"],
                       performance_mode=comp["performance_mode"])


def _attention(a: dict) -> AttentionLayer:
    left, right = a["sliding_window"]
    return AttentionLayer(name=a["name"], num_heads=a["num_heads"], num_kv_heads=a["num_kv_heads"],
                          head_size=a["head_size"], head_size_v=a.get("head_size_v") or a["head_size"],
                          count=a["count"], scale=a.get("scale"), logits_soft_cap=a["logits_soft_cap"],
                          sliding_window=(left, right), kv_cache_dtype=a["kv_cache_dtype"], backend=a["backend"],
                          kv_cache_group=a["kv_cache_group"])
