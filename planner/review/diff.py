"""Semantic diff of two expanded plans, rendered like `terraform plan`.

Steps are matched by id (STAGE/NAME, stable across runs). A changed step is
described by what a reviewer asks about its kind (a prefill's prompt length and
request count, a GEMM's M-values, a capture's sizes), never by its raw text, and
long lists are shown as counts and a few examples. The result is plain data
(`PlanDiff`); `render_text`, `render_markdown` and `render_json` present it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..expand import summarize

SHORT_LIST = 6        # lists of at most this many values are shown whole
EXAMPLES = 4          # otherwise: a count and this many examples
KEY_EXAMPLES = 3      # compile keys are long: at most this many are shown
ACTIONS = {"+": "add", "-": "remove", "~": "change", "-/+": "replace"}
VERBS = {"+": "will be added", "-": "will be removed", "~": "will change", "-/+": "will be replaced"}
LEGEND = "Steps are matched by id. Symbols:  + add   - remove   ~ change   -/+ replace (same layers, new shape)"
TOTALS = (("gemm_calls", "GEMM calls"), ("requests", "requests"), ("scheduled_tokens", "scheduled tokens"),
          ("gemm_shapes", "GEMM shapes"), ("attention_calls", "attention calls"),
          ("autotune_runs", "autotune runs"), ("cudagraph_captures", "CUDA graphs"))
INT_SETS = ("m_values", "sizes", "uniform_decode_sizes", "buckets")  # compared as sets; order changes still show
IGNORED = ("id", "stage", "key_m_values")  # key_m_values follow from compile_keys and m_values


class IntSet(tuple):
    """A list of integers a reviewer reads as a set: diffs show what was added and removed."""


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

    @property
    def equal(self) -> bool:
        return not self.changes

    def counts(self) -> dict:
        """Steps added, removed, changed; a replacement counts as one added and one removed."""
        n = {a: sum(1 for c in self.changes if c.action == a) for a in ("+", "-", "~", "-/+")}
        return {"+": n["+"] + n["-/+"], "-": n["-"] + n["-/+"], "~": n["~"], "-/+": n["-/+"]}

    def summary_line(self) -> str:
        if self.equal:
            return "No changes."
        n = self.counts()
        replaced = f" ({n['-/+']} replaced)" if n["-/+"] else ""
        parts = [f"Plan: +{_count(n['+'], 'step')}, -{_count(n['-'], 'step')}, ~{n['~']} changed{replaced}"]
        parts += [f"{label} {self.totals[key][0]} -> {self.totals[key][1]}" for key, label in TOTALS
                  if key in self.totals]
        return "; ".join(parts)


def diff_plans(old: dict, new: dict) -> PlanDiff:
    old_steps = {s["id"]: s for s in old["steps"]}
    new_steps = {s["id"]: s for s in new["steps"]}
    order = _merged_order(old["steps"], new["steps"])
    replaced = _replacements([old_steps[i] for a, i in order if a == "-"],
                             [new_steps[i] for a, i in order if a == "+"])
    replacing = {new_id: old_id for old_id, new_id in replaced.items()}
    changes = []
    for action, step_id in order:
        if action == "-" and step_id in replaced:
            continue  # shown with the step that replaces it
        if action == "+" and step_id in replacing:
            before, after = old_steps[replacing[step_id]], new_steps[step_id]
            a, b = facts(before), facts(after)
            fields = {k: _field_json(a.get(k), b.get(k)) for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)}
            changes.append(Change("-/+", step_id, after["kind"], [describe(before), describe(after)],
                                  fields, old_id=before["id"], layers=after["layers"]))
        elif action == "+":
            s = new_steps[step_id]
            changes.append(Change("+", step_id, s["kind"], [describe(s)]))
        elif action == "-":
            s = old_steps[step_id]
            changes.append(Change("-", step_id, s["kind"], [describe(s)]))
        else:
            change = diff_step(old_steps[step_id], new_steps[step_id])
            if change is not None:
                changes.append(change)
    before, after = summarize(old["steps"]), summarize(new["steps"])
    totals = {key: (before[key], after[key]) for key, _ in TOTALS if before[key] != after[key]}
    inputs = [k for k in ("plan", "engine", "planner") if old["inputs"][k] != new["inputs"][k]]
    return PlanDiff(_header(old), _header(new), _header_lines(old, new, inputs), inputs, changes, totals)


def _replacements(removed: list, added: list) -> dict:
    """old id -> new id for a removed and an added step that warm the same layers in another shape.

    A tensor-parallel change reshapes every GEMM: `terraform plan` calls that a
    replacement, and a reviewer wants to see `n=6144 k=1536` become `n=3072 k=1536`.
    """
    def key(s):
        layers = s.get("layers")
        return (s["stage"], s["kind"], s.get("weight"), tuple(layers)) if layers else None

    candidates: dict = {}
    for s in added:
        if key(s) is not None:
            candidates.setdefault(key(s), []).append(s["id"])
    pairs = {}
    for s in removed:
        match = candidates.get(key(s))
        if key(s) is not None and match:
            pairs[s["id"]] = match.pop(0)
    return pairs


def _merged_order(old: list, new: list) -> list[tuple[str, str]]:
    """Every id once, in the new plan's order, each removed step after the step it followed."""
    new_ids = {s["id"] for s in new}
    old_ids = {s["id"] for s in old}
    removed_after: dict = {}
    anchor = None
    for s in old:
        if s["id"] in new_ids:
            anchor = s["id"]
        else:
            removed_after.setdefault(anchor, []).append(s["id"])
    out = [("-", i) for i in removed_after.get(None, [])]
    for s in new:
        out.append(("=" if s["id"] in old_ids else "+", s["id"]))
        out += [("-", i) for i in removed_after.get(s["id"], [])]
    return out


def _header(plan: dict) -> dict:
    return {k: plan[k] for k in ("plan", "engine", "digest", "inputs")}


def _header_lines(old: dict, new: dict, inputs: list[str]) -> list[str]:
    parts = [f"{key} {old[key]} -> {new[key]}" for key in ("plan", "engine") if old[key] != new[key]]
    if old["inputs"]["planner"] != new["inputs"]["planner"]:
        parts.append(f"planner {old['inputs']['planner']} -> {new['inputs']['planner']}")
    if inputs:
        parts.append("inputs changed: " + ", ".join("engine config" if i == "engine" else i for i in inputs))
    return ["; ".join(parts)] if parts else []


# --- what a step is, to a reviewer -----------------------------------------------------

def _spread(values: list) -> object:
    """One value if all are equal, else 'lo..hi'."""
    lo, hi = min(values), max(values)
    return lo if lo == hi else f"{lo}..{hi}"


def _blocks_per_request(requests: list, key: str) -> object:
    per_group = [[len(g) for g in (r.get(key) or [])] for r in requests]
    if not per_group or not per_group[0]:
        return 0
    groups = [_spread([counts[g] if g < len(counts) else 0 for counts in per_group])
              for g in range(max(len(c) for c in per_group))]
    return groups[0] if len(groups) == 1 else " + ".join(str(g) for g in groups)


def facts(step: dict) -> dict:
    """The semantic content of a step, named as a reviewer would say it."""
    kind = step["kind"]
    reqs = step.get("requests") or []
    if kind == "prefill":
        out = {"prompt_len": _spread([r["num_scheduled_tokens"] for r in reqs]) if reqs else 0,
               "num_reqs": len(reqs), "tokens": step["total_num_scheduled_tokens"],
               "blocks per request": _blocks_per_request(reqs, "block_ids")}
    elif kind == "decode":
        out = {"requests": len(reqs), "tokens": step["total_num_scheduled_tokens"],
               "tokens per request": _spread([r["num_scheduled_tokens"] for r in reqs]) if reqs else 0,
               "computed tokens per request": _spread([r["num_computed_tokens"] for r in reqs]) if reqs else 0,
               "spec tokens per request": _spread([r["num_spec_tokens"] for r in reqs]) if reqs else 0,
               "new blocks": sum(len(ids) for r in reqs for ids in (r.get("new_block_ids") or []))}
    elif kind == "cleanup":
        out = {"finished requests": len(step["finished_req_ids"])}
    elif kind == "sample":
        g = step.get("grammar_bitmask")
        out = {"grammar bitmask": f"{g['num_rows']} rows x {g['width']} words" if g else "none",
               "features": frozenset(step.get("features", [])),
               "sampling_params": step.get("sampling_params")}
    else:
        out = {}
        for key, value in step.items():
            if key in IGNORED or key == "kind":
                continue
            if key in INT_SETS and isinstance(value, list):
                out[key] = IntSet(sorted(set(value)))
            elif key in ("layers", "compile_keys") and isinstance(value, list):
                out[key] = frozenset(value)
            elif key == "shapes" and isinstance(value, list):
                out[key] = frozenset(f"{s.get('kernel', '?')} n={s.get('n')} k={s.get('k')}" for s in value)
            else:
                out[key] = value
    return out


def describe(step: dict) -> str:
    """One line for an added or removed step."""
    kind, f = step["kind"], facts(step)
    if kind == "prefill":
        return (f"prefill: {f['num_reqs']} requests x {f['prompt_len']} tokens ({f['tokens']} tokens, "
                f"{f['blocks per request']} blocks per request)")
    if kind == "decode":
        return (f"decode: {_count(f['requests'], 'request')}, {_count(f['tokens'], 'token')} "
                f"({f['spec tokens per request']} spec tokens per request)")
    if kind == "sample":
        return f"sample: {len(f['features'])} sampler features, grammar bitmask {f['grammar bitmask']}"
    if kind == "cleanup":
        return f"cleanup: {f['finished requests']} requests finish"
    if kind in ("gemm", "grouped_gemm"):
        return (f"{_gemm_name(step)} ({step.get('kernel')}, {step.get('backend')}): "
                f"{_list_summary(step['m_values'], 'M-values')}")
    if kind == "cudagraph":
        return (f"cudagraph {step['mode']}: {_list_summary(step['sizes'], 'sizes')}, "
                f"{_list_summary(step.get('uniform_decode_sizes', []), 'uniform decode sizes')}")
    if kind == "autotune":
        buckets = step.get("buckets")
        return (f"autotune {step['library']} at {step['num_tokens']} tokens"
                + (f", {_list_summary(buckets, 'buckets')}" if buckets else ""))
    if kind == "attention":
        return (f"attention {step['kernel']} heads={step['num_heads']} kv_heads={step['num_kv_heads']} "
                f"head_size={step['head_size']}: {step['num_tokens']} tokens")
    if kind == "kernel":
        return f"kernel {step['kernel']} ({step.get('backend')}): {_count(len(step['variants']), 'variant')}"
    return kind


def _gemm_name(step: dict) -> str:
    if step["kind"] == "grouped_gemm":
        return f"grouped_gemm {step.get('weight')} experts={step.get('num_groups')} n={step['n']} k={step['k']}"
    return f"gemm n={step['n']} k={step['k']}"


# --- changes ---------------------------------------------------------------------------

def diff_step(old: dict, new: dict) -> Change | None:
    if {k: v for k, v in old.items() if k not in IGNORED} == {k: v for k, v in new.items() if k not in IGNORED}:
        return None
    before, after = facts(old), facts(new)
    changed = [k for k in dict.fromkeys([*before, *after]) if before.get(k) != after.get(k)]
    fields = {k: _field_json(before.get(k), after.get(k)) for k in changed}
    lines = _lines(new["kind"], new, before, after, changed)
    if not lines:  # same facts, other bytes: say which raw fields differ rather than claim nothing
        raw = [k for k in dict.fromkeys([*old, *new]) if k not in IGNORED and old.get(k) != new.get(k)]
        if any(k in INT_SETS for k in raw) and all(before.get(k) == after.get(k) for k in raw if k in INT_SETS):
            lines.append("same values in another order: " + ", ".join(k for k in raw if k in INT_SETS))
            raw = [k for k in raw if k not in INT_SETS]
        if raw:
            lines.append("changed: " + ", ".join(raw) + " (same counts; ids or values differ)")
        fields = {k: {"changed": True} for k in raw} or fields
    return Change("~", new["id"], new["kind"], lines, fields)


def _lines(kind: str, step: dict, before: dict, after: dict, changed: list[str]) -> list[str]:
    lines, rest = [], list(changed)

    def take(key):
        rest.remove(key)
        return f"{key} {_show(before.get(key))} -> {_show(after.get(key))}"

    if kind == "prefill" and ("prompt_len" in rest or "num_reqs" in rest):
        main = "prompt_len" if "prompt_len" in rest else "num_reqs"
        other = "num_reqs" if main == "prompt_len" else "prompt_len"
        first = take(main)
        detail = take(other) if other in rest else f"{other} {_show(after[other])}"
        if "tokens" in rest:
            detail += ", " + take("tokens")
        lines.append(f"prefill: {first} ({detail})")
    elif kind == "decode" and rest:
        context = "" if "requests" in rest else f" ({_count(after['requests'], 'request')})"
        totals = [take(k) for k in ("requests", "tokens", "new blocks") if k in rest]
        if not totals:
            context = f" ({_count(after['tokens'], 'token')}, unchanged)"
            totals = [_count(after["requests"], "request")]
        lines.append("decode: " + ", ".join(totals) + context)
        per = [take(k).replace(" per request", "") for k in ("tokens per request", "spec tokens per request",
                                                            "computed tokens per request") if k in rest]
        if per:
            lines.append("per request: " + ", ".join(per))
    elif kind in ("gemm", "grouped_gemm") and "m_values" in rest:
        rest.remove("m_values")
        change = _set_change(before.get("m_values"), after.get("m_values"), "M-values", always_both=True)
        lines.append(f"{_gemm_name(step)}: {change}")
    if kind in ("gemm", "grouped_gemm", "attention", "kernel") and "compile_keys" in rest:
        rest.remove("compile_keys")
        if "variants" in rest:  # the launch arguments of the keys: the key change says it
            rest.remove("variants")
        name = {"attention": f"attention h={step.get('num_heads')} d={step.get('head_size')}",
                "kernel": f"kernel {step.get('kernel')}"}.get(kind) or _gemm_name(step)
        lines.append(f"{name}: {_key_change(before.get('compile_keys'), after.get('compile_keys'))}")
    if kind == "cudagraph":
        for key, label in (("sizes", "cudagraph sizes"), ("uniform_decode_sizes", "uniform decode sizes")):
            if key in rest:
                rest.remove(key)
                lines.append(f"{label}: {_set_change(before.get(key), after.get(key))}")
    for key in rest:
        old, new = before.get(key), after.get(key)
        if isinstance(old, (IntSet, frozenset)) or isinstance(new, (IntSet, frozenset)):
            lines.append(f"{key}: {_set_change(old, new)}")
        elif isinstance(old, dict) and isinstance(new, dict):
            lines.append(f"{key}: {_dict_change(old, new)}")
        else:
            lines.append(f"{key} {_show(old)} -> {_show(new)}")
    return lines


def _set_change(old, new, noun: str = "", always_both: bool = False) -> str:
    """'+[520, 528]' for a few values; '+12 M-values (1, 3, 5, 7, ...), -0' for many."""
    old, new = set(old or ()), set(new or ())
    added, removed = sorted(new - old, key=_order), sorted(old - new, key=_order)
    if not always_both and len(added) <= SHORT_LIST and len(removed) <= SHORT_LIST:
        return ", ".join(f"{sign}[{', '.join(map(str, values))}]"
                         for sign, values in (("+", added), ("-", removed)) if values)
    plus = f"+{len(added)}" + (f" {noun}" if noun else "") + (f" ({_examples(added)})" if added else "")
    minus = f"-{len(removed)}" + (f" ({_examples(removed)})" if removed else "")
    return f"{plus}, {minus}"


def _key_change(old, new) -> str:
    """'+1 compile key (fp8_gemm[...]), -0': compile keys are what a warmup compiles."""
    old, new = set(old or ()), set(new or ())
    added, removed = sorted(new - old), sorted(old - new)

    def part(sign, keys):
        noun = "compile key" if len(keys) == 1 else "compile keys"
        shown = "; ".join(keys[:KEY_EXAMPLES]) + ("; ..." if len(keys) > KEY_EXAMPLES else "")
        return f"{sign}{len(keys)} {noun}" + (f" ({shown})" if keys else "")

    return f"{part('+', added)}, {part('-', removed)}"


def _order(value):
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def _dict_change(old: dict, new: dict) -> str:
    parts = []
    for key in dict.fromkeys([*old, *new]):
        if key not in new:
            parts.append(f"-{key}")
        elif key not in old:
            parts.append(f"+{key} {_show(new[key])}")
        elif old[key] != new[key]:
            parts.append(f"{key} {_show(old[key])} -> {_show(new[key])}")
    return ", ".join(parts)


def _examples(values: list) -> str:
    shown = ", ".join(str(v) for v in values[:EXAMPLES])
    return shown + (", ..." if len(values) > EXAMPLES else "")


def _list_summary(values, noun: str) -> str:
    values = list(values or [])
    if len(values) <= SHORT_LIST:
        return f"{noun} [{', '.join(map(str, values))}]"
    ordered = sorted(values)
    return f"{len(values)} {noun} ({', '.join(map(str, ordered[:3]))}, ..., {ordered[-1]})"


def _show(value) -> str:
    if isinstance(value, (list, tuple)) and len(value) > SHORT_LIST:
        return _list_summary(value, "values")
    if isinstance(value, (frozenset, set)):
        return "[" + ", ".join(sorted(map(str, value))) + "]"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True) if len(json.dumps(value)) <= 60 else f"{{{len(value)} keys}}"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _field_json(old, new) -> dict:
    if isinstance(old, (IntSet, frozenset)) or isinstance(new, (IntSet, frozenset)):
        o, n = set(old or ()), set(new or ())
        added, removed = sorted(n - o, key=_order), sorted(o - n, key=_order)
        return {"added": len(added), "removed": len(removed),
                "added_examples": added[:EXAMPLES], "removed_examples": removed[:EXAMPLES]}
    return {"old": _jsonable(old), "new": _jsonable(new)}


def _jsonable(value):
    if isinstance(value, (list, tuple)) and len(value) > SHORT_LIST:
        return {"count": len(value), "examples": list(value)[:EXAMPLES]}
    return value


def _count(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else word + 's'}"


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


def render_text(d: PlanDiff) -> str:
    out = [f"warmup diff: {_title(d)}"]
    out += [f"~ header: {line}" for line in d.header]
    if d.equal:
        out += ["", "No changes. The expanded steps are identical."]
        return "\n".join(out) + "\n"
    out += ["", LEGEND, ""]
    out += [f"  {line}" if line else "" for line in _blocks(d)]
    out += ["", d.summary_line()]
    return "\n".join(out) + "\n"


def render_markdown(d: PlanDiff) -> str:
    out = [f"### Warmup plan: {_title(d, lambda s: f'`{s}`')}", ""]
    if d.header:
        out += [f"Header: {d.header[0]}", ""]
    if d.equal:
        out.append("**No changes.** The expanded steps are identical.")
        return "\n".join(out) + "\n"
    out += [f"**{d.summary_line()}**", "", f"<details open><summary>{LEGEND}</summary>", "", "```diff"]
    out += _blocks(d)
    out += ["```", "", "</details>"]
    return "\n".join(out) + "\n"


def render_json(d: PlanDiff) -> str:
    n = d.counts()
    data = {
        "format": "warmup-plan-diff/v1",
        "equal": d.equal,
        "old": d.old,
        "new": d.new,
        "header": d.header,
        "inputs_changed": d.inputs_changed,
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
        return sorted(value, key=_order)
    raise TypeError(type(value).__name__)


RENDERERS = {"text": render_text, "markdown": render_markdown, "json": render_json}
