"""vLLM's command-line flags as engine_from_hf takes them: one FlagSpec row per flag (FROM_HF_FLAGS),
one EngineRequest field per row (what the builder is asked, as one record), and each value checked
against the engine schema's bound of the field it sets (check_flags: Flags): the parallelism (tp, dp,
expert parallelism), the scheduler's and the cache's sizes, max_model_len, the speculative method and
its draft tokens, the KV-cache dtype; and the vLLM release whose model code the shapes follow
(--vllm-release: a row of planner/engine/releases.py, the newest by default), the one flag that sets
no engine field. A new flag is one row and one field (tests/planner/test_engine_declarations.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...limits import (FP8_LINEAR_KERNEL_CHOICES, KV_CACHE_DTYPES, MAX_BLOCKS, MAX_SEQS, MAX_SPECULATIVE_TOKENS,
                       MAX_TOKENS, MODEL_RUNNERS, SAMPLERS, SPECULATIVE_METHODS)
from ..releases import VLLM_RELEASES, VllmRelease, newest, supported
from .source import config_error, short_repr


@dataclass
class Parallel:
    """vLLM's ParallelConfig, as far as sharding goes."""

    tp: int
    dp: int
    ep: bool  # --enable-expert-parallel

    @property
    def sequence_parallel_moe(self) -> bool:
        """vLLM's ParallelConfig.use_sequence_parallel_moe (config/parallel.py, 0.25.0 and 0.33.0):
        expert parallelism over tp > 1 and dp > 1 ranks with an all2all backend that shards the
        tokens (the default, allgather_reducescatter, is one); no pipeline parallelism (the engine's)."""
        return self.ep and self.tp > 1 and self.dp > 1


@dataclass
class Flags:
    """The command-line flags, checked; None where a flag was not given."""

    parallel: Parallel
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    num_blocks: int | None
    block_size: int | None
    max_model_len: int | None
    speculative_method: str | None = None
    num_speculative_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    # the vLLM release whose model code the shapes follow, where releases differ (--vllm-release)
    release: VllmRelease = field(default_factory=lambda: VLLM_RELEASES[newest()])


@dataclass(frozen=True)
class FlagSpec:
    """One flag of `warmup engine --from-hf`: vLLM's flag of that name where vLLM has one, and the
    engine field it sets. The command's arguments, the flags --from-vllm refuses (vLLM's own
    arguments say these things) and each flag's check all read this one row."""

    flag: str                     # "--max-num-seqs"
    field: str | None             # the engine field it sets, as the schema names it (None: --vllm-release,
                                  # which says which vLLM builds the model, and sets no field of its own)
    help: str
    bound: int | None = None      # a count: the engine schema's bound for the field
    choices: tuple[str, ...] = ()  # a name: the engine schema's values for the field
    switch: bool = False          # no value: on when given
    metavar: str | None = None

    @property
    def dest(self) -> str:
        """The argparse attribute, and the EngineRequest field of the flag."""
        return self.flag[2:].replace("-", "_")

    def argparse_options(self) -> dict:
        if self.switch:
            return {"action": "store_true", "help": self.help}
        options = {"help": self.help, **({"metavar": self.metavar} if self.metavar else {})}
        return {"choices": self.choices, **options} if self.choices else {"type": int, **options}


@dataclass(frozen=True)
class EngineRequest:
    """What engine_from_hf is asked to build, as one record: one field per FROM_HF_FLAGS row (its
    dest), in the rows' order, holding what the flag left out means, then NOT_FLAGS. The command line
    builds it from its arguments (from_args), --from-vllm and the plugin from what vLLM resolved;
    check_flags checks it into Flags."""

    tp: int = 1
    dp: int = 1
    enable_expert_parallel: bool = False
    max_num_seqs: int | None = None             # None: vLLM's for the GPU's memory (scheduler.py)
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None            # None: the config's own limit
    num_blocks: int | None = None               # None: estimated from the GPU's memory (memory.py)
    block_size: int | None = None               # None: the attention backend's
    speculative_method: str | None = None       # None: no speculation
    num_speculative_tokens: int | None = None
    kv_cache_dtype: str | None = None           # None: auto
    fp8_linear_kernel: str | None = None        # None: vLLM's choices (planner/engine/vllm_choices.py)
    model_runner: str | None = None
    sampler: str | None = None
    ignore_memory: bool = False                 # a model that does not fit: a warning, not a refusal
    vllm_release: str | None = None             # None: the newest row of planner/engine/releases.py
    # NOT_FLAGS: --gpu and --name, which --from-vllm takes too (so they are not --from-hf's own
    # rows), and the config's file, which errors name
    gpu: str = "H100"
    name: str | None = None                     # None: <model>-tp<N>...-<gpu> (assemble.py)
    source: str = "config.json"

    @classmethod
    def from_args(cls, args, **not_flags) -> EngineRequest:
        """The request of `warmup engine`'s parsed arguments: each row's value where its flag was given,
        and `not_flags` (gpu, name, source) where not None; the record's default for everything else."""
        given = {spec.dest: getattr(args, spec.dest) for spec in FROM_HF_FLAGS}
        return cls(**{key: value for key, value in {**given, **not_flags}.items() if value is not None})


NOT_FLAGS = ("gpu", "name", "source")  # EngineRequest's fields that no FlagSpec row declares


_KV = ", ".join(KV_CACHE_DTYPES)
FROM_HF_FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec("--tp", "parallel.tensor_parallel_size", "tensor-parallel size (default 1)", bound=MAX_SEQS),
    FlagSpec("--dp", "parallel.data_parallel_size", "data-parallel size (default 1)", bound=MAX_SEQS),
    FlagSpec("--enable-expert-parallel", "parallel.enable_expert_parallel", "shard experts over tp*dp ranks",
             switch=True),
    FlagSpec("--max-num-seqs", "scheduler.max_num_seqs",
             "vLLM's --max-num-seqs (default: vLLM's for the GPU's memory, as `vllm serve` sets it)", bound=MAX_SEQS),
    FlagSpec("--max-num-batched-tokens", "scheduler.max_num_batched_tokens",
             "vLLM's --max-num-batched-tokens (default: vLLM's for the GPU's memory)", bound=MAX_TOKENS),
    FlagSpec("--max-model-len", "model.max_model_len",
             "vLLM's --max-model-len, at most the config's own limit (default: that limit)", bound=MAX_TOKENS),
    FlagSpec("--num-blocks", "kv_cache.num_blocks", "KV blocks (default: estimated from GPU memory)",
             bound=MAX_BLOCKS),
    FlagSpec("--block-size", "kv_cache.groups.block_size",
             "tokens per KV-cache block, vLLM's --block-size (default: the attention backend's)", bound=MAX_TOKENS),
    FlagSpec("--speculative-method", "speculative.method",
             "vLLM's speculative decoding method (speculative_config.method): "
             f"{', '.join(SPECULATIVE_METHODS)} (default none)", choices=SPECULATIVE_METHODS, metavar="METHOD"),
    FlagSpec("--num-speculative-tokens", "speculative.num_speculative_tokens",
             f"draft tokens per step, 1 to {MAX_SPECULATIVE_TOKENS} (required with a method, except mtp: the model's "
             "MTP layers, and suffix: 24, vLLM's defaults)", bound=MAX_SPECULATIVE_TOKENS, metavar="N"),
    FlagSpec("--kv-cache-dtype", "model.attention.kv_cache_dtype",
             f"vLLM's --kv-cache-dtype: {_KV} (default auto: the model's dtype)", choices=KV_CACHE_DTYPES,
             metavar="DTYPE"),
    FlagSpec("--fp8-linear-kernel", "model.linear.kernel",
             "the kernel vLLM picks for the block-FP8 linears DeepGEMM can take: flashinfer_deep_gemm (the default "
             "on SM 9.0: FlashInfer installed, as vLLM's wheel brings it) or deep_gemm (no FlashInfer, or "
             "VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER=0)", choices=FP8_LINEAR_KERNEL_CHOICES, metavar="KERNEL"),
    FlagSpec("--model-runner", "model.model_runner",
             "vLLM's model runner: auto (the default: each release's own choice for the model), v1 or v2 "
             "(VLLM_USE_V2_MODEL_RUNNER=0 or 1)", choices=MODEL_RUNNERS, metavar="RUNNER"),
    FlagSpec("--sampler", "model.sampler",
             "vLLM's top-k/top-p sampler: auto (the default: FlashInfer's where vLLM's wheel installs it and the GPU "
             "is SM 8.0 to 12.1), flashinfer or triton (VLLM_USE_FLASHINFER_SAMPLER=0)", choices=SAMPLERS,
             metavar="SAMPLER"),
    FlagSpec("--ignore-memory", "kv_cache.num_blocks",
             "write the engine config even when the estimate says the model does not fit the GPU (weights over "
             "the memory budget, or no KV room for one max_model_len request): a loud warning, and num_blocks "
             "for one such request, instead of exit 2", switch=True),
    FlagSpec("--vllm-release", None,
             f"the vLLM release whose model code the shapes follow where releases differ: {', '.join(supported())} "
             f"(default the newest, {newest()}, which warmup-planner's `vllm` extra installs)",
             choices=tuple(supported()), metavar="VERSION"),
)
_SPECS = {spec.flag: spec for spec in FROM_HF_FLAGS}


def flag_rows() -> tuple[FlagSpec, ...]:
    """The rows as they are now (what reads them at each use, so that a row added is read: assemble.py)."""
    return FROM_HF_FLAGS


def _flag_int(value, flag: str, source: str, *, allow_none: bool = True):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise config_error(source, f"{flag} must be a positive integer, got {short_repr(value)}")
    if value > _SPECS[flag].bound:
        raise config_error(source, f"{flag} {value} is over the bound of {_SPECS[flag].bound:,} "
                                   "(schemas/engine.schema.json says why)")
    return value


def _flag_choice(value, flag: str, source: str):
    if value is None or (isinstance(value, str) and value in _SPECS[flag].choices):
        return value
    table = "schemas/engine.schema.json" if _SPECS[flag].field else "planner/engine/releases.py"
    raise config_error(source, f"{flag} {short_repr(value)} is not one of {', '.join(_SPECS[flag].choices)} "
                               f"({table})")


def check_flags(request: EngineRequest) -> Flags:
    """The flags, each checked; the KV-cache dtype `auto` where not given, the newest release where none is."""
    source = request.source
    parallel = Parallel(tp=_flag_int(request.tp, "--tp", source, allow_none=False),
                        dp=_flag_int(request.dp, "--dp", source, allow_none=False),
                        ep=bool(request.enable_expert_parallel))
    return Flags(parallel=parallel,
                 max_num_seqs=_flag_int(request.max_num_seqs, "--max-num-seqs", source),
                 max_num_batched_tokens=_flag_int(request.max_num_batched_tokens, "--max-num-batched-tokens", source),
                 num_blocks=_flag_int(request.num_blocks, "--num-blocks", source),
                 block_size=_flag_int(request.block_size, "--block-size", source),
                 max_model_len=_flag_int(request.max_model_len, "--max-model-len", source),
                 speculative_method=_flag_choice(request.speculative_method, "--speculative-method", source),
                 num_speculative_tokens=_draft_tokens(request.speculative_method, request.num_speculative_tokens,
                                                      source),
                 kv_cache_dtype=_flag_choice(request.kv_cache_dtype, "--kv-cache-dtype", source) or "auto",
                 release=VLLM_RELEASES[_flag_choice(request.vllm_release, "--vllm-release", source) or newest()])


def _draft_tokens(method, k, source: str) -> int | None:
    """--num-speculative-tokens, checked against --speculative-method (0 goes with `none` only)."""
    if k is None:
        return None
    if method is None:
        raise config_error(source, f"--num-speculative-tokens {short_repr(k)} needs --speculative-method (one of "
                                   f"{', '.join(m for m in SPECULATIVE_METHODS if m != 'none')})")
    if method == "none":
        if k == 0 and not isinstance(k, bool):
            return 0
        raise config_error(source, "--speculative-method none takes no draft tokens: --num-speculative-tokens "
                                   f"must be 0 or left out, got {short_repr(k)}")
    return _flag_int(k, "--num-speculative-tokens", source)
