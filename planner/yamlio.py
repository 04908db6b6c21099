"""Strict YAML loading that remembers where every value came from.

Plans and engine configs are reviewed by people, so the loader refuses what YAML
allows but a config should not have: duplicate keys, anchors and aliases (the
alias-bomb vector), non-string keys, custom tags, binary garbage, huge files.
Every value keeps its line so that later errors can point at it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import yaml

from .errors import PlanError, format_path

MAX_FILE_BYTES = 1 << 20  # plans and engine configs are small; refuse anything bigger
MAX_DEPTH = 64

try:  # libyaml's parser is several times faster; fall back to pure Python
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the pyyaml build
    _Loader = yaml.SafeLoader

_SCALAR_TAGS = {
    "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null",
}


@dataclass
class Document:
    """A loaded YAML file: plain data plus the line of every path in it."""

    data: object
    file: str
    lines: dict = field(default_factory=dict)  # path tuple -> 1-based line

    def line(self, path: tuple) -> int | None:
        """Line of `path`, or of its nearest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

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


def load_text(text: str, file: str) -> Document:
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise PlanError(f"invalid YAML: {e.problem or e.context}", file=file, line=line) from None
    except yaml.YAMLError as e:
        raise PlanError(f"invalid YAML: {e}", file=file) from None
    doc = Document(data=None, file=file)
    if node is None:
        raise PlanError("empty file, expected a YAML mapping", file=file, line=1)
    doc.data = _Builder(doc).build(node, (), 0)
    return doc


class _Builder:
    """Turns a composed node tree into plain data, recording lines, refusing aliases."""

    def __init__(self, doc: Document):
        self.doc = doc
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
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        return self.scalar(node, path)

    def mapping(self, node, path, depth):
        out: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.fail(key_node, path, "YAML merge keys (<<) are not allowed")
            key = self.scalar(key_node, path) if isinstance(key_node, yaml.ScalarNode) else None
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
        except yaml.YAMLError as e:
            self.fail(node, path, f"bad value: {getattr(e, 'problem', e)}")
