"""The planner's API: what `warmup plan`, `check`, `diff` and `warmup execute` do with their inputs.

    load_plan(ref), load_engine(ref)   a built-in name or a path
    expand(plan, engine)               the ExpandedPlan (planner.plan.expand)
    load_target(ref)                   a plan to expand, or an expanded plan file to use as it is
    input_files(plan, engine)          the files they were read from (what `-o` must not overwrite)
    load_expanded(ref)                 an expanded plan file, and nothing else
    check_fresh(expanded, engine, plan) refuse a saved plan whose inputs changed since it was made

A saved plan carries a digest per input (planner.plan.digest). Given the engine config it will
run on, and the plan when it can be found, ``check_fresh`` recomputes them and names every
input that differs, the way `terraform apply` refuses a stale saved plan.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .engine.config import Engine, load_engine
from .errors import PlanError
from .plan.authored import Plan, load_plan
from .plan.digest import changed_inputs, digest
from .plan.expand import expand
from .plan.expanded import ExpandedPlan
from .plan.loading import detect, expanded_from_document, load_document
from .resources import builtin_plans, engines_dir, resolve

__all__ = ["Target", "check_fresh", "expand", "input_files", "load_engine", "load_expanded", "load_plan",
           "load_target", "source_plan"]

WHAT = {"plan": "the plan", "engine": "the engine config", "planner": "the planner version",
        "kernel_configs": "the tuned kernel config tables", "deep_gemm": "the DeepGEMM install",
        "vllm_moe_configs": "vLLM's tuned fused_moe tables"}
VERSIONED = ("planner", "deep_gemm")  # inputs recorded as they are, not as a digest


class Target(NamedTuple):
    """What a command was pointed at: a plan (`plan` set) or an expanded plan (`expanded` set)."""

    path: str
    plan: Plan | None = None
    expanded: ExpandedPlan | None = None


def load_target(ref: str, engine_hint: str = "pass it with --engine", *, keep=None) -> Target:
    """A plan (built-in name or file) or an expanded plan file; an engine config is refused
    with `engine_hint` (what to do instead). `keep(step)`: what an expanded plan read from a
    file holds of each step where it is read a piece at a time (planner.plan.streaming; `warmup
    diff` packs them); the typed step by default, and always where the file is read whole."""
    path = resolve(ref, "plan")
    doc = load_document(path, keep=keep)
    if isinstance(doc, ExpandedPlan):  # read a step at a time (planner.plan.streaming)
        return Target(path, expanded=doc)
    kind = detect(doc)
    if kind == "engine":
        raise PlanError(f"this is an engine config, not a plan: {engine_hint}", file=path)
    if kind == "plan":
        return Target(path, plan=load_plan(path))
    return Target(path, expanded=expanded_from_document(doc))


def load_expanded(ref: str) -> ExpandedPlan:
    """An expanded plan file (`warmup plan -o`); a plan or an engine config says what to pass instead."""
    doc = load_document(ref)
    if isinstance(doc, ExpandedPlan):  # read a step at a time (planner.plan.streaming)
        return doc
    kind = detect(doc)
    if kind != "expanded plan":
        hint = "--plan FILE --engine E" if kind == "plan" else "--engine FILE with a --plan"
        raise PlanError(f"this is {'a plan' if kind == 'plan' else 'an engine config'}, not an expanded plan "
                        f"(from `warmup plan -o`); to compare it, use {hint}", file=ref)
    return expanded_from_document(doc)


def source_plan(expanded: ExpandedPlan, ref: str | None, *, file: str) -> Plan | None:
    """The plan an expanded plan was made from: `ref` (checked to be that plan), else the
    built-in plan its header names, else None (a custom plan keeps only its name)."""
    if ref is None:
        return load_plan(expanded.plan) if expanded.plan in builtin_plans() else None
    plan = load_plan(ref)
    if plan.name != expanded.plan:
        raise PlanError(f"--source-plan {ref} is plan {plan.name!r}, but this expanded plan was made "
                        f"from {expanded.plan!r}", file=file)
    return plan


def check_fresh(expanded: ExpandedPlan, engine: Engine, plan: Plan | None, *, file: str | None = None,
                deep_gemm: str | None = None) -> None:
    """Raise PlanError (exit 2) if `expanded` was not made from `engine` (and `plan`, when given).

    With plan None only the engine config, the planner version and the tuned tables are
    compared; callers that can find the plan should pass it (``source_plan``).
    """
    if digest(expanded.inputs) != expanded.digest:
        raise PlanError(f"the plan's digest {short(expanded.digest)} does not match its inputs: the header "
                        "was edited; re-run `warmup plan` to make a plan that can be checked", file=file)
    changed = changed_inputs(expanded.inputs, engine, plan, deep_gemm)
    if not changed:
        return
    names = [WHAT[key] for key, _, _ in changed]
    what = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    details = [f"{key} {'version' if key in VERSIONED else 'digest'} {short(old)} -> {short(new)}"
               for key, old, new in changed]
    if expanded.engine != engine.name:
        details.append(f"made for engine {expanded.engine!r}, given {engine.name!r}")
    raise PlanError(f"stale plan: {what} changed since this plan was made ({'; '.join(details)}); re-run "
                    f"`warmup plan {expanded.plan} --engine {engine_ref(engine)}` and review the change "
                    "with `warmup diff`", file=file)


def input_files(plan: Plan | None = None, engine: Engine | None = None) -> list[str]:
    """The files a plan and an engine were read from (the plan's extends chain included): what a
    command's `-o` must not write over (planner.output.check_output)."""
    return [*(plan.files if plan is not None else ()), *([engine.file] if engine is not None else [])]


def parse_deep_gemm(value: str) -> str:
    """``VERSION[@INCLUDE_DIR]`` as given to --deep-gemm; the include directory absolute."""
    version, at, include = value.partition("@")
    if not version.strip() or any(c.isspace() for c in value) or (at and not os.path.isabs(include)):
        raise PlanError(f"--deep-gemm {value!r}: expected VERSION or VERSION@INCLUDE_DIR with an absolute "
                        "directory, e.g. 2.8.1@/opt/venv/lib/python3.12/site-packages/deep_gemm/include",
                        file="command line")
    return f"{version}@{os.path.normpath(include)}" if at else version


def engine_ref(engine: Engine) -> str:
    """How to name the engine on a command line: its built-in name, or its file."""
    folder = os.path.realpath(os.path.dirname(engine.file))
    if folder == os.path.realpath(engines_dir()):
        return os.path.splitext(os.path.basename(engine.file))[0]
    return engine.file


def short(value: str) -> str:
    """sha256:65216ce1fafa… for people; versions as they are."""
    return value[:19] + "…" if value.startswith("sha256:") else value
