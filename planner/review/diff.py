"""Semantic diff of two expanded plans, rendered like `terraform plan`.

Steps are matched by id (STAGE/NAME, stable across runs). A changed step is
described by what a reviewer asks about its kind (a prefill's prompt length and
request count, a GEMM's M-values, a capture's sizes), never by its raw text, and
long lists are shown as counts and a few examples. The result is plain data
(`PlanDiff`); `render_text`, `render_markdown` and `render_json` present it.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from typing import NamedTuple

from ..plan.expanded import ExpandedPlan
from ..plan.steps import Attention, GemmLike, GroupedGemm
from ..words import EXAMPLES, SHORT_LIST, FactChanges, IntSet, count, order
from .phrasing import change_lines, describe, facts

ACTIONS = {"+": "add", "-": "remove", "~": "change", "-/+": "replace"}
VERBS = {"+": "will be added", "-": "will be removed", "~": "will change", "-/+": "will be replaced"}
LEGEND = "Steps are matched by id. Symbols:  + add   - remove   ~ change   -/+ replace (same layers, new shape)"
TOTALS = (("gemm_calls", "GEMM calls"), ("requests", "requests"), ("scheduled_tokens", "scheduled tokens"),
          ("gemm_shapes", "GEMM shapes"), ("attention_calls", "attention calls"),
          ("autotune_runs", "autotune runs"), ("cudagraph_captures", "CUDA graphs"))
INT_SETS = ("m_values", "sizes", "uniform_decode_sizes", "buckets")  # compared as sets; order changes still show
IGNORED = ("id", "stage")


@dataclass
class Change:
    action: str                 # "+", "-", "~" or "-/+" (replaced: removed, and added in another shape)
    id: str
    kind: str
    lines: list[str]            # the description (+/-), one semantic change each (~), old and new (-/+)
    fields: dict = field(default_factory=dict)  # for tools: fact -> {"old", "new"} or {"added", "removed"}
    old_id: str | None = None   # the step a "-/+" replaces
    layers: list | None = None  # the layers both steps warm (-/+)


@dataclass
class PlanDiff:
    old: dict                   # header of each plan: plan, engine, digest, inputs
    new: dict
    header: list[str]           # changes of the plan header, one line each
    inputs_changed: list[str]
    changes: list[Change]
    totals: dict                # summary key -> (old, new)
    not_modelled: list = field(default_factory=list)  # families the new plan does not model
    stage_order: StageOrder | None = None  # the stages both plans run, when they run them in another order

    @property
    def equal(self) -> bool:
        return not self.changes and self.stage_order is None

    def counts(self) -> dict:
        """Steps added, removed, changed; a replacement counts as one added and one removed."""
        n = {a: sum(1 for c in self.changes if c.action == a) for a in ("+", "-", "~", "-/+")}
        return {"+": n["+"] + n["-/+"], "-": n["-"] + n["-/+"], "~": n["~"], "-/+": n["-/+"]}

    def summary_line(self) -> str:
        if self.equal:
            return "No changes."
        n = self.counts()
        replaced = f" ({n['-/+']} replaced)" if n["-/+"] else ""
        parts = [f"Plan: +{count(n['+'], 'step')}, -{count(n['-'], 'step')}, ~{n['~']} changed{replaced}"]
        parts += ["stage order changed"] if self.stage_order else []
        parts += [f"{label} {self.totals[key][0]} -> {self.totals[key][1]}" for key, label in TOTALS
                  if key in self.totals]
        return "; ".join(parts)


@dataclass
class StageOrder:
    """The stages both plans run, in the order of each (stages one plan lacks show as steps)."""

    old: list[str]
    new: list[str]

    def moved(self) -> list[str]:
        """What moved, one phrase a stage: the fewest stages whose moves turn the old order into
        the new one (the others keep their order), each placed after its new predecessor."""
        kept = _common_subsequence(self.old, self.new)
        return [f"{stage} now runs {'after ' + self.new[i - 1] if i else 'first'}"
                for i, stage in enumerate(self.new) if stage not in kept]

    def line(self) -> str:
        return f"{', '.join(self.old)} -> {', '.join(self.new)} ({'; '.join(self.moved())})"

    def to_json(self) -> dict:
        return {"old": self.old, "new": self.new, "moved": self.moved()}


def stage_order(old: ExpandedPlan, new: ExpandedPlan) -> StageOrder | None:
    """The order in which each plan first runs each stage both run, when the two differ."""
    before = list(dict.fromkeys(s.stage for s in old.steps))
    after = list(dict.fromkeys(s.stage for s in new.steps))
    common_old = [stage for stage in before if stage in after]
    common_new = [stage for stage in after if stage in before]
    return None if common_old == common_new else StageOrder(common_old, common_new)


def _common_subsequence(a: list, b: list) -> set:
    """The items of a longest common subsequence of a and b; of several, the one that keeps b's
    earliest items (so a stage moved later is the one named)."""
    longest = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]  # longest[i][j]: of a[i:] and b[j:]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            longest[i][j] = (longest[i + 1][j + 1] + 1 if a[i] == b[j]
                             else max(longest[i + 1][j], longest[i][j + 1]))
    kept, i, j = set(), 0, 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            kept.add(a[i])
            i, j = i + 1, j + 1
        elif longest[i + 1][j] >= longest[i][j + 1]:
            i += 1
        else:
            j += 1
    return kept


class PackedStep(NamedTuple):
    """What `warmup diff` holds of a step of a saved plan (planner.plan.streaming's `keep`): the
    step pickled, and what the diff reads of every step (its id, stage, kind, replacement key and
    totals). The 15.5 MB plan of planner/plan/streaming.py, 77 MB as typed steps, is 11 MB so; a
    step is unpacked only where the diff describes it (added, removed, replaced, or changed: its
    pickle differs; equal pickles are equal steps)."""

    id: str
    stage: str
    kind: str
    replaces: tuple | None   # _replacement_key
    step_totals: dict
    blob: bytes

    def totals(self) -> dict:  # planner.plan.expanded.summarize reads a step's kind and totals
        return self.step_totals

    def unpack(self):
        return pickle.loads(self.blob)


def pack(step) -> PackedStep:
    """A step as `warmup diff` holds it."""
    return PackedStep(step.id, step.stage, step.kind, _replacement_key(step), step.totals(),
                      pickle.dumps(step, protocol=pickle.HIGHEST_PROTOCOL))


def _unpacked(step):
    return step.unpack() if type(step) is PackedStep else step


def _same_pickle(old, new) -> bool:
    """Equal steps for sure (equal pickles); unequal pickles may still be equal steps."""
    return type(old) is PackedStep and type(new) is PackedStep and old.blob == new.blob


def diff_plans(old: ExpandedPlan, new: ExpandedPlan) -> PlanDiff:
    """The differences of two plans, whose steps may be typed steps or PackedSteps."""
    old_steps = {s.id: s for s in old.steps}
    new_steps = {s.id: s for s in new.steps}
    order_ = _merged_order(old.steps, new.steps)
    replaced = _replacements([old_steps[i] for a, i in order_ if a == "-"],
                             [new_steps[i] for a, i in order_ if a == "+"])
    replacing = {new_id: old_id for old_id, new_id in replaced.items()}
    changes = []
    for action, step_id in order_:
        if action == "-" and step_id in replaced:
            continue  # shown with the step that replaces it
        if action == "+" and step_id in replacing:
            changes.append(_replacement(_unpacked(old_steps[replacing[step_id]]), _unpacked(new_steps[step_id])))
        elif action == "+":
            s = new_steps[step_id]
            changes.append(Change("+", step_id, s.kind, [describe(_unpacked(s))]))
        elif action == "-":
            s = old_steps[step_id]
            changes.append(Change("-", step_id, s.kind, [describe(_unpacked(s))]))
        elif not _same_pickle(old_steps[step_id], new_steps[step_id]):
            change = diff_step(_unpacked(old_steps[step_id]), _unpacked(new_steps[step_id]))
            if change is not None:
                changes.append(change)
    before, after = old.summary, new.summary
    totals = {key: (before[key], after[key]) for key, _ in TOTALS if before[key] != after[key]}
    inputs = [k for k in ("plan", "engine", "planner") if old.inputs[k] != new.inputs[k]]
    return PlanDiff(old.header(), new.header(), _header_lines(old, new, inputs) + _gap_lines(old, new), inputs,
                    changes, totals, [gap["family"] for gap in new.not_modelled], stage_order(old, new))


def _gap_lines(old: ExpandedPlan, new: ExpandedPlan) -> list[str]:
    """A header line when the plans' not-modelled families differ: a gap closed or opened."""
    before = [g["family"] for g in old.not_modelled]
    after = [g["family"] for g in new.not_modelled]
    changes = [f"+{f}" for f in after if f not in before] + [f"-{f}" for f in before if f not in after]
    return ["not modelled: " + ", ".join(changes)] if changes else []


def _replacement(before, after) -> Change:
    a, b = facts(before), facts(after)
    fields = {k: _field_json(a.get(k), b.get(k)) for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)}
    return Change("-/+", after.id, after.kind, [describe(before), describe(after)], fields, old_id=before.id,
                  layers=list(after.layers))


def _replacements(removed: list, added: list) -> dict:
    """old id -> new id for a removed and an added step that warm the same layers in another shape.

    A tensor-parallel change reshapes every GEMM: `terraform plan` calls that a
    replacement, and a reviewer wants to see `n=6144 k=1536` become `n=3072 k=1536`.
    """
    def key(s):
        return s.replaces if type(s) is PackedStep else _replacement_key(s)

    candidates: dict = {}
    for s in added:
        if key(s) is not None:
            candidates.setdefault(key(s), []).append(s.id)
    pairs = {}
    for s in removed:
        match = candidates.get(key(s))
        if key(s) is not None and match:
            pairs[s.id] = match.pop(0)
    return pairs


def _replacement_key(s) -> tuple | None:
    """What a removed and an added step share when one replaces the other (_replacements)."""
    if not isinstance(s, (GemmLike, Attention)) or not s.layers:
        return None  # only a step that warms layers is replaced
    return (s.stage, s.kind, s.weight if isinstance(s, GroupedGemm) else None, tuple(s.layers))


def _merged_order(old, new) -> list[tuple[str, str]]:
    """Every id once, in the new plan's order, each removed step after the step it followed."""
    new_ids = {s.id for s in new}
    old_ids = {s.id for s in old}
    removed_after: dict = {}
    anchor = None
    for s in old:
        if s.id in new_ids:
            anchor = s.id
        else:
            removed_after.setdefault(anchor, []).append(s.id)
    out = [("-", i) for i in removed_after.get(None, [])]
    for s in new:
        out.append(("=" if s.id in old_ids else "+", s.id))
        out += [("-", i) for i in removed_after.get(s.id, [])]
    return out


def _header_lines(old: ExpandedPlan, new: ExpandedPlan, inputs: list[str]) -> list[str]:
    parts = [f"{key} {getattr(old, key)} -> {getattr(new, key)}" for key in ("plan", "engine")
             if getattr(old, key) != getattr(new, key)]
    if old.inputs["planner"] != new.inputs["planner"]:
        parts.append(f"planner {old.inputs['planner']} -> {new.inputs['planner']}")
    if inputs:
        parts.append("inputs changed: " + ", ".join("engine config" if i == "engine" else i for i in inputs))
    return ["; ".join(parts)] if parts else []


# --- changes ---------------------------------------------------------------------------

def diff_step(old, new) -> Change | None:
    if old == new:
        return None
    before, after = facts(old), facts(new)
    changed = [k for k in dict.fromkeys([*before, *after]) if before.get(k) != after.get(k)]
    fields = {k: _field_json(before.get(k), after.get(k)) for k in changed}
    lines = change_lines(new, FactChanges(before, after, changed))
    if not lines:  # same facts, other values: say which raw fields differ rather than claim nothing
        lines, fields = _raw_changes(old.to_dict(), new.to_dict(), before, after, fields)
    return Change("~", new.id, new.kind, lines, fields)


def _raw_changes(old: dict, new: dict, before: dict, after: dict, fields: dict) -> tuple[list, dict]:
    lines = []
    raw = [k for k in dict.fromkeys([*old, *new]) if k not in IGNORED and old.get(k) != new.get(k)]
    if any(k in INT_SETS for k in raw) and all(before.get(k) == after.get(k) for k in raw if k in INT_SETS):
        lines.append("same values in another order: " + ", ".join(k for k in raw if k in INT_SETS))
        raw = [k for k in raw if k not in INT_SETS]
    if raw:
        lines.append("changed: " + ", ".join(raw) + " (same counts; ids or values differ)")
    return lines, {k: {"changed": True} for k in raw} or fields


def _field_json(old, new) -> dict:
    if isinstance(old, (IntSet, frozenset)) or isinstance(new, (IntSet, frozenset)):
        o, n = set(old or ()), set(new or ())
        added, removed = sorted(n - o, key=order), sorted(o - n, key=order)
        return {"added": len(added), "removed": len(removed),
                "added_examples": added[:EXAMPLES], "removed_examples": removed[:EXAMPLES]}
    return {"old": _jsonable(old), "new": _jsonable(new)}


def _jsonable(value):
    if isinstance(value, (list, tuple)) and len(value) > SHORT_LIST:
        return {"count": len(value), "examples": list(value)[:EXAMPLES]}
    return value


# --- rendering -------------------------------------------------------------------------

def _title(d: PlanDiff, code=lambda s: s) -> str:
    old = f"{code(d.old['plan'])} for {code(d.old['engine'])}"
    new = f"{code(d.new['plan'])} for {code(d.new['engine'])}"
    return old if old == new else f"{old} -> {new}"


def _blocks(d: PlanDiff) -> list[str]:
    lines = []
    for c in d.changes:
        if c.action == "-/+":
            lines.append(f"# {c.old_id} -> {c.id} ({c.kind}, layers {', '.join(c.layers)}) {VERBS[c.action]}")
            lines += [f"- {c.lines[0]}", f"+ {c.lines[1]}", ""]
            continue
        lines.append(f"# {c.id} ({c.kind}) {VERBS[c.action]}")
        lines += [f"{c.action} {line}" for line in c.lines]
        lines.append("")
    return lines[:-1]


def _head(d: PlanDiff) -> list[str]:
    """The lines above the steps, in every format: header changes, then a change of stage order."""
    lines = [f"header: {line}" for line in d.header]
    return lines + ([f"stage order: {d.stage_order.line()}"] if d.stage_order else [])


def render_text(d: PlanDiff) -> str:
    out = [f"warmup diff: {_title(d)}"]
    out += [f"~ {line}" for line in _head(d)]
    if d.equal:
        out += ["", "No changes. The expanded steps are identical."]
        return "\n".join(out + _gaps(d)) + "\n"
    if d.changes:  # (a change of stage order alone has no step blocks)
        out += ["", LEGEND, ""]
        out += [f"  {line}" if line else "" for line in _blocks(d)]
    out += ["", d.summary_line()]
    return "\n".join(out + _gaps(d)) + "\n"


def _gaps(d: PlanDiff) -> list[str]:
    """What the new plan does not model, so a reviewer who trusts the diff sees the gaps too."""
    if not d.not_modelled:
        return []
    return ["", f"Not modelled by {d.new['plan']} (`warmup plan -f table` says why): " + ", ".join(d.not_modelled)]


def render_markdown(d: PlanDiff) -> str:
    out = [f"### Warmup plan: {_title(d, lambda s: f'`{s}`')}", ""]
    if _head(d):
        out += [f"- {line}" for line in _head(d)] + [""]
    if d.equal:
        out.append("**No changes.** The expanded steps are identical.")
        return "\n".join(out + _gaps(d)) + "\n"
    out.append(f"**{d.summary_line()}**")
    if d.changes:
        out += ["", f"<details open><summary>{LEGEND}</summary>", "", "```diff", *_blocks(d), "```", "", "</details>"]
    return "\n".join(out + _gaps(d)) + "\n"


def render_json(d: PlanDiff) -> str:
    n = d.counts()
    data = {
        "format": "warmup-plan-diff/v1",
        "equal": d.equal,
        "old": d.old,
        "new": d.new,
        "header": d.header,
        "stage_order": d.stage_order.to_json() if d.stage_order else None,
        "inputs_changed": d.inputs_changed,
        "not_modelled": d.not_modelled,
        "changes": [{"action": ACTIONS[c.action], "id": c.id,
                     **({"old_id": c.old_id, "layers": c.layers} if c.old_id else {}),
                     "kind": c.kind, "lines": c.lines, "fields": c.fields} for c in d.changes],
        "summary": {"added": n["+"], "removed": n["-"], "changed": n["~"], "replaced": n["-/+"],
                    "totals": {k: {"old": a, "new": b} for k, (a, b) in d.totals.items()},
                    "line": d.summary_line()},
    }
    return json.dumps(data, indent=1, sort_keys=False, default=_json_default) + "\n"


def _json_default(value):
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=order)
    raise TypeError(type(value).__name__)


RENDERERS = {"text": render_text, "markdown": render_markdown, "json": render_json}
