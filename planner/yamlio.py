"""The planner's one YAML codec: strict loading that remembers where every value came
from, and one writer for expanded plans and engine configs.

Loading. Plans and engine configs are reviewed by people, so the loader refuses what
YAML allows but a config should not have: duplicate keys, anchors and aliases (the
alias-bomb vector), non-string keys, custom tags, binary garbage, huge files. Every
value keeps its line so that later errors can point at it. PyYAML is imported on the
first load, not with this module: the writer needs only the standard library, and
processes that only write (the executor's workers import planner.output for
write_atomic) do not pay for PyYAML's import.

Writing. `dump` writes by hand rather than through a YAML library: the text must be
byte-stable across library versions, fast (an expanded plan has thousands of
requests) and compact where plans are long. One set of style rules:

* the document and the mappings one level down are written in block style, deeper
  mappings in flow style (``{a: 1, b: [2, 3]}``);
* a list of mappings is a block list ("- " a line) whose items follow the mapping rule
  as the list's own value would: blocks in the document (the steps of a plan), flow
  one level down (the requests of a step, the linear entries of an engine);
* other lists are flow lists, broken over lines where longer than WRAP columns;
* every scalar goes through `yaml_scalar` (strings through `_string`): plain where
  PyYAML (YAML 1.1) reads it back as the same value and type, else double-quoted.

Mappings are dicts and lists are lists, by exact type (the writer runs once per value
of a long plan, so it tests exact types first); any other value is written as a scalar.

Two options: `compress=True` writes integer runs compressed (below); `indent_lists`
says whether a block list is indented under its key. Expanded plans have always been
written with their lists flush with the key (``steps:`` then ``- id: ...``) and engine
configs with them indented by two; both kinds of file are checked in (golden plans,
plans/engines), so the option keeps them byte for byte.

Compression (lossless, documented in schemas/expanded-plan.schema.json): inside a list
of integers, a run of MIN_RUN or more values with a constant step is written as the
string "a..b" (step 1) or "a..b/s" (step s). `expand_runs` and `decompress` undo it.

Over 400 lines: the planner's one YAML codec, its loader and its writer in one module, so that what the one
writes the other reads (compressed runs, float and string forms).
"""

from __future__ import annotations

import json
import math
import os
import re
from contextlib import contextmanager
from functools import lru_cache
from typing import NamedTuple

from .errors import PlanError, format_path
from .limits import MAX_TOTAL_VALUES, MAX_VALUES_PER_LIST

MAX_FILE_BYTES = 1 << 20  # plans, engine configs and config.json files are small; refuse anything bigger
# Expanded plans are written by `warmup plan`, which refuses to write a bigger one. The largest the
# built-in plans make within the engine schema's bounds measured 15 MiB (YAML) and 23 MiB (JSON):
# the `vllm` plan at max_num_batched_tokens = max_model_len = num_blocks = 2^24, max_num_seqs 2^16.
# Reading 32 MiB of YAML takes about a minute and 2 GiB (PyYAML); JSON is read by `json` in seconds.
MAX_EXPANDED_PLAN_BYTES = 32 << 20
_EXPANDED_HEAD = re.compile(rb'(?:#[^\n]*\n|\s)*(?:format: *"?warmup-expanded-plan/|\{"format": *"warmup-expanded-plan/)')
MAX_DEPTH = 64

_SCALAR_TAGS = {
    "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null",
}


class Document(NamedTuple):
    """A loaded YAML file: plain data plus the line of every path in it."""

    data: object
    file: str
    lines: dict | None = None  # path tuple -> 1-based line (None: none known)

    def line(self, path: tuple) -> int | None:
        """Line of `path`, or of its nearest ancestor that has one."""
        lines = self.lines or {}
        while path:
            if path in lines:
                return lines[path]
            path = path[:-1]
        return lines.get(())

    def error(self, path: tuple, message: str) -> PlanError:
        return PlanError(message, file=self.file, line=self.line(path), path=format_path(path))


def read_bytes(path: str, expected: str, limit: int = -1) -> bytes:
    """The file's bytes (at most `limit`), with one-line errors for a missing file, a directory
    (`expected` says what the file should have been) and a failed read."""
    with open_input(path, expected) as f:
        return f.read(limit)


@contextmanager
def open_input(path: str, expected: str):
    """The file open for reading (binary, buffered: a reader that streams it, such as the server
    logs', reads a line at a time), with read_bytes's one-line errors, a read that fails midway
    included."""
    if not os.path.exists(path):
        raise PlanError("no such file", file=path)
    if os.path.isdir(path):
        raise PlanError(f"is a directory, expected {expected}", file=path)
    try:
        with open(path, "rb") as f:
            yield f
    except PlanError:  # the reader's own (an OSError too where it is a WriteError)
        raise
    except OSError as e:  # opening, or a read that fails midway (EIO)
        raise PlanError(f"cannot read: {e.strerror or e}", file=path) from None


def read_text(path: str) -> str:
    """Read a config file as UTF-8 text, with one-line errors for every way that fails.

    Hand-written inputs (plans, engine configs, HF config.json) are refused over
    MAX_FILE_BYTES; expanded plans, recognised by their first line, over
    MAX_EXPANDED_PLAN_BYTES, which `warmup plan` also refuses to write (check_plan_size).
    """
    raw = read_bytes(path, "a YAML file", MAX_EXPANDED_PLAN_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        limit, what = ((MAX_EXPANDED_PLAN_BYTES, "expanded plans") if _EXPANDED_HEAD.match(raw, 0, 4096)
                       else (MAX_FILE_BYTES, "plans, engine configs and config.json files"))
        if len(raw) > limit:  # (reading stops past the larger limit: the true size may be more)
            size = "the file" if len(raw) > MAX_EXPANDED_PLAN_BYTES else _size(len(raw))
            raise PlanError(f"{size} is over the {_size(limit)} limit for {what}", file=path)
    if b"\0" in raw:
        raise PlanError("binary data (NUL byte), expected YAML text", file=path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlanError(f"not UTF-8 text (byte {e.start})", file=path) from None


def check_plan_size(text: str, file: str) -> None:
    """`warmup plan` writes no expanded plan that `check`, `diff`, `validate` and `execute` would
    refuse to read (read_text): one over MAX_EXPANDED_PLAN_BYTES is refused here instead."""
    size = len(text.encode("utf-8"))
    if size > MAX_EXPANDED_PLAN_BYTES:
        raise PlanError(f"the expanded plan would be {_size(size)}, over the {_size(MAX_EXPANDED_PLAN_BYTES)} "
                        "limit for expanded plans that `warmup check`, `diff`, `validate` and `execute` read; "
                        "plan fewer values (mode: relax or exact, fewer tokens or requests)", file=file)


def _size(count: int) -> str:
    """'1.5 MiB', '32 MiB'."""
    return f"{count / 2 ** 20:.1f} MiB".replace(".0 MiB", " MiB")


def load_file(path: str) -> Document:
    return load_text(read_text(path), path)


def _pyyaml():
    """PyYAML and its fastest safe loader (imported here: see the module docstring)."""
    import yaml

    try:  # libyaml's C parser when this PyYAML build has it; fall back to pure Python
        return yaml, yaml.CSafeLoader
    except AttributeError:  # pragma: no cover - depends on the pyyaml build
        return yaml, yaml.SafeLoader


def load_text(text: str, file: str) -> Document:
    if text.startswith(_JSON_PLAN_HEAD):
        return _load_json_plan(text, file)
    yaml, loader = _pyyaml()
    try:
        node = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise PlanError(f"invalid YAML: {e.problem or e.context}", file=file, line=line) from None
    except yaml.YAMLError as e:
        raise PlanError(f"invalid YAML: {e}", file=file) from None
    if node is None:
        raise PlanError("empty file, expected a YAML mapping", file=file, line=1)
    doc = Document(data=None, file=file, lines={})  # the builder records the lines as it goes
    return doc._replace(data=_Builder(doc, yaml).build(node, (), 0))


# What `warmup plan -f json` writes first: such a file is one line of JSON, read by `json` (a
# 23 MiB plan in under a second, where PyYAML takes a minute); line numbers would all be 1 anyway.
_JSON_PLAN_HEAD = '{"format":"warmup-expanded-plan/'


def _load_json_plan(text: str, file: str) -> Document:
    """An expanded plan in JSON, held to the YAML loader's rules: no duplicate keys, no NaN."""
    return Document(data=load_json(text, file, unique_keys=True), file=file, lines={(): 1})


def load_json(text: str, file: str, *, unique_keys: bool = False):
    """JSON text (an expanded plan, a Hugging Face config.json) as data, with one-line errors
    and the YAML loader's rule for numbers: NaN and the infinities, which Python's json reads
    (NaN, Infinity, 1e999), are refused at their line and path (see _non_finite)."""
    odd: list = []  # the non-finite numbers met, as _NonFinite placeholders
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys if unique_keys else None,
                          parse_constant=lambda token: _placeholder(token, odd),
                          parse_float=lambda token: _finite_float(token, odd))
    except json.JSONDecodeError as e:
        raise PlanError(f"invalid JSON: {e.msg}", file=file, line=e.lineno) from None
    except (ValueError, RecursionError) as e:  # a duplicate key, a 5000-digit integer, deep nesting
        message = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise PlanError(f"invalid JSON: {message}", file=file, line=1) from None
    if odd:  # a duplicate key may have dropped it; what is left is refused
        path = _path_of_placeholder(data, ())
        if path is not None:
            token = _at_path(data, path).token
            raise PlanError(_non_finite(token), file=file, line=_json_number_line(text), path=format_path(path))
    return data


def _unique_keys(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        keys = [k for k, _ in pairs]
        raise ValueError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
    return out


def _non_finite(token: str) -> str:
    """The one message for a NaN or an infinity read from a file (YAML or JSON)."""
    return f"{token} is not a finite number: NaN and infinities are refused"


class _NonFinite(NamedTuple):
    """Where the JSON parser met NaN or an infinity: kept, to be found with its path."""

    token: str


def _placeholder(token: str, odd: list) -> _NonFinite:
    odd.append(token)
    return _NonFinite(token)


def _finite_float(token: str, odd: list):
    value = float(token)
    return value if math.isfinite(value) else _placeholder(token, odd)


def _path_of_placeholder(value, path: tuple) -> tuple | None:
    """The path of the first _NonFinite in `value`, in document order (dicts keep it)."""
    if isinstance(value, _NonFinite):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _path_of_placeholder(item, path + (key,))
        if found is not None:
            return found
    return None


def _at_path(value, path: tuple):
    for key in path:
        value = value[key]
    return value


# A JSON string (skipped) or number: the first non-finite number is the one the parser met first.
_JSON_NUMBER = re.compile(r'"(?:[^"\\]|\\.)*"|(-?(?:Infinity|NaN)|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)')


def _json_number_line(text: str) -> int | None:
    """The line of the first NaN or infinity in valid JSON text (json keeps no positions)."""
    for found in _JSON_NUMBER.finditer(text):
        token = found[1]
        if token is not None and not math.isfinite(float(token)):
            return text.count("\n", 0, found.start()) + 1
    return None


class _Builder:
    """Turns a composed node tree into plain data, recording lines, refusing aliases."""

    def __init__(self, doc: Document, yaml):
        self.doc = doc
        self.yaml = yaml
        self.seen: set[int] = set()
        self.constructor = yaml.SafeLoader("")

    def fail(self, node, path, message):
        raise PlanError(message, file=self.doc.file, line=node.start_mark.line + 1, path=format_path(path))

    def build(self, node, path: tuple, depth: int):
        if id(node) in self.seen:
            self.fail(node, path, "YAML anchors and aliases are not allowed")
        self.seen.add(id(node))
        if depth > MAX_DEPTH:
            self.fail(node, path, f"nested deeper than {MAX_DEPTH} levels")
        self.doc.lines[path] = node.start_mark.line + 1
        if isinstance(node, self.yaml.MappingNode):
            return self.mapping(node, path, depth)
        if isinstance(node, self.yaml.SequenceNode):
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        return self.scalar(node, path)

    def mapping(self, node, path, depth):
        out: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.fail(key_node, path, "YAML merge keys (<<) are not allowed")
            key = self.scalar(key_node, path) if isinstance(key_node, self.yaml.ScalarNode) else None
            if not isinstance(key, str):
                self.fail(key_node, path, f"keys must be strings, got {key!r}")
            if key in out:
                self.fail(key_node, path + (key,), f"duplicate key {key!r}")
            out[key] = self.build(value_node, path + (key,), depth + 1)
            self.doc.lines[path + (key,)] = key_node.start_mark.line + 1
        return out

    def scalar(self, node, path):
        if node.tag not in _SCALAR_TAGS:
            self.fail(node, path, f"unsupported YAML tag {node.tag!r}")
        try:
            value = self.constructor.construct_object(node)
        except self.yaml.YAMLError as e:
            self.fail(node, path, f"bad value: {getattr(e, 'problem', e)}")
        # Every number of every file passes here: a NaN or an infinity (.nan, .inf, 1.0e999) would
        # pass the schema's bounds (NaN compares false with them) and end in a plan JSON refuses.
        if type(value) is float and not math.isfinite(value):
            self.fail(node, path, _non_finite(node.value))
        return value


# --- writing -----------------------------------------------------------------------

WRAP = 100     # columns: a longer flow list is broken over lines
MIN_RUN = 4    # the shortest integer run that compression writes as "a..b"
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "~"}  # what PyYAML reads as non-strings
_INT = {int}  # exact type: bools are ints too, but not M-values
_RUN = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:/(\d+))?$")


def dump(data: dict, *, compress: bool = False, header: str | None = None, indent_lists: bool = True) -> str:
    """`data` as YAML text, by the style rules of the module docstring.

    compress: write integer runs as "a..b" / "a..b/s" (expanded plans).
    header: comment lines ("# ...", each ending with a newline) written first.
    indent_lists: indent block lists under their key (engine configs) rather than
    writing them flush with it (expanded plans).
    """
    lines = header.splitlines() if header else []
    flow = _flow_compressed if compress else _flow
    _block_mapping(data, "", "", 1, flow, "  " if indent_lists else "", lines)
    return "\n".join(lines) + "\n"


def _block_mapping(mapping: dict, first: str, pad: str, level: int, flow, list_pad: str, lines: list) -> None:
    """One "key: value" line per key at `pad`; the first line starts with `first` ("- " in a list).

    `level` counts mappings from the document down (the document is level 1): a mapping
    value one level below is a block, deeper ones are flow.
    """
    for key, value in mapping.items():
        head = f"{first}{yaml_scalar(key)}:"
        first = pad
        kind = type(value)
        if kind is dict and value and level < 2:
            lines.append(head)
            _block_mapping(value, pad + "  ", pad + "  ", level + 1, flow, list_pad, lines)
        elif kind is list and value and type(value[0]) is dict:
            lines.append(head)
            _block_list(value, pad + list_pad, level + 1, flow, list_pad, lines)
        else:
            lines.append(f"{head} {flow(value, len(head) + 1)}")


def _block_list(items, pad: str, level: int, flow, list_pad: str, lines: list) -> None:
    """One "- item" per item at `pad`; mappings at level 2 are blocks, deeper ones flow."""
    column = len(pad) + 2
    if level > 2:  # every item is one flow line: the requests of a plan, thousands of them
        lines.extend([f"{pad}- {flow(item, column)}" for item in items])
        return
    for item in items:
        if type(item) is dict and item:
            _block_mapping(item, pad + "- ", pad + "  ", level, flow, list_pad, lines)
        else:
            lines.append(f"{pad}- {flow(item, column)}")


def _flow_writer(compress: bool):
    """The flow-style writer: flow(value, indent) -> text, where indent is the column
    the text starts at (a wrapped list continues there).

    Made twice, with and without compression, rather than passing the flag down every
    call: this is the hot path of `warmup plan` (once per value of a long plan), hence
    also the exact-type tests first and the integers written inline.
    """
    def flow(value, indent: int) -> str:
        kind = type(value)
        if kind is int:
            return str(value)
        if kind is dict:
            # Integers inline: a long plan is mostly request mappings of small integers.
            return "{" + ", ".join([f"{_string(k)}: {v}" if type(v) is int else f"{_string(k)}: {flow(v, indent)}"
                                    for k, v in value.items()]) + "}"
        if kind is list:
            # the type test runs in C (full M-value lists are long); the length test first
            # skips it for the many short lists
            if len(value) >= MIN_RUN and compress and set(map(type, value)) == _INT:
                value = compress_runs(value)
            items = [str(v) if type(v) is int else flow(v, indent) for v in value]
            text = "[" + ", ".join(items) + "]"
            return text if len(text) + indent <= WRAP else _wrap(items, indent)
        if kind is str:
            return _string(value)
        return yaml_scalar(value)
    return flow


_flow = _flow_writer(compress=False)
_flow_compressed = _flow_writer(compress=True)


def _wrap(items: list[str], indent: int) -> str:
    """A flow list too long for one line, broken so that long M-value lists diff line by line."""
    lines, current = [], "["
    for item in items:
        if len(current) + len(item) + indent > WRAP and current != "[":
            lines.append(current.rstrip())
            current = ""
        current += item + ", "
    lines.append(current[:-2] + "]")
    return ("\n" + " " * indent).join(lines)


def yaml_scalar(value) -> str:
    """One YAML scalar that PyYAML (YAML 1.1) reads back as the same value and type."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    return _string(str(value))


@lru_cache(maxsize=4096)
def _string(text: str) -> str:
    """A string scalar, plain when YAML reads it back as the same string, else double-quoted."""
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    return json.dumps(text)


def _float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    if "e" in text and "." not in text.split("e")[0]:  # YAML 1.1 floats need a dot
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


# --- integer runs ------------------------------------------------------------------

def compress_runs(values: list[int]) -> list:
    n = len(values)
    if n >= MIN_RUN and values[1] > values[0]:  # fast path: the whole list is one run (full M-values)
        stride = values[1] - values[0]
        if values[-1] - values[0] == stride * (n - 1) and values == list(range(values[0], values[-1] + 1, stride)):
            return [f"{values[0]}..{values[-1]}" + ("" if stride == 1 else f"/{stride}")]
    out, i = [], 0
    while i < n:
        j = i
        if i + 1 < n and values[i + 1] > values[i]:
            stride = values[i + 1] - values[i]
            while j + 1 < n and values[j + 1] - values[j] == stride:
                j += 1
            if j - i + 1 >= MIN_RUN:
                out.append(f"{values[i]}..{values[j]}" + ("" if stride == 1 else f"/{stride}"))
                i = j + 1
                continue
        out.append(values[i])
        i += 1
    return out


def expand_runs(items: list, path: tuple = (), budget: list | None = None) -> list:
    """Inverse of compress_runs; other strings are left alone.

    A run is measured from its endpoints before it is expanded: a list longer than
    MAX_VALUES_PER_LIST, or runs adding up past `budget[0]` values (decompress passes the
    plan's MAX_TOTAL_VALUES), raise RunError; so does a run the writer never writes (step 0,
    an end before the start, or an end the step does not reach). A 20-byte string such as
    "1..99999999999999" would otherwise be built in full.
    """
    budget = [MAX_TOTAL_VALUES] if budget is None else budget
    out: list = []
    for item in items:
        m = _RUN.match(item) if isinstance(item, str) else None
        if not m:
            out.append(item)
            continue
        start, stop, stride = int(m[1]), int(m[2]), int(m[3] or 1)
        if stride < 1 or stop < start or (stop - start) % stride:
            raise RunError(path, f"run {item!r}: expected a..b or a..b/s with a <= b, s >= 1 and b - a "
                                 "a multiple of s")
        count = (stop - start) // stride + 1
        _check_run_length(item, count, len(out), path, budget)
        budget[0] -= count
        out.extend(range(start, stop + 1, stride))
    if len(out) > MAX_VALUES_PER_LIST:
        raise RunError(path, f"a list of {len(out):,} values, more than the limit of {MAX_VALUES_PER_LIST:,} "
                             "(planner/limits.py)")
    return out


def _check_run_length(item: str, count: int, before: int, path: tuple, budget: list) -> None:
    if before + count > MAX_VALUES_PER_LIST:
        raise RunError(path, f"run {item!r} makes a list of {before + count:,} values, more than the limit of "
                             f"{MAX_VALUES_PER_LIST:,} (planner/limits.py)")
    if count > budget[0]:
        raise RunError(path, f"run {item!r} takes the plan past {MAX_TOTAL_VALUES:,} values in runs, the limit "
                             "of a whole plan (planner/limits.py)")


class RunError(ValueError):
    """A compressed run or a list over the bounds of planner/limits.py, at a path of the document."""

    def __init__(self, path: tuple, message: str):
        super().__init__(message)
        self.path, self.message = path, message


def decompress(value, path: tuple = (), budget: list | None = None):
    """Undo compression everywhere in a loaded YAML plan (bounded: see expand_runs)."""
    budget = [MAX_TOTAL_VALUES] if budget is None else budget
    if len(path) > MAX_DEPTH:  # a JSON plan was not built by the YAML loader, which checks this
        raise RunError(path, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        return {k: decompress(v, path + (k,), budget) for k, v in value.items()}
    if isinstance(value, list):
        return [decompress(v, path + (i,), budget) for i, v in enumerate(expand_runs(value, path, budget))]
    return value
