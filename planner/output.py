"""Render an expanded plan: YAML (people, golden files), JSON (tools), table (a summary).

YAML goes through the planner's one YAML codec (planner/yamlio.py), with integer runs
compressed ("a..b", "a..b/s"; lossless, see schemas/expanded-plan.schema.json).
`compress_runs`, `expand_runs` and `decompress` live there too and are importable
from here.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from .yamlio import compress_runs, decompress, dump, expand_runs  # noqa: F401 - re-exported

HEADER = ("# warmup-planner expanded plan (schemas/expanded-plan.schema.json).\n"
          '# Integer runs are compressed: "a..b" is every integer from a to b, "a..b/s" steps by s.\n')


def to_yaml(plan: dict) -> str:
    # Block lists flush with their key: the style every golden plan is written in.
    return dump(plan, compress=True, header=HEADER, indent_lists=False)


# --- JSON and table ---------------------------------------------------------------

def to_json(plan: dict) -> str:
    # An expanded plan has no reference cycles: skip the encoder's cycle bookkeeping.
    return json.dumps(plan, separators=(",", ":"), check_circular=False) + "\n"


def to_table(plan) -> str:
    rows = [("stage", "kind", "steps", "calls", "detail")]
    for (stage, kind), group in _groups(plan.steps).items():
        rows.append((stage, kind, str(len(group)), str(sum(s.planned_calls() for s in group)),
                     type(group[0]).table_detail(group)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"Plan {plan.plan} for engine {plan.engine} ({plan.digest[:19]})", ""]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4])
    s = plan.summary
    lines += ["", f"Totals: {_n(s['steps'], 'step')}; {_n(s['requests'], 'request')}, "
              f"{_n(s['scheduled_tokens'], 'scheduled token')}; {_n(s['gemm_calls'], 'GEMM call')} over "
              f"{_n(s['gemm_shapes'], 'shape')}; {_n(s['attention_calls'], 'attention call')}; "
              f"{_n(s['autotune_runs'], 'autotune run')}; {_n(s['cudagraph_captures'], 'CUDA graph')}"]
    return "\n".join(lines + _not_modelled(plan.not_modelled)) + "\n"


def _not_modelled(gaps) -> list[str]:
    """The plan's gaps, one block each: what the engine warms and the plan does not."""
    if not gaps:
        return []
    lines = ["", f"Not modelled ({len(gaps)} of what the engine warms, which this plan does not):"]
    for gap in gaps:
        lines += [f"  - {gap['family']}: {gap['why']}", f"    what to do: {gap['action']}"]
    return lines


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _groups(steps) -> dict:
    groups: dict = {}
    for s in steps:
        groups.setdefault((s.stage, s.kind), []).append(s)
    return groups


# Renderers of an ExpandedPlan: YAML and JSON write its plain form, the table reads its steps.
RENDERERS = {"yaml": lambda plan: to_yaml(plan.to_dict()), "json": lambda plan: to_json(plan.to_dict()),
             "table": to_table}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def emit(text: str, output: str | None) -> None:
    """`-o FILE`: write the file atomically; otherwise stdout."""
    if output:
        write_atomic(output, text)
    else:
        sys.stdout.write(text)


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write all or nothing: readers see the old file or the new one, never a partial one.

    The one atomic writer of the project (expanded plans, reports, tuned kernel tables).
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600: give it the mode a plain open() would (tables, plans and
        # manifests are read by other users and processes, e.g. a serving process of another uid).
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
