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
"""

from __future__ import annotations

import json
import math
import os
import re
from functools import lru_cache
from typing import NamedTuple

from .errors import PlanError, format_path

MAX_FILE_BYTES = 1 << 20  # plans and engine configs are small; refuse anything bigger
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


def read_text(path: str) -> str:
    """Read a config file as UTF-8 text, with one-line errors for every way that fails."""
    if not os.path.exists(path):
        raise PlanError("no such file", file=path)
    if os.path.isdir(path):
        raise PlanError("is a directory, expected a YAML file", file=path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise PlanError(f"cannot read: {e.strerror}", file=path) from None
    if len(raw) > MAX_FILE_BYTES:
        raise PlanError(f"file is larger than {MAX_FILE_BYTES} bytes; not a plan or engine config", file=path)
    if b"\0" in raw:
        raise PlanError("binary data (NUL byte), expected YAML text", file=path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlanError(f"not UTF-8 text (byte {e.start})", file=path) from None


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
            return self.constructor.construct_object(node)
        except self.yaml.YAMLError as e:
            self.fail(node, path, f"bad value: {getattr(e, 'problem', e)}")


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


def expand_runs(items: list) -> list:
    """Inverse of compress_runs; other strings are left alone."""
    out: list = []
    for item in items:
        m = _RUN.match(item) if isinstance(item, str) else None
        if m:
            start, stop, stride = int(m[1]), int(m[2]), int(m[3] or 1)
            out.extend(range(start, stop + 1, stride))
        else:
            out.append(item)
    return out


def decompress(value):
    """Undo compression everywhere in a loaded YAML plan."""
    if isinstance(value, dict):
        return {k: decompress(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decompress(v) for v in expand_runs(value)]
    return value
