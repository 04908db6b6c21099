"""Expand a plan against an engine config into the explicit, canonical step list.

The output is an ExpandedPlan of typed steps (planner.plan.steps) in which every value is
concrete: the executor computes nothing. It is deterministic (same inputs, same
bytes) and carries a digest of exactly the inputs that shaped it, per input
(planner.plan.digest), so a stale plan can say which input changed.
"""

from __future__ import annotations

from .. import __version__
from ..engine.config import Engine
from ..limits import MAX_STEPS, MAX_TOTAL_VALUES
from ..tables.kernel_configs import TableReader
from .authored import Plan
from .digest import digest, input_digests
from .expanded import ExpandedPlan
from .expr import ExprError, evaluate
from .stages import handler
from .stages.gaps import engine_gaps
from .stages.scope import Notes, Scope
from .steps import GemmLike


def expand(plan: Plan, engine: Engine, deep_gemm: str | None = None) -> ExpandedPlan:
    """`deep_gemm`: the DeepGEMM install (``VERSION@INCLUDE_DIR``) the plan is for, recorded
    among its inputs when it has DeepGEMM steps (planner.plan.digest)."""
    names = engine.expression_names(plan.vllm_release)
    tables = TableReader(engine.facts.device.name)
    notes = Notes()
    steps: list = []
    for stage in plan.stages:
        if not _enabled(stage, names):
            continue
        steps += handler(stage.kind)(Scope(stage, engine, names, tables=tables, notes=notes))
        _check_size(stage, steps)
    uses_dg = any(isinstance(step, GemmLike) and step.backend == "deep_gemm" for step in steps)
    inputs = input_digests(plan, engine, tables.consulted(), deep_gemm if uses_dg else None, notes.moe_read())
    return ExpandedPlan(plan=plan.name, engine=engine.name, planner_version=__version__, digest=digest(inputs),
                        inputs=inputs, steps=tuple(steps),
                        not_modelled=tuple(plan.not_modelled) + tuple(notes.gaps) + tuple(engine_gaps(engine.facts)),
                        vllm_release=plan.vllm_release)


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
    total = sum(s.value_count() for s in steps)
    if total > MAX_TOTAL_VALUES:
        raise stage.origin.error(f"the plan would hold {total} values (M-values, block ids, ...), more than "
                                 f"the limit of {MAX_TOTAL_VALUES}; reduce max_tokens or use mode: relax")
