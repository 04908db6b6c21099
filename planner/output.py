"""Render an expanded plan: YAML (people, golden files), JSON (tools), table (a summary).

The YAML form is written by hand rather than by a YAML library: it must be
byte-stable across library versions, fast, and compact where plans are long.
Compression (lossless, documented in schemas/expanded-plan.schema.json): inside a
list of integers, a run of four or more values with a constant step is written
as the string "a..b" (step 1) or "a..b/s" (step s). `expand_runs` undoes it.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from functools import lru_cache

WRAP = 100
MIN_RUN = 4
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "~"}  # what PyYAML reads as non-strings
_INT = {int}  # exact type: bools are ints too, but not M-values
_RUN = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:/(\d+))?$")
HEADER = ("# warmup-planner expanded plan (schemas/expanded-plan.schema.json).\n"
          '# Integer runs are compressed: "a..b" is every integer from a to b, "a..b/s" steps by s.\n')


# --- compression -----------------------------------------------------------------

def compress_runs(values: list[int]) -> list:
    n = len(values)
    if n >= MIN_RUN and values[1] > values[0]:  # fast path: the whole list is one run (full M-values)
        stride = values[1] - values[0]
        if values[-1] - values[0] == stride * (n - 1) and values == list(range(values[0], values[-1] + 1, stride)):
            return [f"{values[0]}..{values[-1]}" + ("" if stride == 1 else f"/{stride}")]
    out, i = [], 0
    while i < n:
        j = i
        if i + 1 < n and values[i + 1] > values[i]:
            stride = values[i + 1] - values[i]
            while j + 1 < n and values[j + 1] - values[j] == stride:
                j += 1
            if j - i + 1 >= MIN_RUN:
                out.append(f"{values[i]}..{values[j]}" + ("" if stride == 1 else f"/{stride}"))
                i = j + 1
                continue
        out.append(values[i])
        i += 1
    return out


def expand_runs(items: list) -> list:
    """Inverse of compress_runs; other strings are left alone."""
    out: list = []
    for item in items:
        m = _RUN.match(item) if isinstance(item, str) else None
        if m:
            start, stop, stride = int(m[1]), int(m[2]), int(m[3] or 1)
            out.extend(range(start, stop + 1, stride))
        else:
            out.append(item)
    return out


def decompress(value):
    """Undo compression everywhere in a loaded YAML plan."""
    if isinstance(value, dict):
        return {k: decompress(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decompress(v) for v in expand_runs(value)]
    return value


# --- YAML --------------------------------------------------------------------------

def to_yaml(plan: dict) -> str:
    lines = [HEADER.rstrip("\n")]
    for key, value in plan.items():
        if key == "steps" and value:
            lines.append("steps:")
            for step in value:
                lines.extend(_step_lines(step))
        elif isinstance(value, dict):
            lines.append(f"{key}:")
            lines.extend(f"  {k}: {_flow(v, len(k) + 4)}" for k, v in value.items())
        else:
            lines.append(f"{key}: {_flow(value, len(key) + 2)}")
    return "\n".join(lines) + "\n"


def _step_lines(step: dict) -> list[str]:
    lines, first = [], True
    for key, value in step.items():
        prefix = "- " if first else "  "
        first = False
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"{prefix}{key}:")
            lines.extend(f"  - {_flow(item, 4)}" for item in value)
        else:
            lines.append(f"{prefix}{key}: {_flow(value, len(key) + 4)}")
    return lines


def _flow(value, indent: int) -> str:
    kind = type(value)  # exact types first: this runs once per value of a long plan
    if kind is int:
        return str(value)
    if kind is dict:
        # Integers inline: a long plan is mostly request mappings of small integers.
        return "{" + ", ".join([f"{_string(k)}: {v}" if type(v) is int else f"{_string(k)}: {_flow(v, indent)}"
                                for k, v in value.items()]) + "}"
    if kind is list:
        if len(value) >= MIN_RUN and set(map(type, value)) == _INT:  # in C: full M-value lists are long
            value = compress_runs(value)
        items = [str(v) if type(v) is int else _flow(v, indent) for v in value]
        text = "[" + ", ".join(items) + "]"
        return text if len(text) + indent <= WRAP else _wrap(items, indent)
    if kind is str:
        return _string(value)
    return yaml_scalar(value)


def _wrap(items: list[str], indent: int) -> str:
    """A flow list too long for one line, broken so that long M-value lists diff line by line."""
    lines, current = [], "["
    for item in items:
        if len(current) + len(item) + indent > WRAP and current != "[":
            lines.append(current.rstrip())
            current = ""
        current += item + ", "
    lines.append(current[:-2] + "]")
    return ("\n" + " " * indent).join(lines)


def yaml_scalar(value) -> str:
    """One YAML scalar that PyYAML (YAML 1.1) reads back as the same value and type."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    return _string(str(value))


@lru_cache(maxsize=4096)
def _string(text: str) -> str:
    """A string scalar, plain when YAML reads it back as the same string, else double-quoted."""
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    return json.dumps(text)


def _float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    if "e" in text and "." not in text.split("e")[0]:  # YAML 1.1 floats need a dot
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


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
    return "\n".join(lines) + "\n"


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
