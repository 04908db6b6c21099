"""The review workflow: `warmup diff` (what a change does to the warmup) and `warmup check` (lints).

Exit codes, like diff(1): `diff` 0 same steps, 1 different; `check` 0 clean (warnings
allowed unless --strict), 1 lint errors; both 2 invalid input (a stale plan included),
3 internal error.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

from .. import api, progress
from ..errors import PlanError
from ..output import is_stdout, write_output
from ..words import count
from . import lints, log_lints
from .diff import RENDERERS, diff_plans, pack

EXIT_SAME, EXIT_DIFFERENT = 0, 1
EXIT_CLEAN, EXIT_LINT_ERRORS = 0, 1


def add_command(sub, name: str, help: str) -> None:
    """Register `warmup diff` or `warmup check` (planner.cli's command table names both)."""
    (_add_diff if name == "diff" else _add_check)(sub, help)


def _add_diff(sub, help: str) -> None:
    p = sub.add_parser("diff", help=help, description=cmd_diff.__doc__,
                       epilog="exit codes: 0 same steps, 1 different, 2 invalid input, 3 internal error")
    p.add_argument("files", nargs="*", metavar="PLAN",
                   help="OLD and NEW, each as `warmup plan` takes it (a built-in plan name or a plan YAML, expanded "
                        "here for --engine) or an expanded plan file (`warmup plan -o`)")
    p.add_argument("--plan", "-p", action="append", default=[],
                   help="built-in plan name or plan YAML; give it twice to compare two plans")
    p.add_argument("--engine", "-e", action="append", default=[],
                   help="built-in engine name or engine YAML; give it twice to compare two engines (the first "
                        "for OLD, the second for NEW)")
    p.add_argument("--format", "-f", choices=("text", "markdown", "json"), default="text",
                   help="how the differences are written (default: text)")
    p.add_argument("-o", "--output", help="write here (atomically) instead of stdout (`-` is stdout)")
    p.add_argument("--no-color", action="store_true", help="no ANSI colors (also NO_COLOR, or not a terminal)")
    p.set_defaults(func=cmd_diff)


def _add_check(sub, help: str) -> None:
    p = sub.add_parser("check", help=help, description=cmd_check.__doc__,
                       epilog="exit codes: 0 clean, 1 lint errors, 2 invalid input (a stale plan included), "
                              "3 internal error")
    p.add_argument("target", nargs="?", metavar="PLAN",
                   help="built-in plan name, plan YAML, or expanded plan file")
    p.add_argument("--engine", "-e", help="built-in engine name or engine YAML (required for a plan; for an "
                                          "expanded plan it enables the engine lints and the stale-plan check)")
    p.add_argument("--source-plan", metavar="PLAN_YAML",
                   help="for an expanded plan of a custom plan: the plan file it was made from (stale check), "
                        "as `warmup execute --source-plan`")
    p.add_argument("--format", "-f", choices=("text", "json"), default="text",
                   help="how the findings are written (default: text)")
    p.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    p.add_argument("--logs", nargs="+", metavar="LOG",
                   help="server logs and WARMUP_JIT_LOG files: each compile after ready they record that the plan "
                        "leaves cold is a finding (E112, W205; `warmup absorb` writes the plan that covers them)")
    p.add_argument("--list", action="store_true", help="list the lints and exit")
    p.add_argument("-o", "--output", help="write here (atomically) instead of stdout (`-` is stdout)")
    p.add_argument("--no-color", action="store_true", help="no ANSI colors (also NO_COLOR, or not a terminal)")
    p.set_defaults(func=cmd_check)


# --- diff ------------------------------------------------------------------------------

def cmd_diff(args) -> int:
    """Compare two expanded plans step by step, like `terraform plan`.

    OLD and NEW are each a plan (a built-in name or a plan YAML, expanded here for
    --engine: one engine for both, or two, the first for OLD) or an expanded plan file.
    Or --plan and --engine: one --plan and two --engine (what an engine change does),
    two --plan and one --engine (what a plan change does), or two of each. Steps are
    matched by id; the output names a change of stage order, and every added, removed
    and changed step with its semantic change.
    """
    with progress.shown("warmup diff") as task:  # a line on a terminal, for a long one
        old, new, inputs = _diff_inputs(args)
        task.phase("comparing")
        result = diff_plans(old, new)
        text = RENDERERS[args.format](result)
    _emit(text, args, args.format == "text", inputs)
    return EXIT_SAME if result.equal else EXIT_DIFFERENT


def _diff_inputs(args) -> tuple:
    """(OLD, NEW, the files they were read from)."""
    plans, engines = args.plan, args.engine
    if args.files:
        if plans:
            raise PlanError("give OLD NEW or --plan, not both", file="warmup diff")
        if len(args.files) != 2:
            raise PlanError(f"expected OLD and NEW (two plans or expanded plan files), got {len(args.files)}",
                            file="warmup diff")
        return _old_and_new(args.files, engines)
    if not plans or not engines or len(plans) > 2 or len(engines) > 2 or len(plans) + len(engines) < 3:
        raise PlanError("expected OLD NEW (plans or expanded plan files), or --plan with two --engine, two --plan "
                        f"with --engine, or two of each (got {len(plans)} --plan, {len(engines)} --engine)",
                        file="warmup diff")
    pairs = [(api.load_plan(plans[i if len(plans) == 2 else 0]),
              api.load_engine(engines[i if len(engines) == 2 else 0])) for i in (0, 1)]
    old, new = (api.expand(plan, engine) for plan, engine in pairs)
    return old, new, [path for pair in pairs for path in api.input_files(*pair)]


def _old_and_new(refs: list, engines: list) -> tuple:
    """OLD and NEW as `warmup plan` takes them: a plan is expanded for its engine (one --engine for
    both, or the first for OLD and the second for NEW); an expanded plan file is used as it is.
    Then the files they were read from."""
    targets = [api.load_target(ref, "compare engines with `warmup diff PLAN PLAN -e OLD_ENGINE -e NEW_ENGINE`",
                               keep=pack) for ref in refs]
    plans = [t for t in targets if t.plan is not None]
    if len(engines) > 2:
        raise PlanError(f"expected one --engine for OLD and NEW, or two (the first for OLD), got {len(engines)} "
                        "--engine", file="warmup diff")
    if plans and not engines:
        raise PlanError("this is a plan: give --engine ENGINE to expand it (twice to compare two engines), or "
                        "compare expanded plan files (`warmup plan -o`)", file=plans[0].path)
    if len(engines) > len(plans):
        if not plans:
            raise PlanError("--engine expands a plan, and OLD and NEW are expanded plan files (compared as they "
                            "are): leave out --engine", file="warmup diff")
        expanded = next(t.path for t in targets if t.plan is None)
        raise PlanError(f"two --engine expand two plans (the first for OLD, the second for NEW), and {expanded} is "
                        "an expanded plan file (compared as it is): give one --engine", file="warmup diff")
    loaded = [api.load_engine(ref) for ref in engines]
    old, new = (t.expanded if t.plan is None else api.expand(t.plan, loaded[i if len(loaded) == 2 else 0])
                for i, t in enumerate(targets))
    return old, new, [*_target_files(targets), *(path for e in loaded for path in api.input_files(engine=e))]


# --- check -----------------------------------------------------------------------------

def cmd_check(args) -> int:
    """Lint an expanded plan: mistakes that make a warmup miss kernels or break the engine.

    PLAN is a plan (built-in name or YAML, expanded here for --engine) or an expanded
    plan file. An expanded plan checked with --engine is first compared with its
    inputs: a plan whose engine config (or plan, or planner) changed since it was
    made is refused as stale. Without --engine only the lints that need no engine
    facts run. `--list` shows every lint.
    """
    if args.list:
        _emit(_list_lints(), args, False, ())
        return EXIT_CLEAN
    if not args.target:
        raise PlanError("expected a plan or an expanded plan to check (or --list)", file="warmup check")
    with progress.shown("warmup check") as task:  # a line on a terminal, for a long one
        expanded, engine, notes, inputs = _check_inputs(args)
        task.phase("running the lints")
        findings, skipped = lints.run(expanded, engine.facts if engine else None)
        if args.logs:
            findings += log_lints.findings(expanded, args.logs, engine)
    if skipped:
        notes.append(f"no --engine: ran {len(lints.LINTS) - len(skipped)} of {len(lints.LINTS)} lints; "
                     f"{', '.join(x.code for x in skipped)} need the engine config, and the plan's freshness "
                     "was not checked")
    errors = sum(1 for f in findings if f.lint.severity == lints.ERROR)
    warnings = len(findings) - errors
    render = _check_json if args.format == "json" else _check_text
    _emit(render(expanded, findings, skipped, notes, errors, warnings, bool(args.logs)), args, args.format == "text",
          [*inputs, *(args.logs or ())])
    return EXIT_LINT_ERRORS if errors or (args.strict and warnings) else EXIT_CLEAN


def _check_inputs(args):
    """(expanded plan, Engine or None, notes, the files read) for what the user named; stale plans
    are refused."""
    target = api.load_target(args.target, "check a plan with `warmup check PLAN --engine ENGINE`")
    engine = api.load_engine(args.engine) if args.engine else None
    inputs = [*_target_files([target]), *api.input_files(None, engine)]
    if target.plan is not None:
        if engine is None:
            raise PlanError("a plan needs --engine to be expanded and checked (or check an expanded plan file)",
                            file=target.path)
        if args.source_plan:
            raise PlanError("--source-plan names the source of an expanded plan; PLAN is already a plan",
                            file=target.path)
        return api.expand(target.plan, engine), engine, [], inputs
    expanded, notes = target.expanded, []
    if engine is not None:
        plan = api.source_plan(expanded, args.source_plan, file=target.path)
        if plan is None:
            notes.append(f"plan {expanded.plan!r} is not a built-in plan: the stale-plan check compared the "
                         "engine config and the planner version, not the plan (pass --source-plan PLAN_YAML "
                         "to compare it too)")
        api.check_fresh(expanded, engine, plan, file=target.path)
        inputs += api.input_files(plan)
    elif args.source_plan:
        raise PlanError("--source-plan needs --engine: the stale-plan check compares both", file=target.path)
    return expanded, engine, notes, inputs


def _target_files(targets) -> list:
    """The files of what `warmup diff` and `check` were pointed at: a plan's extends chain, or the
    expanded plan file."""
    return [path for t in targets for path in (api.input_files(t.plan) if t.plan is not None else [t.path])]


def _check_text(expanded, findings, skipped, notes, errors, warnings, logs) -> str:
    ran = len(lints.LINTS) - len(skipped) + (len(log_lints.LOG_LINTS) if logs else 0)
    steps = count(len(expanded.steps), "step")
    out = [f"warmup check: {expanded.plan} for {expanded.engine} ({steps})"]
    out += [f"note: {n}" for n in notes]
    if findings:
        out.append("")
        out += [f.line() for f in findings]
        fired = {f.lint.code: f.lint for f in findings}
        for code in sorted(fired):
            item = fired[code]
            out += ["", f"{item.code} {item.name} ({item.severity})"]
            out += textwrap.wrap(item.explanation, 100, initial_indent="  ", subsequent_indent="  ")
            out += textwrap.wrap("Fix: " + item.fix, 100, initial_indent="  ", subsequent_indent="  ")
        out += ["", f"{count(errors, 'error')}, {count(warnings, 'warning')} ({count(ran, 'lint')} run)."]
    else:
        out += ["", f"No problems: {count(ran, 'lint')} over {steps}."]
    return "\n".join(out) + "\n"


def _check_json(expanded, findings, skipped, notes, errors, warnings, logs) -> str:
    fired = {f.lint.code: f.lint for f in findings}
    data = {
        "format": "warmup-check/v1",
        "plan": expanded.plan, "engine": expanded.engine, "digest": expanded.digest,
        "notes": notes,
        "lints_run": [x.code for x in lints.LINTS if x not in skipped] + ([x.code for x in log_lints.LOG_LINTS]
                                                                          if logs else []),
        "lints_skipped": [x.code for x in skipped],
        "errors": errors, "warnings": warnings,
        "findings": [f.to_json() for f in findings],
        "lints": {c: {"name": x.name, "severity": x.severity, "explanation": x.explanation, "fix": x.fix}
                  for c, x in sorted(fired.items())},
    }
    return json.dumps(data, indent=1) + "\n"


def _list_lints() -> str:
    out = []
    for item in sorted([*lints.LINTS, *log_lints.LOG_LINTS], key=lambda x: x.code):
        engine = ("  (with --logs)" if item in log_lints.LOG_LINTS else
                  "" if item.needs_engine else "  (no engine needed)")
        out.append(f"{item.code} {item.name} [{item.severity}]{engine}")
        out += textwrap.wrap(item.explanation, 100, initial_indent="  ", subsequent_indent="  ")
        out += textwrap.wrap("Fix: " + item.fix, 100, initial_indent="  ", subsequent_indent="  ")
        out.append("")
    return "\n".join(out)


# --- output ----------------------------------------------------------------------------

COLORS = {"+": "32", "-": "31", "~": "33", "ERROR": "31", "WARNING": "33"}


def _emit(text: str, args, colorable: bool, inputs) -> None:
    """The text at -o (never over one of `inputs`, the files the command read), else on stdout,
    in color where it is a terminal."""
    if not is_stdout(args.output):
        write_output(args.output, text, inputs)
        return
    if colorable and _use_color(args):
        text = "\n".join(_color_line(line) for line in text.split("\n"))
    sys.stdout.write(text)


def _use_color(args) -> bool:
    return not args.no_color and not os.environ.get("NO_COLOR") and sys.stdout.isatty()


def _color_line(line: str) -> str:
    stripped = line.lstrip()
    token = stripped.split(" ", 1)[0] if stripped else ""
    code = COLORS.get(token)
    return f"\033[{code}m{line}\033[0m" if code else line
