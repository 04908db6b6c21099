"""The step model's records, in the two idioms `warmup plan` can afford (planner/__init__.py).

``Record``: a frozen record with declared fields, made by hand, which every step kind
(planner.plan.steps) is. A subclass declares its fields as annotations (``ClassVar`` ones excluded)
after its bases', with their defaults; instances are immutable, equal when their fields are,
printable, picklable, and copied with ``replace``. Not a dataclass: generating each kind's
methods, and importing ``dataclasses`` at all, is a measurable part of `warmup plan`'s start-up
(bench/RESULTS.md, parts A3 and A4); every kind shares these methods instead.

Named tuples: the small records inside steps (a batch's requests, a step's variants), which a
plan holds by the thousand and which are cheap to declare and build.

``thaw``, ``freeze``, ``build`` and ``plain`` carry both to plain data (lists, dicts, scalars)
and back.
"""

from typing import Any, ClassVar, NamedTuple

_SCALARS = (int, str, float, bool)
_MISSING = object()


class FrozenStepError(AttributeError):
    """A step's fields cannot be assigned or deleted: planner, executor and runner share it."""


def field_names(cls) -> tuple:
    """A record kind's fields, in declaration (and output) order: the base's first."""
    return cls._fields


def _is_classvar(annotation) -> bool:
    return annotation is ClassVar or getattr(annotation, "__origin__", None) is ClassVar


class Record:
    """A frozen record. It keeps the lists and dicts it is given in frozen form (so that a record
    built in code equals the same record read from a file)."""

    _fields: ClassVar[tuple] = ()
    _defaults: ClassVar[dict] = {}
    OMIT: ClassVar[tuple] = ()            # fields written only when set (not None)
    NESTED: ClassVar[dict] = {}           # field -> how to build its records from plain data

    def __init_subclass__(cls, **kwargs):
        """A kind's fields: its annotations (not ClassVar) after its bases', with their defaults;
        a field declared again keeps its place and takes the new default, or none (required)."""
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

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and all(
            getattr(self, name) == getattr(other, name) for name in field_names(type(self)))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in field_names(type(self)))
        return f"{type(self).__name__}({fields})"

    def omits(self, name: str, value) -> bool:
        """Whether the plain form leaves the field out: an optional one (OMIT) left unset."""
        return value is None and name in self.OMIT

    def replace(self, **changes):
        """A copy with `changes` (field -> value): records are never changed in place."""
        return type(self)(**{**{name: getattr(self, name) for name in self._fields}, **changes})


# --- plain data ----------------------------------------------------------------------------------------

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
    """A small record's fields as plain data (a named tuple's), without the optional ones left unset."""
    return {name: thaw(value) for name, value in zip(record._fields, record)
            if value is not None or name not in record.OMIT}


# --- records inside steps: small, numerous, immutable (named tuples: cheap to declare and build) ---------

class NewRequest(NamedTuple):
    """A request a prefill step adds (vLLM's NewRequestData): its tokens and block ids per
    KV-cache group. Serving traces give each its own prompt and sampling params.

    ``num_computed_tokens``: the prompt tokens whose KV the request already holds when it is
    added, a prefix-cache hit (vLLM's scheduler sets NewRequestData.num_computed_tokens to the
    hit, whole blocks, and block_ids starts with the cached blocks). Its num_scheduled_tokens
    count from there; a prompt longer than both is a chunked prefill that continues as a
    CachedRequest."""

    req_id: str
    num_scheduled_tokens: int
    block_ids: tuple            # one tuple of block ids per KV-cache group
    prompt_token_ids: tuple | None = None
    sampling_params: dict | None = None
    num_computed_tokens: int = 0

    OMIT = ("prompt_token_ids", "sampling_params")  # written only when set; num_computed_tokens when > 0

    def to_dict(self) -> dict:  # by hand: a prefill holds thousands of these
        out = {"req_id": self.req_id, "num_scheduled_tokens": self.num_scheduled_tokens,
               "block_ids": [list(ids) for ids in self.block_ids]}
        if self.num_computed_tokens:
            out["num_computed_tokens"] = self.num_computed_tokens
        if self.prompt_token_ids is not None:
            out["prompt_token_ids"] = list(self.prompt_token_ids)
        if self.sampling_params is not None:
            out["sampling_params"] = thaw(self.sampling_params)
        return out


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
