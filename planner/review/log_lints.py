"""`warmup check --logs LOG...` (issue 38 item 3): a compile after ready that a server recorded is
a lint finding while the plan does not cover it, so CI holds the line once a miss was seen.

These lints need the logs besides the plan, so they are not in lints.LINTS (whose checks take
the plan and the engine only): commands.py runs them when --logs is given and lists them.
"""

from __future__ import annotations

from . import absorb
from .lints import ERROR, WARNING, Finding, Lint
from .server_logs import read_logs

STEP = "(logs)"  # findings are about the logs, not one step


def _no_check(plan, engine):  # run by findings() below, with the logs
    return ()


UNCOVERED = Lint(
    "E112", "log-miss-uncovered", ERROR, False,  # an engine makes it stricter; --logs needs none
    "A log given with --logs records a compile after ready (vLLM's JIT monitor, the plugin's WARMUP_JIT_LOG) "
    "of a kernel that no stage of the plan warms while a stage of another plan of its vLLM release does "
    "(with --engine), or a variant its stage does not plan, or a family the plan's not-modelled list does not "
    "name: serving will stall on it again.",
    "Run `warmup absorb LOG --plan PLAN --engine ENGINE -o overlay.yaml`, review the overlay with `warmup diff`, "
    "and serve with WARMUP_PLAN=overlay.yaml; a variant the stage does not plan is a planner bug to report.",
    _no_check)
NOT_MODELLED = Lint(
    "W205", "log-miss-not-modelled", WARNING, False,
    "A log given with --logs records a compile after ready of a family the plan lists as not modelled: no "
    "stage can warm it, and the plan says so.",
    "Follow the not-modelled entry's action (`warmup plan PLAN -e ENGINE -f table` lists them); --strict "
    "fails on it.",
    _no_check)
LOG_LINTS = (UNCOVERED, NOT_MODELLED)


def findings(expanded, paths: list, engine=None) -> list:
    """A Finding per compile after ready in the logs that the plan leaves cold. With the engine
    (planner.engine.config.Engine), a kernel that another plan of the release warms is an error even
    where this plan lists its family as not modelled: the overlay of `warmup absorb` covers it."""
    compiles = [c for log in read_logs(paths, expanded.vllm_release) for c in log.compiles]
    catalog = absorb.release_catalog(expanded.plan, expanded.vllm_release, engine) if engine else None
    out = []
    for miss in absorb.classify(compiles, expanded, catalog):
        if miss.status == absorb.COVERED:
            continue
        lint = NOT_MODELLED if miss.status == absorb.NOT_MODELLED else UNCOVERED
        c = miss.compile
        out.append(Finding(lint, STEP, f"{c.file}:{c.line}: {c.family} {c.kernel} compiled after ready"
                                       + (f" ({c.when})" if c.when else "") + f": {_reason(miss)}"))
    return out


def _reason(miss) -> str:
    if miss.status == absorb.NOT_MODELLED:
        return f"not modelled: {miss.not_modelled}"
    if miss.status == absorb.UNKNOWN:
        return "no stage of this plan warms it, and its not-modelled list does not name it"
    return miss.why
