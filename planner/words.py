"""Words for reviewers: how `warmup diff` and the step kinds put values and their changes.

Long lists are shown as counts and a few examples, sets as what was added and removed,
compile keys (long strings) a few at a time. ``FactChanges`` walks the changed facts of
one step: a step kind takes the facts it phrases itself (planner.review.phrasing)
and leaves the rest to the generic ``key old -> new`` lines.
"""

from __future__ import annotations

import difflib
import json

SHORT_LIST = 6        # lists of at most this many values are shown whole
EXAMPLES = 4          # otherwise: a count and this many examples
KEY_EXAMPLES = 3      # compile keys are long: at most this many are shown


class IntSet(tuple):
    """A list of integers a reviewer reads as a set: diffs show what was added and removed."""


def count(n: int, word: str, many: str | None = None) -> str:
    """'1 step', '3 steps' ('3 M_sums' too; `many` for an irregular plural)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def spread(values: list) -> object:
    """One value if all are equal, else 'lo..hi'."""
    lo, hi = min(values), max(values)
    return lo if lo == hi else f"{lo}..{hi}"


def order(value):
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def examples(values: list) -> str:
    shown = ", ".join(str(v) for v in values[:EXAMPLES])
    return shown + (", ..." if len(values) > EXAMPLES else "")


def list_summary(values, noun: str) -> str:
    values = list(values or [])
    if len(values) <= SHORT_LIST:
        return f"{noun} [{', '.join(map(str, values))}]"
    ordered = sorted(values)
    return f"{len(values)} {noun} ({', '.join(map(str, ordered[:3]))}, ..., {ordered[-1]})"


def show(value) -> str:
    if isinstance(value, (list, tuple)) and len(value) > SHORT_LIST:
        return list_summary(value, "values")
    if isinstance(value, (frozenset, set)):
        return "[" + ", ".join(sorted(map(str, value))) + "]"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True) if len(json.dumps(value)) <= 60 else f"{{{len(value)} keys}}"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def set_change(old, new, noun: str = "", always_both: bool = False) -> str:
    """'+[520, 528]' for a few values; '+12 M-values (1, 3, 5, 7, ...), -0' for many."""
    old, new = set(old or ()), set(new or ())
    added, removed = sorted(new - old, key=order), sorted(old - new, key=order)
    if not always_both and len(added) <= SHORT_LIST and len(removed) <= SHORT_LIST:
        return ", ".join(f"{sign}[{', '.join(map(str, values))}]"
                         for sign, values in (("+", added), ("-", removed)) if values)
    plus = f"+{len(added)}" + (f" {noun}" if noun else "") + (f" ({examples(added)})" if added else "")
    minus = f"-{len(removed)}" + (f" ({examples(removed)})" if removed else "")
    return f"{plus}, {minus}"


def key_change(old, new) -> str:
    """'+1 compile key (fp8_gemm[...]), -0': compile keys are what a warmup compiles."""
    old, new = set(old or ()), set(new or ())
    added, removed = sorted(new - old), sorted(old - new)

    def part(sign, keys):
        shown = "; ".join(keys[:KEY_EXAMPLES]) + ("; ..." if len(keys) > KEY_EXAMPLES else "")
        return f"{sign}{count(len(keys), 'compile key')}" + (f" ({shown})" if keys else "")

    return f"{part('+', added)}, {part('-', removed)}"


def dict_change(old: dict, new: dict) -> str:
    parts = []
    for key in dict.fromkeys([*old, *new]):
        if key not in new:
            parts.append(f"-{key}")
        elif key not in old:
            parts.append(f"+{key} {show(new[key])}")
        elif old[key] != new[key]:
            parts.append(f"{key} {show(old[key])} -> {show(new[key])}")
    return ", ".join(parts)


class FactChanges:
    """The changed facts of one step, taken one by one as a step kind phrases them."""

    def __init__(self, before: dict, after: dict, changed: list[str]):
        self.before, self.after, self.rest = before, after, list(changed)

    def __contains__(self, key: str) -> bool:
        return key in self.rest

    def take(self, key: str) -> str:
        """'key old -> new', and the fact is phrased."""
        self.rest.remove(key)
        return f"{key} {show(self.before.get(key))} -> {show(self.after.get(key))}"

    def take_set(self, key: str, noun: str = "", always_both: bool = False) -> str:
        self.rest.remove(key)
        return set_change(self.before.get(key), self.after.get(key), noun, always_both)

    def take_keys(self, key: str = "compile_keys") -> str:
        self.rest.remove(key)
        return key_change(self.before.get(key), self.after.get(key))

    def drop(self, key: str) -> None:
        if key in self.rest:
            self.rest.remove(key)

    def remaining(self) -> list[str]:
        """Every fact not phrased yet, one generic line each."""
        lines = []
        for key in self.rest:
            old, new = self.before.get(key), self.after.get(key)
            if isinstance(old, (IntSet, frozenset)) or isinstance(new, (IntSet, frozenset)):
                lines.append(f"{key}: {set_change(old, new)}")
            elif isinstance(old, dict) and isinstance(new, dict):
                lines.append(f"{key}: {dict_change(old, new)}")
            else:
                lines.append(f"{key} {show(old)} -> {show(new)}")
        self.rest = []
        return lines


def nearest(word: str, known) -> str | None:
    """The known word `word` most looks like (a typo of it), if any looks close enough."""
    close = difflib.get_close_matches(word, [k for k in known if isinstance(k, str)], n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, known) -> str:
    """" (did you mean 'x'?)" for the nearest known word, or "" when none is near."""
    close = nearest(word, known)
    return f" (did you mean {close!r}?)" if close is not None else ""
