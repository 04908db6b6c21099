"""JSON-Schema validation of loaded YAML, with errors mapped back to file and line.

The schemas in ``schemas/`` are the single source of truth for what a plan or an
engine config may contain; this module also fills in their declared defaults, so
the rest of the planner sees one canonical form.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache

from .errors import PlanError
from .resources import schema_path
from .yamlio import Document


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    with open(schema_path(name), encoding="utf-8") as f:
        return json.load(f)


@lru_cache(maxsize=None)
def _validator(name: str):
    import jsonschema  # imported here: only commands that validate pay for it

    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def validate(doc: Document, name: str, data=None) -> None:
    """Raise PlanError for the most relevant schema violation in `doc` (or `data`)."""
    import jsonschema

    data = doc.data if data is None else data
    error = jsonschema.exceptions.best_match(_validator(name).iter_errors(data))
    if error is None:
        return
    path = tuple(error.absolute_path)
    raise doc.error(path, _message(error))


def _message(error) -> str:
    """One readable line for a jsonschema error."""
    v = error.validator
    if v == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        allowed = ", ".join(sorted(error.schema.get("properties", {})))
        return f"unknown key(s) {', '.join(map(repr, extra))}; allowed: {allowed}"
    if v == "required":
        return error.message.replace("is a required property", "is required")
    if v == "enum":
        return f"expected one of {', '.join(map(repr, error.validator_value))}, got {error.instance!r}"
    if v == "type":
        want = error.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        return f"expected {want}, got {_short(error.instance)}"
    if v in ("minimum", "exclusiveMinimum", "maximum"):
        return f"{error.message} (got {_short(error.instance)})"
    return error.message


def _short(value) -> str:
    text = repr(value)
    kind = type(value).__name__ if value is not None else "null"
    return f"{kind} {text[:60]}"


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
            cond = clause.get("if", {}).get("properties", {})
            if all(value.get(k) == c.get("const") for k, c in cond.items()) and "then" in clause:
                value = _fill(clause["then"], value, root)
    elif isinstance(value, list) and "items" in node:
        value = [_fill(node["items"], item, root) for item in value]
    return value


def _deref(node: dict, root: dict) -> dict:
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref  # schemas are self-contained
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        extra = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **extra}
    return node
