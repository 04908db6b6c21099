"""Expand a plan against an engine config into the explicit, canonical step list.

The output is plain data in which every value is concrete: the executor computes
nothing. It is deterministic (same inputs, same bytes) and carries a digest of
exactly the inputs that shaped it, per input, so a stale plan can say which
input changed.
"""

from __future__ import annotations

import hashlib
import json

from . import __version__
from .engine import Engine
from .expr import ExprError, evaluate
from .tables import TableReader
from .limits import MAX_STEPS, MAX_TOTAL_VALUES
from .plan import Plan
from .stages import handler
from .stages.scope import Scope

FORMAT = "warmup-expanded-plan/v1"


def digest(value) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def input_digests(plan: Plan, engine: Engine, tables: TableReader | None = None) -> dict:
    inputs = {"plan": digest(plan.shaping_fields()), "engine": digest(engine.shaping_fields()),
              "planner": __version__}
    if tables is not None and tables.consulted():
        # Only plans whose dispatch read tables carry this input (and the names, to re-read them).
        inputs["kernel_configs"] = digest(tables.consulted())
        inputs["kernel_config_tables"] = sorted(tables.consulted())
    return inputs


def expand(plan: Plan, engine: Engine) -> dict:
    names = engine.expression_names()
    tables = TableReader(engine.data["device"]["name"])
    steps: list[dict] = []
    for stage in plan.stages:
        if not _enabled(stage, names):
            continue
        for step in handler(stage.kind)(Scope(stage, engine, names, tables=tables)):
            step["id"] = f"{stage.name}/{step['id']}"
            steps.append({"id": step.pop("id"), "stage": stage.name, **step})
        _check_size(stage, steps)
    inputs = input_digests(plan, engine, tables)
    return {
        "format": FORMAT,
        "plan": plan.name,
        "engine": engine.name,
        "planner_version": __version__,
        "digest": digest(inputs),
        "inputs": inputs,
        "summary": summarize(steps),
        "steps": steps,
    }


def _enabled(stage, names: dict) -> bool:
    try:
        value = evaluate(stage.when, names)
    except ExprError as e:
        raise stage.where("when").error(str(e)) from None
    if not isinstance(value, bool):
        raise stage.where("when").error(f"expected a condition (true or false), got {value!r}")
    return value


def _check_size(stage, steps: list) -> None:
    if len(steps) > MAX_STEPS:
        raise stage.origin.error(f"the plan would have more than {MAX_STEPS} steps")
    total = sum(_count_values(s) for s in steps)
    if total > MAX_TOTAL_VALUES:
        raise stage.origin.error(f"the plan would hold {total} values (M-values, block ids, ...), more than "
                                 f"the limit of {MAX_TOTAL_VALUES}; reduce max_tokens or use mode: relax")


def _count_values(step: dict) -> int:
    n = 0
    for value in step.values():
        if isinstance(value, list):
            n += len(value)
            if value and isinstance(value[0], dict):
                n += sum(len(b) for r in value for b in (r.get("block_ids") or r.get("new_block_ids") or []))
    return n


def summarize(steps: list[dict]) -> dict:
    """Totals a reviewer wants first: steps per kind, requests, GEMM calls."""
    by_kind: dict = {}
    for s in steps:
        by_kind[s["kind"]] = by_kind.get(s["kind"], 0) + 1
    gemm = [s for s in steps if s["kind"] in ("gemm", "grouped_gemm")]
    return {
        "steps": len(steps),
        "steps_by_kind": dict(sorted(by_kind.items())),
        "requests": sum(len(s["requests"]) for s in steps if s["kind"] == "prefill"),
        "scheduled_tokens": sum(s["total_num_scheduled_tokens"] for s in steps
                                if s["kind"] in ("prefill", "decode")),
        "gemm_shapes": len(gemm),
        "gemm_calls": sum(len(s["m_values"]) for s in gemm),
        "attention_calls": sum(1 for s in steps if s["kind"] == "attention"),
        "autotune_runs": by_kind.get("autotune", 0),
        "cudagraph_captures": sum(len(s["sizes"]) + len(s["uniform_decode_sizes"])
                                  for s in steps if s["kind"] == "cudagraph"),
    }
