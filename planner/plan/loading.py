"""Load any of the three input kinds by looking at it: plan, engine config, expanded plan."""

from __future__ import annotations

import os

from .. import progress, schema
from ..engine.config import engine_from_document
from ..errors import PlanError
from ..yamlio import Document, RunError, decompress, load_text, read_text
from .authored import load_plan
from .expanded import FORMATS, SCHEMAS as EXPANDED_SCHEMAS, ExpandedPlan


SCHEMAS = {"plan": "plan", "engine": "engine", "expanded plan": "expanded-plan"}


def load_any(path: str, strict: bool = False):
    """(kind, object) for a plan, an engine config or an expanded plan file.

    `strict` also runs the full jsonschema validator over the file (`warmup validate`).
    """
    doc = load_document(path, strict=strict)
    if isinstance(doc, ExpandedPlan):
        return "expanded plan", doc
    kind = detect(doc)
    if strict:
        name = EXPANDED_SCHEMAS.get(doc.data.get("format"), SCHEMAS[kind]) if kind == "expanded plan" else SCHEMAS[kind]
        schema.validate_strict(doc, name, decompressed(doc) if kind == "expanded plan" else None)
    if kind == "plan":
        return kind, load_plan(path)
    if kind == "engine":
        return kind, engine_from_document(doc)
    return kind, expanded_from_document(doc)


def load_document(path: str, *, strict: bool = False, keep=None) -> Document | ExpandedPlan:
    """The file as a Document, or, for an expanded plan, as the ExpandedPlan the document would
    give (planner.plan.streaming reads it a piece at a time; `strict`: checked by the full
    validator as well; `keep(step)`: what the plan holds of each step, the step by default).
    Every error is the classic loader's: a file the stream cannot read is read the classic way,
    which reports it (and whose plan holds its typed steps, whatever `keep`)."""
    text = read_text(path)
    from . import streaming  # here: `warmup plan` does not pay for its import

    expanded = streaming.expanded_plan(text, path, strict=strict, keep=keep)
    if expanded is not None:
        return expanded
    progress.current().phase(f"reading {os.path.basename(path)}")
    return load_text(text, path)


def detect(doc: Document) -> str:
    data = doc.data
    if not isinstance(data, dict):
        raise doc.error((), "expected a mapping: a plan, an engine config or an expanded plan")
    if "format" in data or "steps" in data:
        return "expanded plan"
    if "stages" in data or "extends" in data:
        return "plan"
    if "model" in data or "kv_cache" in data:
        return "engine"
    raise doc.error((), "cannot tell what this is: a plan has `stages`, an engine config `model`, "
                        "an expanded plan `format` and `steps`")


def decompressed(doc: Document):
    """The saved plan with its integer runs expanded, each measured before it is built."""
    try:
        return decompress(doc.data)
    except RunError as e:
        raise doc.error(e.path, e.message) from None


def expanded_from_document(doc: Document) -> ExpandedPlan:
    if not isinstance(doc.data, dict) or doc.data.get("format") not in FORMATS:
        got = doc.data.get("format") if isinstance(doc.data, dict) else None
        raise doc.error(("format",), f"expected an expanded plan with format {' or '.join(map(repr, FORMATS))}, "
                                     f"got {got!r}")
    data = decompressed(doc)
    schema.validate(doc, EXPANDED_SCHEMAS[data["format"]], data)
    ids = [s["id"] for s in data["steps"]]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise PlanError(f"duplicate step id {dup!r}", file=doc.file)
    return ExpandedPlan.from_dict(data)
