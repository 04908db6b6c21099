"""vLLM's command-line flags as engine_from_hf takes them: one FlagSpec row per flag (FROM_HF_FLAGS),
one EngineRequest field per row (what the builder is asked, as one record), and each value checked by
its own row (check_flags: Flags): a count under the engine schema's bound of the field it sets, a name
among the field's values, a switch on or off. The flags: the parallelism (tp, dp, expert parallelism),
the scheduler's and the cache's sizes, max_model_len, the speculative method and its draft tokens, the
KV-cache dtype, what vLLM picks at start-up (kernel, runner, sampler), --ignore-memory; and the vLLM
release whose model code the shapes follow (--vllm-release: a row of planner/engine/releases.py, the
newest by default), the one flag that sets no engine field.

A new flag is one row here and one EngineRequest field beside it. The row alone gives `warmup engine`
its argument, the flags --from-vllm refuses, its check (check_flags loops over the rows: the row's bound,
choices, switch, default or `required` is the check), its checked value (Flags.<dest>) and its place in
the regenerating command (assemble.py's _as_asked). Beyond the two lines: what the builder writes into
the engine dict for it is code of its own (the value's meaning); a field new to the engine is also a
property of schemas/engine.schema.json, whose bound or values a test holds equal to the row's
(tests/planner/test_engine_declarations.py), and a record of planner/engine/facts.py where stages read it.
"""

from __future__ import annotations

from dataclasses import dataclass

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


SCHEMA = "schemas/engine.schema.json"  # where a field's bound is reasoned and its values listed


@dataclass(frozen=True)
class FlagSpec:
    """One flag of `warmup engine --from-hf`: vLLM's flag of that name where vLLM has one, and the
    engine field it sets. The command's arguments, the flags --from-vllm refuses (vLLM's own
    arguments say these things) and each flag's check (check_flags) all read this one row."""

    flag: str                     # "--max-num-seqs"
    field: str | None             # the engine field it sets, as the schema names it (None: --vllm-release,
                                  # which says which vLLM builds the model, and sets no field of its own)
    help: str
    bound: int | None = None      # a count: the engine schema's bound for the field
    choices: tuple[str, ...] = ()  # a name: the engine schema's values for the field
    switch: bool = False          # no value: on when given
    metavar: str | None = None
    # How the value is checked, beyond the bound, the choices or the switch:
    required: bool = False        # None refused (--tp, --dp: the request's default is 1, never None)
    default: object = None        # what a flag left out (None) is checked into; a function is called at
                                  # each check (--vllm-release: the newest row of the table as it is then)
    listed_in: str | None = SCHEMA  # the table a refused name is sent to (None: the refusal names none)
    check: object = None          # a value that hangs on another flag's: a function check(row, value, the
                                  # rows before it checked by dest, source) in place of the row's own check

    @property
    def dest(self) -> str:
        """The argparse attribute, the EngineRequest field and the Flags attribute of the flag."""
        return self.flag[2:].replace("-", "_")

    def argparse_options(self) -> dict:
        if self.switch:
            return {"action": "store_true", "help": self.help}
        options = {"help": self.help, **({"metavar": self.metavar} if self.metavar else {})}
        return {"choices": self.choices, **options} if self.choices else {"type": int, **options}

    def checked(self, value, source: str):
        """`value` as the row declares it: a switch on or off, the default where left out (None, unless
        required), a name among the choices, a positive count under the bound."""
        if self.switch:
            return bool(value)
        if value is None and not self.required:
            return self.default() if callable(self.default) else self.default
        if self.choices:
            return _one_of(self, value, source)
        return _count(self, value, source) if self.bound is not None else value


def _count(spec: FlagSpec, value, source: str) -> int:
    """A positive integer under the row's bound (a bool is no count, though Python calls it an int)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise config_error(source, f"{spec.flag} must be a positive integer, got {short_repr(value)}")
    if value > spec.bound:
        raise config_error(source, f"{spec.flag} {value} is over the bound of {spec.bound:,} "
                                   f"({SCHEMA} says why)")
    return value


def _one_of(spec: FlagSpec, value, source: str) -> str:
    """One of the row's choices; the refusal sends the reader to the table that lists them."""
    if isinstance(value, str) and value in spec.choices:
        return value
    table = f" ({spec.listed_in})" if spec.listed_in else ""
    raise config_error(source, f"{spec.flag} {short_repr(value)} is not one of {', '.join(spec.choices)}{table}")


def _draft_tokens(spec: FlagSpec, k, earlier: dict[str, object], source: str) -> int | None:
    """--num-speculative-tokens, checked against --speculative-method (0 goes with `none` only)."""
    if k is None:
        return None
    method = earlier["speculative_method"]
    if method is None:
        raise config_error(source, f"--num-speculative-tokens {short_repr(k)} needs --speculative-method (one of "
                                   f"{', '.join(m for m in SPECULATIVE_METHODS if m != 'none')})")
    if method == "none":
        if k == 0 and not isinstance(k, bool):
            return 0
        raise config_error(source, "--speculative-method none takes no draft tokens: --num-speculative-tokens "
                                   f"must be 0 or left out, got {short_repr(k)}")
    return spec.checked(k, source)


@dataclass(frozen=True)
class Flags:
    """The request's flags, each checked by its row (check_flags): `values` holds every row's checked
    value by its dest, read as an attribute (flags.max_num_seqs; None where a flag was not given and its
    row has no default), so that a new row's value is there with no field here. Two are read as records:
    `parallel` (--tp, --dp, --enable-expert-parallel) and `release` (--vllm-release's table row)."""

    values: dict[str, object]

    def __getattr__(self, dest: str):
        values = vars(self).get("values", {})  # vars: no recursion where `values` is not set yet (copy)
        if dest in values:
            return values[dest]
        raise AttributeError(f"no flag row has the dest {dest!r}")

    @property
    def parallel(self) -> Parallel:
        return Parallel(tp=self.values["tp"], dp=self.values["dp"], ep=self.values["enable_expert_parallel"])

    @property
    def release(self) -> VllmRelease:
        """The vLLM release whose model code the shapes follow, where releases differ (--vllm-release)."""
        return VLLM_RELEASES[self.values["vllm_release"]]


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
    FlagSpec("--tp", "parallel.tensor_parallel_size", "tensor-parallel size (default 1)", bound=MAX_SEQS,
             required=True),
    FlagSpec("--dp", "parallel.data_parallel_size", "data-parallel size (default 1)", bound=MAX_SEQS,
             required=True),
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
             "MTP layers, and suffix: 24, vLLM's defaults)", bound=MAX_SPECULATIVE_TOKENS, metavar="N",
             check=_draft_tokens),
    FlagSpec("--kv-cache-dtype", "model.attention.kv_cache_dtype",
             f"vLLM's --kv-cache-dtype: {_KV} (default auto: the model's dtype)", choices=KV_CACHE_DTYPES,
             metavar="DTYPE", default="auto"),
    # listed_in=None: these three were refused in choices.py by name only, and still are (the kernel's two
    # choices are not the schema's list of kernels: the others are vLLM's to pick, not a flag's)
    FlagSpec("--fp8-linear-kernel", "model.linear.kernel",
             "the kernel vLLM picks for the block-FP8 linears DeepGEMM can take: flashinfer_deep_gemm (the default "
             "on SM 9.0: FlashInfer installed, as vLLM's wheel brings it) or deep_gemm (no FlashInfer, or "
             "VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER=0)", choices=FP8_LINEAR_KERNEL_CHOICES, metavar="KERNEL",
             listed_in=None),
    FlagSpec("--model-runner", "model.model_runner",
             "vLLM's model runner: auto (the default: each release's own choice for the model), v1 or v2 "
             "(VLLM_USE_V2_MODEL_RUNNER=0 or 1)", choices=MODEL_RUNNERS, metavar="RUNNER", listed_in=None),
    FlagSpec("--sampler", "model.sampler",
             "vLLM's top-k/top-p sampler: auto (the default: FlashInfer's where vLLM's wheel installs it and the GPU "
             "is SM 8.0 to 12.1), flashinfer or triton (VLLM_USE_FLASHINFER_SAMPLER=0)", choices=SAMPLERS,
             metavar="SAMPLER", listed_in=None),
    FlagSpec("--ignore-memory", "kv_cache.num_blocks",
             "write the engine config even when the estimate says the model does not fit the GPU (weights over "
             "the memory budget, or no KV room for one max_model_len request): a loud warning, and num_blocks "
             "for one such request, instead of exit 2", switch=True),
    FlagSpec("--vllm-release", None,
             f"the vLLM release whose model code the shapes follow where releases differ: {', '.join(supported())} "
             f"(default the newest, {newest()}, which warmup-planner's `vllm` extra installs)",
             choices=tuple(supported()), metavar="VERSION", default=newest,
             listed_in="planner/engine/releases.py"),
)


def flag_rows() -> tuple[FlagSpec, ...]:
    """The rows as they are now (what reads them at each use, so that a row added is read: assemble.py)."""
    return FROM_HF_FLAGS


def check_flags(request: EngineRequest) -> Flags:
    """The flags, each checked by its own row, in the rows' order (a row added is checked): its bound,
    its choices or its switch, its default where left out (the KV-cache dtype `auto`, the newest release),
    or its own check where the value hangs on another flag's (the draft tokens on the method)."""
    values: dict[str, object] = {}
    for spec in flag_rows():
        # a record without the row's field (one built before the row was added) did not give the flag
        value = getattr(request, spec.dest, None)
        values[spec.dest] = (spec.check(spec, value, values, request.source) if spec.check is not None
                             else spec.checked(value, request.source))
    return Flags(values)
