"""The step model: one typed, frozen record per step kind, shared by planner and executor.

A step is what crosses from the planner to the executor (and to a model runner): the
stage handlers build these records, the renderers, `warmup diff` and the lints read
them, and the executor runs them. Each kind owns what its consumers would otherwise
re-derive from a dict: its calls (``call_values``, ``planned_calls``), its compile-key
pairing (``variants``: each compile key with the first value that reaches it) and its
range, the step reduced to one value and its key (``single``), its share of the plan's
totals, and its (de)serialisation. ``KINDS`` maps a kind to its class: code that
branches on a kind looks it up there. A step is a planner.plan.records.Record; the records
inside steps (requests, variants) are named tuples there. How a reviewer reads a step (its
facts for `warmup diff`, its lines there and in the table) is planner.review.phrasing's.

Kinds, their base, and what runs them (a runner step's ``runner_method``, a backend step's
``family``):

    prefill, decode, cleanup   SchedulerStep   the model runner's ``execute_model``
    sample                     RunnerStep      the model runner's ``sample_tokens``
    cudagraph                  RunnerStep      the model runner's ``capture_cudagraphs``
    gemm, grouped_gemm         GemmLike        a backend's method of the step's ``family``,
    attention, kernel          Keyed           once per value of ``call_values()``
    autotune                   Step            a backend's ``autotune`` (family "autotune")

Keyed steps (gemm, grouped_gemm, attention, kernel) carry ``variants``: one
``Variant(key, first)`` per compile key their calls reach, in order of ``first``, the
first value (an M, an M_sum, a token count, or a runner launch) that reaches the key.
``exact`` says that the calls are exactly those first values (one call per compiled
variant); ``max_value`` is the end of the range the step declares it warms (M, M_sum or
token count; `warmup execute --verify` draws from 1..max_value), where it declares one.
A step whose kernel the dispatch models do not cover has no variants.

Over 400 lines: one frozen record per step kind and the one registry that names them: the vocabulary the
planner and the executor share, read as one table.
"""

from typing import ClassVar

from .records import (CachedRequest, GrammarBitmask, NewRequest, Record, TuneShape, Variant, build,
                      field_names, thaw)


# --- steps --------------------------------------------------------------------------------------------

class Step(Record):
    """Fields every step has: `id` (STAGE/NAME, stable and unique: diffs match by it) and `stage`.

    A step is a frozen record (planner.plan.records): it leaves its optional fields (OMIT) out of its
    plain form when they are unset, and builds its nested records (NESTED) from plain data."""

    id: str
    stage: str

    kind: ClassVar[str] = ""
    family: ClassVar[str | None] = None   # the backend family that runs it; None: the model runner

    def __hash__(self) -> int:
        return hash((self.kind, self.id))

    # --- what runs ---

    def planned_calls(self) -> int:
        """Kernel calls (or runner calls, or graphs) the step makes."""
        return 1

    def value_count(self) -> int:
        """The integers the step holds (plans are bounded in it: planner.limits)."""
        return 0

    def totals(self) -> dict:
        """This step's share of the plan's summary (planner.plan.expanded.summarize)."""
        return {}

    def empty(self) -> str | None:
        """What is missing when the step would do nothing (`warmup check` E108), else None."""
        return None

    # --- (de)serialisation ---

    def to_dict(self) -> dict:
        out = {"id": self.id, "stage": self.stage, "kind": self.kind}
        for name in field_names(type(self))[2:]:
            value = getattr(self, name)
            if not self.omits(name, value):
                out[name] = thaw(value)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Step":
        return build(cls, {k: v for k, v in data.items() if k != "kind"}, cls.NESTED)


# --- the model runner's steps ------------------------------------------------------------------------

class RunnerStep(Step):
    """A step the model runner runs: ``runner_method`` names its method (executor.runner.protocol)."""

    runner_method: ClassVar[str] = ""


class SchedulerStep(RunnerStep):
    """A scheduler step (vLLM's SchedulerOutput), what the runner's ``execute_model`` reads of a
    prefill, a decode or a cleanup. A kind declares again the fields it schedules (required
    unless it gives a default) and writes only those: the others keep these defaults."""

    requests: tuple = ()
    total_num_scheduled_tokens: int = 0
    prompt_token_ids: tuple | None = None     # the prompt of every new request
    num_common_prefix_blocks: tuple | None = None
    finished_req_ids: tuple = ()

    runner_method: ClassVar[str] = "execute_model"
    SCHEDULES: ClassVar[tuple] = ()           # the fields the kind declares again, in field order

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.SCHEDULES = tuple(name for name in cls._fields if name in cls.__annotations__)

    def __init__(self, *args, **kwargs):
        """As Step's; a field the kind does not schedule keeps its default (it would not be written)."""
        super().__init__(*args, **kwargs)
        other = [n for n in self._fields[2:] if n not in self.SCHEDULES and getattr(self, n) != self._defaults[n]]
        if other:
            raise TypeError(f"{type(self).__name__} does not schedule {', '.join(other)}")

    def omits(self, name: str, value) -> bool:
        return name not in self.SCHEDULES or super().omits(name, value)

    def empty(self) -> str | None:
        if not self.requests or self.total_num_scheduled_tokens < 1:
            return "a batch without requests or tokens"
        return None


class Prefill(SchedulerStep):
    """A scheduler step that adds new requests (vLLM's SchedulerOutput.scheduled_new_reqs)."""

    requests: tuple                  # NewRequest
    total_num_scheduled_tokens: int
    prompt_token_ids: tuple          # the prompt of every request
    num_common_prefix_blocks: tuple

    kind: ClassVar[str] = "prefill"
    NESTED: ClassVar[dict] = {"requests": lambda r: build(NewRequest, r)}

    def value_count(self) -> int:
        return len(self.requests) + len(self.prompt_token_ids) + sum(
            len(ids) for r in self.requests for ids in r.block_ids)

    def totals(self) -> dict:
        return {"requests": len(self.requests), "scheduled_tokens": self.total_num_scheduled_tokens}


class Decode(SchedulerStep):
    """A scheduler step of running requests (vLLM's SchedulerOutput.scheduled_cached_reqs)."""

    requests: tuple                  # CachedRequest
    total_num_scheduled_tokens: int
    num_common_prefix_blocks: tuple | None = None

    kind: ClassVar[str] = "decode"
    OMIT: ClassVar[tuple] = ("num_common_prefix_blocks",)
    NESTED: ClassVar[dict] = {"requests": lambda r: build(CachedRequest, r)}

    def value_count(self) -> int:
        return len(self.requests) + sum(len(ids) for r in self.requests for ids in (r.new_block_ids or ()))

    def totals(self) -> dict:
        return {"scheduled_tokens": self.total_num_scheduled_tokens}


class Cleanup(SchedulerStep):
    """Finishes requests: the scheduler step that names them as finished, and nothing else."""

    finished_req_ids: tuple

    kind: ClassVar[str] = "cleanup"

    def value_count(self) -> int:
        return len(self.finished_req_ids)

    def empty(self) -> str | None:
        return None if self.finished_req_ids else "a cleanup that finishes no request"


class Sample(RunnerStep):
    """sample_tokens after the execute step before it: every sampler feature the params use,
    and the grammar bitmask of structured output where the plan asks for it."""

    grammar_bitmask: GrammarBitmask | None
    sampling_params: dict            # of every request of the batch ({}: each keeps its own)
    features: tuple

    kind: ClassVar[str] = "sample"
    runner_method: ClassVar[str] = "sample_tokens"
    NESTED: ClassVar[dict] = {"grammar_bitmask": lambda g: build(GrammarBitmask, g)}

    def value_count(self) -> int:
        return len(self.features)


class CudaGraph(RunnerStep):
    """CUDA-graph capture at the plan's sizes, largest first (graphs share one memory pool)."""

    mode: str
    sizes: tuple
    uniform_decode_sizes: tuple = ()
    decode_query_len: int | None = None
    num_warmups: int | None = None

    kind: ClassVar[str] = "cudagraph"
    runner_method: ClassVar[str] = "capture_cudagraphs"
    OMIT: ClassVar[tuple] = ("decode_query_len", "num_warmups")

    def planned_calls(self) -> int:
        return len(self.sizes) + len(self.uniform_decode_sizes)

    def value_count(self) -> int:
        return self.planned_calls()

    def totals(self) -> dict:
        return {"cudagraph_captures": self.planned_calls()}

    def empty(self) -> str | None:
        return None if self.planned_calls() else "a CUDA-graph capture without sizes"


# --- kernel steps: a backend runs them ----------------------------------------------------------------

class Keyed:
    """A step whose calls compile JIT variants: its compile keys paired with values. The
    fields `variants`, `exact` and `max_value` are declared last by each keyed kind."""

    NESTED: ClassVar[dict] = {"variants": lambda v: build(Variant, v)}

    @property
    def compile_keys(self) -> list[str]:
        return [v.key for v in self.variants]

    def call_values(self) -> list:
        """The values the backend's family method is called with, one per call."""
        raise NotImplementedError

    def single(self, variant: Variant):
        """The step reduced to one call at the variant's first value, paired with its key."""
        raise NotImplementedError

    def planned_calls(self) -> int:
        return len(self.call_values())

    def omits(self, name: str, value) -> bool:
        """A step without variants writes none of its pairing; max_value only where declared."""
        if name in ("variants", "exact"):
            return not self.variants
        return value is None and (name == "max_value" or name in self.OMIT)

    def shape_key(self) -> tuple:
        """What compiles whatever the values: two steps with one shape key share their variants."""
        raise NotImplementedError

    def slug(self) -> str:
        """The shape in a word (`gemm-n4096-k4096`), for reports."""
        return f"{self.kind}-{self.kernel}"

    def value_range(self) -> int:
        """The largest value the step declares it warms: `max_value`, else its largest call."""
        raise NotImplementedError


class GemmLike(Keyed, Step):
    """gemm and grouped_gemm: a weight shape called once per M (or M_sum). ``SHAPE`` names the
    fields of the kind's shape, which its plain form writes first, in that order."""

    kernel: str
    backend: str
    n: int
    k: int
    block_size: tuple | None = None
    layers: tuple = ()
    m_values: tuple = ()
    exact: bool = False
    max_value: int | None = None
    variants: tuple = ()

    SHAPE: ClassVar[tuple] = ("kernel", "backend", "n", "k")
    OMIT: ClassVar[tuple] = ("block_size",)

    def __init_subclass__(cls, **kwargs):
        """A kind's shape fields first, in SHAPE's order: a grouped GEMM's expert fields sit
        among n and k, where its plans have always written them."""
        super().__init_subclass__(**kwargs)
        cls._fields = ("id", "stage", *cls.SHAPE, *(f for f in cls._fields[2:] if f not in cls.SHAPE))

    def call_values(self) -> list:
        return list(self.m_values)

    def single(self, variant: Variant):
        return self.replace(m_values=(variant.first,), variants=(variant,), exact=True)

    def value_count(self) -> int:
        return len(self.m_values) + 2 * len(self.variants)

    def totals(self) -> dict:
        return {"gemm_shapes": 1, "gemm_calls": len(self.m_values)}

    def empty(self) -> str | None:
        return None if self.m_values else "a GEMM without M-values"

    def value_range(self) -> int:
        return self.max_value or max(self.m_values)


class Gemm(GemmLike):
    """One GEMM kernel over one weight shape (A is M x K, the weight N x K), once per M-value."""

    kind: ClassVar[str] = "gemm"
    family: ClassVar[str] = "gemm"

    def shape_key(self) -> tuple:
        return (self.kind, self.kernel, self.n, self.k, self.block_size)

    def slug(self) -> str:
        return f"gemm-n{self.n}-k{self.k}"


class GroupedGemm(GemmLike):
    """A grouped (MoE) GEMM over the contiguous expert-sorted layout, one step per weight
    (w13, w2), once per M_sum (total padded rows, a multiple of `alignment`)."""

    weight: str
    num_groups: int
    top_k: int
    alignment: int = 128

    kind: ClassVar[str] = "grouped_gemm"
    family: ClassVar[str] = "grouped_gemm"
    SHAPE: ClassVar[tuple] = ("kernel", "backend", "weight", "num_groups", "n", "k", "top_k", "alignment")

    def shape_key(self) -> tuple:
        return (self.kind, self.kernel, self.weight, self.num_groups, self.n, self.k, self.alignment)

    def slug(self) -> str:
        return f"grouped_gemm-{self.weight}-e{self.num_groups}-n{self.n}-k{self.k}"


class Attention(Keyed, Step):
    """A direct call of a prefill attention kernel for one layer key, at num_tokens (one sequence)."""

    kernel: str
    backend: str
    num_heads: int
    num_kv_heads: int
    head_size: int
    scale: float
    logits_soft_cap: float
    sliding_window: tuple
    dtype: str
    num_tokens: int
    is_causal: bool = True
    layers: tuple = ()
    exact: bool = False
    max_value: int | None = None
    variants: tuple = ()

    kind: ClassVar[str] = "attention"
    family: ClassVar[str] = "attention"
    LAYER_KEY: ClassVar[tuple] = ("kernel", "num_heads", "num_kv_heads", "head_size", "scale", "logits_soft_cap",
                                  "dtype", "is_causal", "sliding_window")

    def call_values(self) -> list:
        return [[self.num_tokens]]  # one batch of one sequence

    def single(self, variant: Variant) -> "Attention":
        return self.replace(num_tokens=variant.first, variants=(variant,), exact=True)

    def value_count(self) -> int:
        return 1 + 2 * len(self.variants)

    def totals(self) -> dict:
        return {"attention_calls": 1}

    def empty(self) -> str | None:
        return None if self.num_tokens >= 1 else "an attention call without tokens"

    def slug(self) -> str:
        return f"attention-h{self.num_heads}-kv{self.num_kv_heads}-d{self.head_size}"

    def shape_key(self) -> tuple:
        return (self.kind, *(getattr(self, name) for name in self.LAYER_KEY))

    def value_range(self) -> int:
        return self.max_value or self.num_tokens


# Kernels a Kernel step may name besides the reference runner's: kernel -> (module, launch
# class). vLLM 0.25's top-k/top-p sampler kernel is warmed by the vllm_sampler_kernels stage.
LAUNCH_MODELS = {"_topk_topp_kernel": ("kernel_model.vllm_sampler", "TopkToppLaunch"),
                 "fused_moe_kernel": ("kernel_model.vllm_fused_moe", "FusedMoeLaunch"),  # vllm_fused_moe_kernels
                 "flashinfer_jit_module": ("kernel_model.flashinfer_jit", "JitModule")}  # flashinfer_jit


class Kernel(Keyed, Step):
    """Compile-only launches of one Triton kernel, one per compile key: each variant's first
    value is the launch (kernel_model.runner_kernels.Launch for the model runner's kernels,
    the class LAUNCH_MODELS names for vLLM's own)."""

    backend: str
    kernel: str
    exact: bool = True
    max_value: None = None
    variants: tuple = ()

    kind: ClassVar[str] = "kernel"
    family: ClassVar[str] = "kernel"

    def call_values(self) -> list:
        return [v.first for v in self.variants]

    def single(self, variant: Variant) -> "Kernel":
        return self.replace(variants=(variant,))

    def shape_key(self) -> tuple:
        return (self.kind, self.kernel)

    def value_count(self) -> int:
        return len(self.variants)

    @classmethod
    def from_dict(cls, data: dict) -> "Kernel":
        body = {k: v for k, v in data.items() if k not in ("kind", "variants")}
        pairs = [(v["key"], v["first"]) for v in data["variants"]]
        return build(cls, {**body, "variants": cls.launches(data["kernel"], pairs)})

    @staticmethod
    def launches(kernel: str, pairs) -> tuple:
        """Variants from (key, launch spec) pairs, each launch rebuilt by its kernel's model:
        vLLM's own kernels by theirs (LAUNCH_MODELS), the reference runner's by runner_kernels."""
        # Imported here: the kernel models cost `warmup plan` import time (bench/RESULTS.md,
        # part A3), and only plans with kernel steps need one.
        from importlib import import_module

        module, name = LAUNCH_MODELS.get(kernel, ("kernel_model.runner_kernels", "Launch"))
        launch = getattr(import_module(module), name)
        return tuple(Variant(key, launch.from_spec(kernel, spec)) for key, spec in pairs)


class Autotune(Step):
    """One tuning run of a library (FlashInfer) or of the executor's own kernels."""

    library: str
    num_tokens: int
    buckets: tuple | None = None        # the token counts profiled, where the plan models them
    cache: str | None = None            # FlashInfer: persistent | memory
    randomize_inputs: bool | None = None
    shapes: tuple | None = None         # TuneShape: the executor's kernels tune these shapes

    kind: ClassVar[str] = "autotune"
    family: ClassVar[str] = "autotune"
    OMIT: ClassVar[tuple] = ("cache", "randomize_inputs", "shapes")
    NESTED: ClassVar[dict] = {"shapes": lambda s: build(TuneShape, s)}

    @property
    def backend(self) -> str:
        return self.library

    def planned_calls(self) -> int:
        return max(1, len(self.buckets or (1,)) * max(1, len(self.shapes or ())))

    def value_count(self) -> int:
        return len(self.buckets or ()) + len(self.shapes or ())

    def totals(self) -> dict:
        return {"autotune_runs": 1}


KINDS: dict[str, type[Step]] = {cls.kind: cls for cls in (
    Prefill, Sample, Decode, Cleanup, Gemm, GroupedGemm, Autotune, Attention, CudaGraph, Kernel)}

# Backend families, in one place: the kernel families a backend can implement.
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(cls.family for cls in KINDS.values() if cls.family))


def step_from_dict(data: dict) -> Step:
    """A step from its plain form (the expanded plan's, schema-valid)."""
    return KINDS[data["kind"]].from_dict(data)
