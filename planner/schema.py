"""Schema validation of loaded YAML, with errors mapped back to file and line.

The JSON Schemas in ``schemas/`` are the single source of truth for what a plan,
an engine config or an expanded plan may contain; this module also fills in
their declared defaults, so the rest of the planner sees one canonical form.

NOTE: two validators read the same schemas.
- ``validate`` (every command) interprets the subset of JSON Schema our schemas
  use, and refuses to load a schema with any other keyword, so it can never skip
  a rule silently. It exists for start-up time: importing the jsonschema library (with
  PyYAML) would take most or all of `warmup plan`'s 3x budget (bench/RESULTS.md, parts A
  and A2).
- ``validate_strict`` (`warmup validate`, and the tests, as the oracle that the
  subset agrees with) runs the jsonschema library's full Draft 2020-12 validator.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from functools import lru_cache

from .resources import schema_path
from .words import did_you_mean
from .yamlio import Document

# Keywords the subset validator implements; annotations are accepted and ignored.
CHECKED = {"type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength",
           "pattern", "minItems", "maxItems", "items", "properties", "required", "additionalProperties",
           "allOf", "if", "then", "oneOf", "$ref"}
ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description", "default", "examples"}

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class SchemaViolation(Exception):
    def __init__(self, path: tuple, message: str):
        super().__init__(message)
        self.path, self.message = path, message


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    with open(schema_path(name), encoding="utf-8") as f:
        schema = json.load(f)
    _check_keywords(schema, name)
    return schema


def _check_keywords(node, name: str) -> None:
    if isinstance(node, dict):
        unknown = set(node) - CHECKED - ANNOTATIONS
        if unknown:
            raise ValueError(f"schema {name} uses keyword(s) {sorted(unknown)} that planner/schema.py does not check")
        for key, value in node.items():
            if key in ("properties", "$defs"):
                for sub in value.values():
                    _check_keywords(sub, name)
            elif key not in ("enum", "const", "default", "examples", "required"):
                _check_keywords(value, name)
    elif isinstance(node, list):
        for item in node:
            _check_keywords(item, name)


def validate(doc: Document, name: str, data=None) -> None:
    """Raise PlanError (file, line, YAML path) for the first schema violation in `doc` (or `data`)."""
    schema = load_schema(name)
    try:
        _check(schema, doc.data if data is None else data, (), schema)
    except SchemaViolation as v:
        raise doc.error(v.path, v.message) from None


def validate_strict(doc: Document, name: str, data=None) -> None:
    """The same check by the jsonschema library (full Draft 2020-12 semantics)."""
    import jsonschema

    schema = load_schema(name)
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc.data if data is None else data))
    if error is not None:
        raise doc.error(tuple(error.absolute_path), " ".join(error.message.split())[:300])


def _check(node: dict, value, path: tuple, root: dict) -> None:
    node = _deref(node, root)
    if "type" in node:
        _check_type(node["type"], value, path)
    if "enum" in node and value not in node["enum"]:
        raise SchemaViolation(path, f"expected one of {', '.join(map(repr, node['enum']))}, got {value!r}")
    if "const" in node and value != node["const"]:
        raise SchemaViolation(path, f"expected {node['const']!r}, got {value!r}")
    if _TYPES["number"](value):
        _check_number(node, value, path)
    elif isinstance(value, str):
        _check_string(node, value, path)
    elif isinstance(value, list):
        _check_array(node, value, path, root)
    elif isinstance(value, dict):
        _check_object(node, value, path, root)
    for clause in node.get("allOf", ()):
        _check(clause, value, path, root)
    if "if" in node and _matches(node["if"], value, root) and "then" in node:
        _check(node["then"], value, path, root)
    if "oneOf" in node:
        _check_one_of(node["oneOf"], value, path, root)


def _check_type(types, value, path: tuple) -> None:
    types = types if isinstance(types, list) else [types]
    if not any(_TYPES[t](value) for t in types):
        kind = "null" if value is None else type(value).__name__
        raise SchemaViolation(path, f"expected {' or '.join(types)}, got {kind} {repr(value)[:60]}")


def _check_number(node: dict, value, path: tuple) -> None:
    if "minimum" in node and value < node["minimum"]:
        raise SchemaViolation(path, f"{value} is less than the minimum of {node['minimum']}")
    if "exclusiveMinimum" in node and value <= node["exclusiveMinimum"]:
        raise SchemaViolation(path, f"{value} must be greater than {node['exclusiveMinimum']}")
    if "maximum" in node and value > node["maximum"]:
        raise SchemaViolation(path, f"{value} is greater than the maximum of {node['maximum']}")


def _check_string(node: dict, value: str, path: tuple) -> None:
    if "minLength" in node and len(value) < node["minLength"]:
        raise SchemaViolation(path, f"{value!r} is shorter than {node['minLength']} character(s)")
    if "maxLength" in node and len(value) > node["maxLength"]:
        raise SchemaViolation(path, f"{value[:40]!r}... is longer than {node['maxLength']} characters")
    if "pattern" in node and not re.search(node["pattern"], value):
        raise SchemaViolation(path, f"{value!r} does not match {node['pattern']!r}")


def _check_array(node: dict, value: list, path: tuple, root: dict) -> None:
    if "minItems" in node and len(value) < node["minItems"]:
        raise SchemaViolation(path, f"expected at least {node['minItems']} item(s), got {len(value)}")
    if "maxItems" in node and len(value) > node["maxItems"]:
        raise SchemaViolation(path, f"expected at most {node['maxItems']} item(s), got {len(value)}")
    if "items" in node:
        items = _deref(node["items"], root)
        if _plain_integers(items, value):
            return
        for i, item in enumerate(value):
            _check(items, item, path + (i,), root)


_INTEGER_KEYWORDS = {"type", "minimum", "description"}


def _plain_integers(items: dict, value: list) -> bool:
    """Whether every item passes an `items` schema of integers (with a minimum, or none), checked
    at once: a long plan's lists of M-values and block ids hold a million of them."""
    if items.get("type") != "integer" or not set(items) <= _INTEGER_KEYWORDS:
        return False
    if set(map(type, value)) - {int}:  # bools too: not integers here
        return False
    return "minimum" not in items or not value or min(value) >= items["minimum"]


def _check_object(node: dict, value: dict, path: tuple, root: dict) -> None:
    props = node.get("properties", {})
    for key in node.get("required", ()):
        if key not in value:
            typo = _close_unknown_key(key, value, props)
            if typo is not None:  # point at the line the user wrote, not at the top of the mapping
                raise SchemaViolation(path + (typo,), f"unknown key {typo!r}: did you mean {key!r}? "
                                                      f"({key!r} is required)")
            raise SchemaViolation(path, f"{key!r} is required")
    if node.get("additionalProperties") is False:
        extra = [k for k in value if k not in props]
        if extra:  # at the first one's own line, with the known key it most looks like
            more = f" (and {', '.join(map(repr, extra[1:]))})" if extra[1:] else ""
            raise SchemaViolation(path + (extra[0],), f"unknown key {extra[0]!r}{did_you_mean(str(extra[0]), props)}"
                                                      f"{more}; allowed: {', '.join(sorted(props))}")
    for key, sub in props.items():
        if key in value:
            _check(sub, value[key], path + (key,), root)
    if isinstance(node.get("additionalProperties"), dict):  # a schema for every other key's value
        for key in value:
            if key not in props:
                _check(node["additionalProperties"], value[key], path + (key,), root)


def _close_unknown_key(key: str, value: dict, props: dict) -> str | None:
    """A key of `value` the schema does not know that looks like `key` (a typo of it), if any."""
    unknown = [k for k in value if isinstance(k, str) and k not in props]
    close = difflib.get_close_matches(key, unknown, n=1, cutoff=0.75)
    return close[0] if close else None


def _check_one_of(options: list, value, path: tuple, root: dict) -> None:
    matching = [o for o in options if _matches(o, value, root)]
    if len(matching) == 1:
        return
    if matching:
        raise SchemaViolation(path, f"{value!r} matches more than one allowed form")
    for option in options:  # report the error of the option whose type fits
        option = _deref(option, root)
        try:
            if "type" in option:
                _check_type(option["type"], value, path)
        except SchemaViolation:
            continue
        _check(option, value, path, root)
    _check_type([t for o in options for t in _as_list(_deref(o, root).get("type", []))], value, path)


def _as_list(x):
    return x if isinstance(x, list) else [x]


def _matches(node: dict, value, root: dict) -> bool:
    try:
        _check(node, value, (), root)
        return True
    except SchemaViolation:
        return False


def apply_defaults(name: str, data, ref: str = "#"):
    """A deep copy of `data` with every default of schema `name` (at `ref`) filled in."""
    schema = load_schema(name)
    node = _deref({"$ref": ref}, schema) if ref != "#" else schema
    return _fill(node, copy.deepcopy(data), schema)


def _fill(node: dict, value, root: dict):
    node = _deref(node, root)
    if isinstance(value, dict):
        for key, sub in node.get("properties", {}).items():
            sub = _deref(sub, root)
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _fill(sub, value[key], root)
        for clause in node.get("allOf", []):
            if "if" in clause and "then" in clause and _matches(clause["if"], value, root):
                value = _fill(clause["then"], value, root)
    elif isinstance(value, list) and "items" in node:
        value = [_fill(node["items"], item, root) for item in value]
    return value


def _deref(node: dict, root: dict) -> dict:
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref  # our schemas are self-contained
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        extra = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **extra}
    return node
