"""`warmup absorb LOG... --plan PLAN --engine ENGINE`: what compiled after ready, and the plan
that covers it (issue 38; planner/review/absorb.py decides, planner/review/server_logs.py reads the logs)."""

from __future__ import annotations

import json
import sys
from typing import NamedTuple

from .. import api
from ..output import STDOUT, emit, is_stdout
from ..review import absorb
from ..review.server_logs import read_logs
from ..words import count
from ..yamlio import dump

FORMAT = "warmup-absorb/v1"
KEY_WIDTH = 48  # the table's key column; JSON has the whole key


def add_command(sub, name: str, help: str) -> None:
    p = sub.add_parser(name, help=help, description=cmd_absorb.__doc__,
                       epilog="exit codes: 0 read (whatever the verdicts: `warmup check --logs` is the gate), "
                              "2 invalid input, 3 internal error")
    p.add_argument("logs", nargs="+", metavar="LOG",
                   help="vLLM server logs (its JIT monitor's lines) and the plugin's WARMUP_JIT_LOG files")
    p.add_argument("--plan", "-p", required=True,
                   help="the plan the server ran, as `warmup plan` takes it (stock vLLM: its release's mirror, "
                        "e.g. vllm-0.25)")
    p.add_argument("--engine", "-e", required=True, help="built-in engine name or engine YAML")
    p.add_argument("--format", "-f", choices=("table", "json"), default="table",
                   help="how the compiles are printed: a table, or JSON as `warmup plan -f json` prints")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the plan overlay here: PLAN extended with the stages that cover the misses (`-` is "
                        "stdout, and the report then goes to stderr)")
    p.set_defaults(func=cmd_absorb)


def cmd_absorb(args) -> int:
    """Read the logs a vLLM server wrote (vLLM's JIT monitor lines, the plugin's JIT log) and, for
    each compile after ready, name the stage of PLAN that covers it, the stage of another plan
    of the release that would, or why none can (the plan's not-modelled list). With -o, write a
    plan that extends PLAN with the stages that cover them: review it with
    `warmup diff PLAN FILE --engine ENGINE`, run it with WARMUP_PLAN=FILE."""
    plan = api.load_plan(args.plan)
    engine = api.load_engine(args.engine)
    logs = read_logs(args.logs, plan.vllm_release)
    expanded = api.expand(plan, engine)
    compiles = [c for log in logs for c in log.compiles]
    misses = absorb.classify(compiles, expanded, absorb.release_catalog(plan.name, plan.vllm_release, engine))
    if args.output is not None:
        _write_overlay(args, plan, misses, inputs=[*args.logs, *api.input_files(plan, engine)])
    render = _json if args.format == "json" else _table
    # `-o -`: the overlay is stdout, so that `> overlay.yaml` is a plan; the report goes to stderr
    (sys.stderr if args.output == STDOUT else sys.stdout).write(render(expanded, logs, misses, _review(args)))
    return 0


def _write_overlay(args, plan, misses, inputs: list) -> None:
    """The overlay at -o (never over a log, the plan or the engine it was made from), or on stdout
    for `-o -`, where its `extends` is relative to the current directory."""
    to_file = not is_stdout(args.output)
    layer = absorb.overlay(plan, misses, absorb.extends_ref(args.plan, plan.files[0],
                                                            args.output if to_file else None))
    review = _review(args)
    header = (f"# Written by `warmup absorb` (issue 38). Review: {review.command}\n"
              f"# Run: WARMUP_PLAN={review.file} vllm serve ...\n")
    emit(dump(absorb.overlay_document(layer, plan, args.logs), header=header), args.output, inputs)


class Review(NamedTuple):
    """Where the overlay went, the file the commands name, and the command that reviews it."""

    overlay: str   # the -o file, or "stdout"
    file: str      # the file to review and run: the -o file, or where `> overlay.yaml` saved stdout
    command: str


def _review(args) -> Review | None:
    if args.output is None:
        return None
    to_file = not is_stdout(args.output)
    file = args.output if to_file else "overlay.yaml"
    return Review(args.output if to_file else "stdout", file, f"warmup diff {args.plan} {file} --engine {args.engine}")


def _summary(misses) -> dict:
    return {status: sum(1 for m in misses if m.status == status) for status in absorb.STATUSES}


def _json(expanded, logs, misses, review) -> str:
    data = {"format": FORMAT, "plan": expanded.plan, "engine": expanded.engine,
            "vllm_release": expanded.vllm_release,
            "logs": [{"path": log.path, "kind": log.kind, "vllm_version": log.vllm_version,
                      "monitor_modes": list(log.monitor_modes), "compiles": len(log.compiles)} for log in logs],
            "summary": {"compiles": len(misses), **_summary(misses)},
            "compiles": [_miss_json(m) for m in misses],
            "overlay": review.overlay if review else None, "review": review.command if review else None}
    return json.dumps(data, indent=1) + "\n"


def _miss_json(miss) -> dict:
    c = miss.compile
    return {"family": c.family, "kernel": c.kernel, "key": c.key, "when": c.when, "after_ready_s": c.after_ready_s,
            "file": c.file, "line": c.line, "source": c.source, "event": c.event, "process": c.process,
            "status": miss.status, "stage": miss.stage, "stage_plan": miss.stage_plan, "stage_kind": miss.stage_kind,
            "not_modelled": miss.not_modelled, "why": miss.why}


def _table(expanded, logs, misses, review) -> str:
    counts = _summary(misses)
    said = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    lines = [f"Compiles after ready in {count(len(logs), 'log')}, against plan {expanded.plan} for engine "
             f"{expanded.engine}: {len(misses)}" + (f" ({said})" if said else ""), ""]
    rows = [("family", "kernel", "key", "when", "after ready", "where", "verdict")]
    for m in misses:
        c = m.compile
        rows.append((c.family, c.kernel, _cut(c.key or "-", KEY_WIDTH), c.when or "-",
                     "-" if c.after_ready_s is None else f"{c.after_ready_s:.1f} s", f"{c.file}:{c.line}",
                     f"{m.status}: {m.why}"))
    if misses:
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[6] for r in rows]
    else:
        lines.append("Nothing compiled after ready.")
    modes = sorted({mode for log in logs for mode in log.monitor_modes})
    if any(log.kind == "vllm server log" for log in logs) and "warn" in modes:
        lines += ["", "vLLM's monitor in mode warn logs each kernel once per process: a kernel's other variants "
                      "compile unseen (the plugin's WARMUP_JIT_LOG, or --jit-monitor-verbose, has each)."]
    if review is not None:
        saved = "" if review.overlay == review.file else f" (saved as {review.file}, say)"
        lines += ["", f"Overlay written to {review.overlay}{saved}: review it with `{review.command}`, run it with "
                      f"WARMUP_PLAN={review.file}."]
    return "\n".join(lines) + "\n"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."
