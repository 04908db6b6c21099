"""Stale expanded plans: refuse a saved plan whose inputs changed since it was made.

An expanded plan carries a digest per input (plan, engine, planner version;
planner/expand.py `input_digests`). Given the engine config it will run on, and
the plan when it can be found, `check_fresh` recomputes those digests and names
every input that differs, the way `terraform apply` refuses a stale saved plan.
`warmup check` calls it, and so does `warmup execute`.
"""

from __future__ import annotations

import os

from .. import __version__
from .. import tables
from ..engine import Engine
from ..errors import PlanError
from ..expand import digest
from ..plan import Plan

WHAT = {"plan": "the plan", "engine": "the engine config", "planner": "the planner version",
        "kernel_configs": "the tuned kernel config tables"}


def builtin_plan(expanded: dict) -> Plan | None:
    """The built-in plan an expanded plan names in its header, or None when it names none.

    A plan loaded from a file keeps only its name in the header, so a custom plan
    cannot be found again: its digest is then not compared (see `check_fresh`).
    """
    from ..plan import load_plan
    from ..resources import builtin_plans

    name = expanded.get("plan")
    return load_plan(name) if name in builtin_plans() else None


def changed_inputs(expanded: dict, engine: Engine, plan: Plan | None) -> list[tuple[str, str, str]]:
    """(input, digest in the plan, digest now) for every input that changed; the plan only if given."""
    recorded = expanded["inputs"]
    now = {"engine": digest(engine.shaping_fields()), "planner": __version__}
    if plan is not None:
        now["plan"] = digest(plan.shaping_fields())
    if "kernel_configs" in recorded:
        now["kernel_configs"] = digest(tables.reread(recorded.get("kernel_config_tables", [])))
    return [(key, recorded[key], now[key]) for key in ("plan", "engine", "planner", "kernel_configs")
            if key in now and recorded[key] != now[key]]


def check_fresh(expanded: dict, engine: Engine, plan: Plan | None, *, file: str | None = None) -> None:
    """Raise PlanError (exit 2) if `expanded` was not made from `engine` (and `plan`, when given).

    With plan None only the engine config and the planner version are compared;
    callers that can find the plan should pass it (`builtin_plan(expanded)`).
    """
    if digest(expanded["inputs"]) != expanded["digest"]:
        raise PlanError(f"the plan's digest {short(expanded['digest'])} does not match its inputs: the header "
                        "was edited; re-run `warmup plan` to make a plan that can be checked", file=file)
    changed = changed_inputs(expanded, engine, plan)
    if not changed:
        return
    names = [WHAT[key] for key, _, _ in changed]
    what = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    details = [f"{key} {'version' if key == 'planner' else 'digest'} {short(old)} -> {short(new)}"
               for key, old, new in changed]
    if expanded["engine"] != engine.name:
        details.append(f"made for engine {expanded['engine']!r}, given {engine.name!r}")
    raise PlanError(f"stale plan: {what} changed since this plan was made ({'; '.join(details)}); re-run "
                    f"`warmup plan {expanded['plan']} --engine {engine_ref(engine)}` and review the change "
                    "with `warmup diff`", file=file)


def engine_ref(engine: Engine) -> str:
    """How to name the engine on a command line: its built-in name, or its file."""
    from ..resources import engines_dir

    folder = os.path.realpath(os.path.dirname(engine.file))
    if folder == os.path.realpath(engines_dir()):
        return os.path.splitext(os.path.basename(engine.file))[0]
    return engine.file


def short(value: str) -> str:
    """sha256:65216ce1fafa… for people; versions as they are."""
    return value[:19] + "…" if value.startswith("sha256:") else value
