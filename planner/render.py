"""Render an expanded plan: YAML (people, golden files), JSON (tools), table (a summary).

YAML goes through the planner's one YAML codec (planner/yamlio.py), with integer runs
compressed ("a..b", "a..b/s"; lossless, see schemas/expanded-plan.schema.json). Writing the
text where `-o` says is planner/output.py's business; this module only makes it.
"""

from __future__ import annotations

import json

from .words import count
from .yamlio import dump

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
    # Imported here: the table's detail is a reviewer's phrasing, which yaml and json plans
    # do not pay for (the start-up rule: planner/__init__.py).
    from .review.phrasing import table_detail

    rows = [("stage", "kind", "steps", "calls", "detail")]
    for (stage, kind), group in _groups(plan.steps).items():
        rows.append((stage, kind, str(len(group)), str(sum(s.planned_calls() for s in group)),
                     table_detail(group)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"Plan {plan.plan} for engine {plan.engine} ({plan.digest[:19]})", ""]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4])
    s = plan.summary
    lines += ["", f"Totals: {count(s['steps'], 'step')}; {count(s['requests'], 'request')}, "
              f"{count(s['scheduled_tokens'], 'scheduled token')}; {count(s['gemm_calls'], 'GEMM call')} over "
              f"{count(s['gemm_shapes'], 'shape')}; {count(s['attention_calls'], 'attention call')}; "
              f"{count(s['autotune_runs'], 'autotune run')}; {count(s['cudagraph_captures'], 'CUDA graph')}"]
    return "\n".join(lines + _not_modelled(plan.not_modelled)) + "\n"


def _not_modelled(gaps) -> list[str]:
    """The plan's gaps, one block each: what the engine warms and the plan does not."""
    if not gaps:
        return []
    lines = ["", f"Not modelled ({len(gaps)} of what the engine warms, which this plan does not):"]
    for gap in gaps:
        lines += [f"  - {gap['family']}: {gap['why']}", f"    what to do: {gap['action']}"]
    return lines


def _groups(steps) -> dict:
    groups: dict = {}
    for s in steps:
        groups.setdefault((s.stage, s.kind), []).append(s)
    return groups


# Renderers of an ExpandedPlan: YAML and JSON write its plain form, the table reads its steps.
RENDERERS = {"yaml": lambda plan: to_yaml(plan.to_dict()), "json": lambda plan: to_json(plan.to_dict()),
             "table": to_table}
