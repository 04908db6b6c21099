"""The step model: one typed, frozen record per step kind, shared by planner and executor.

A step is what crosses from the planner to the executor (and to a model runner): the
stage handlers build these records, the renderers, `warmup diff` and the lints read
them, and the executor runs them. Each kind owns what its consumers would otherwise
re-derive from a dict: its calls (``call_values``, ``planned_calls``), its compile-key
pairing (``variants``: each compile key with the first value that reaches it) and its
range, the step reduced to one value and its key (``single``), its share of the plan's
totals, and its (de)serialisation. ``KINDS`` maps a kind to its class: code that
branches on a kind looks it up there. How a reviewer reads a step (its facts for `warmup
diff`, its lines there and in the table) is planner.review.phrasing's, by step class.

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
"""

from typing import Any, ClassVar, NamedTuple


# --- (de)serialisation --------------------------------------------------------------------------------

_SCALARS = (int, str, float, bool)
_MISSING = object()


class FrozenStepError(AttributeError):
    """A step's fields cannot be assigned or deleted: planner, executor and runner share it."""


def field_names(cls) -> tuple:
    """A step kind's fields, in declaration (and output) order: the base's first."""
    return cls._fields


def _is_classvar(annotation) -> bool:
    return annotation is ClassVar or getattr(annotation, "__origin__", None) is ClassVar


def thaw(value):
    """Plain data (lists, dicts, scalars) of a record, a tuple or a value."""
    kind = type(value)
    if kind is tuple or kind is list:
        if not value or type(value[0]) in _SCALARS:  # M-values, block ids, keys: a flat list
            return list(value)
        if hasattr(value[0], "OMIT"):  # records of one type (a batch's requests): thousands
            return [v.to_dict() for v in value]
        return [thaw(v) for v in value]
    if kind is dict:
        return {k: thaw(v) for k, v in value.items()}
    if hasattr(value, "to_dict"):  # a record
        return value.to_dict()
    if hasattr(value, "spec"):  # a kernel launch (runner_kernels.Launch, vllm_sampler.TopkToppLaunch)
        return value.spec()
    return value


def freeze(value):
    """Immutable form of plain data: lists become tuples (dicts keep their keys)."""
    kind = type(value)
    if kind is list or kind is tuple:
        return tuple(freeze(v) for v in value)
    if kind is dict:
        return {k: freeze(v) for k, v in value.items()}
    return value


def build(cls, data: dict, nested: dict | None = None):
    """A record of `cls` from plain data: nested records per field (`nested`), the rest frozen."""
    nested = nested or {}
    fields = {}
    for name, value in data.items():
        if name in nested and value is not None:
            make = nested[name]
            fields[name] = tuple(make(v) for v in value) if isinstance(value, (list, tuple)) else make(value)
        else:
            fields[name] = freeze(value)
    return cls(**fields)


def plain(record) -> dict:
    """A small record's fields as plain data, without the optional ones left unset."""
    return {name: thaw(value) for name, value in zip(record._fields, record)
            if value is not None or name not in record.OMIT}


# --- records inside steps: small, numerous, immutable (named tuples: cheap to declare and build) ---------

class NewRequest(NamedTuple):
    """A request a prefill step adds (vLLM's NewRequestData): its tokens and block ids per
    KV-cache group. Serving traces give each its own prompt and sampling params."""

    req_id: str
    num_scheduled_tokens: int
    block_ids: tuple            # one tuple of block ids per KV-cache group
    prompt_token_ids: tuple | None = None
    sampling_params: dict | None = None

    OMIT = ("prompt_token_ids", "sampling_params")  # written only when set

    def to_dict(self) -> dict:  # by hand: a prefill holds thousands of these
        out = {"req_id": self.req_id, "num_scheduled_tokens": self.num_scheduled_tokens,
               "block_ids": [list(ids) for ids in self.block_ids]}
        return out if self.prompt_token_ids is None and self.sampling_params is None else {**out, **plain(self)}


class CachedRequest(NamedTuple):
    """A running request a decode step continues (vLLM's CachedRequestData, one request)."""

    req_id: str
    num_computed_tokens: int
    num_scheduled_tokens: int
    num_spec_tokens: int
    num_output_tokens: int | None = None
    new_block_ids: tuple | None = None  # one tuple per KV-cache group, or None: no new block

    OMIT = ("num_output_tokens",)

    def to_dict(self) -> dict:  # by hand: a decode holds thousands of these
        new = self.new_block_ids
        out = {"req_id": self.req_id, "num_computed_tokens": self.num_computed_tokens,
               "num_scheduled_tokens": self.num_scheduled_tokens, "num_spec_tokens": self.num_spec_tokens}
        if self.num_output_tokens is not None:
            out["num_output_tokens"] = self.num_output_tokens
        out["new_block_ids"] = None if new is None else [list(ids) for ids in new]
        return out


class GrammarBitmask(NamedTuple):
    """The structured-output bitmask of a sample step: num_rows x width int32 words."""

    num_rows: int
    width: int
    fill: int | None = None
    req_ids: tuple | None = None  # the request of each row (serving traces); None: the batch's first rows

    OMIT = ("fill", "req_ids")
    to_dict = plain


class TuneShape(NamedTuple):
    """One GEMM shape an autotune step tunes."""

    kernel: str
    n: int
    k: int

    OMIT = ()
    to_dict = plain


class Variant(NamedTuple):
    """One compile key of a step and the first value that reaches it: an M (gemm), an M_sum
    (grouped_gemm), a token count (attention) or a launch of a runner kernel (kernel)."""

    key: str
    first: Any

    OMIT = ()
    to_dict = plain


# --- steps --------------------------------------------------------------------------------------------

class Step:
    """Fields every step has: `id` (STAGE/NAME, stable and unique: diffs match by it) and `stage`.

    A step keeps the lists and dicts it is given in frozen form (so that a step built by a
    planner stage equals the same step read from a file) and leaves its optional fields
    (OMIT) out of its plain form when they are unset."""

    id: str
    stage: str

    kind: ClassVar[str] = ""
    _fields: ClassVar[tuple] = ("id", "stage")
    _defaults: ClassVar[dict] = {}
    family: ClassVar[str | None] = None   # the backend family that runs it; None: the model runner
    OMIT: ClassVar[tuple] = ()            # fields written only when set (not None)
    NESTED: ClassVar[dict] = {}           # field -> how to build its records from plain data

    def __init_subclass__(cls, **kwargs):
        """A kind's fields: its annotations (not ClassVar) after its bases', with their defaults;
        a field declared again keeps its place and takes the new default, or none (required).

        Declared by hand, not with dataclasses: generating each kind's methods cost `warmup
        plan` measurable start-up (bench/RESULTS.md, part A4); every kind shares Step's."""
        super().__init_subclass__(**kwargs)
        own = {name: cls.__dict__.get(name, _MISSING)
               for name, annotation in cls.__annotations__.items()  # its own (Python >= 3.10)
               if not _is_classvar(annotation)}
        cls._fields = tuple(dict.fromkeys(cls._fields + tuple(own)))
        inherited = {n: d for n, d in cls._defaults.items() if n not in own}  # declared again: its own default
        cls._defaults = {**inherited, **{n: d for n, d in own.items() if d is not _MISSING}}

    def __init__(self, *args, **kwargs):
        names = type(self)._fields
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes at most {len(names)} fields, got {len(args)}")
        values = dict(zip(names, args))
        for name, value in kwargs.items():
            if name not in names or name in values:
                raise TypeError(f"{type(self).__name__}: unexpected or repeated field {name!r}")
            values[name] = value
        for name in names:
            value = values[name] if name in values else self._default(name)
            if type(value) is list or type(value) is dict:
                value = freeze(value)
            object.__setattr__(self, name, value)

    def _default(self, name: str):
        default = self._defaults.get(name, _MISSING)
        if default is _MISSING:
            raise TypeError(f"{type(self).__name__} needs the field {name!r}")
        return default

    def __setattr__(self, name, value):
        raise FrozenStepError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise FrozenStepError(f"cannot delete field {name!r}")

    def __reduce__(self):  # pickled to precompile workers: rebuilt through __init__
        return type(self), tuple(getattr(self, name) for name in field_names(type(self)))

    def omits(self, name: str, value) -> bool:
        return value is None and name in self.OMIT

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and all(
            getattr(self, name) == getattr(other, name) for name in field_names(type(self)))

    def __hash__(self) -> int:
        return hash((self.kind, self.id))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in field_names(type(self)))
        return f"{type(self).__name__}({fields})"

    # --- what runs ---

    def planned_calls(self) -> int:
        """Kernel calls (or runner calls, or graphs) the step makes."""
        return 1

    def value_count(self) -> int:
        """The integers the step holds (plans are bounded in it: planner.limits)."""
        return 0

    def totals(self) -> dict:
        """This step's share of the plan's summary (planner.expanded.summarize)."""
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

    def replace(self, **changes) -> "Step":
        return type(self)(**{**{name: getattr(self, name) for name in self._fields}, **changes})


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
LAUNCH_MODELS = {"_topk_topp_kernel": ("kernel_model.vllm_sampler", "TopkToppLaunch")}


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
