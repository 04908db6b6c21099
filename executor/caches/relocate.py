"""A bundle's files made valid at the installing machine's paths (issue 43 item 2).

A cache packed on one machine names that machine's directories in some of its files: vLLM 0.25's
``vllm_compile_cache.py`` gives each compiled graph the absolute path of its artifact (its loader
opens that path: a bundle carried it verbatim and vLLM failed to start on every machine that had
not built it), Triton's group files list their kernel's files by absolute path, and many files
name them only for people (Inductor's generated code in its comments and repro strings, Triton's
IR in its debug locations, vLLM's ``computation_graph.py``). A path of the first kind must be made
this machine's; one of the second kind is left as it is.

The building machine's roots are the bundle's (``Manifest.roots``: family -> the directory it was
packed from), this machine's the install's; a path under a building root moves to the same place
under this machine's root of that family. Every staged file is searched for the building roots
before anything is placed; a file that names one is handled by the first of its family's PathRules
that matches it (executor/caches/family.py): rewritten, or kept because no loader follows it. A
file that names one and matches no rule is not installed (one line naming it): its library then
compiles that piece itself, which costs time and never a failed start.
"""

from __future__ import annotations

import os
from typing import Mapping, NamedTuple

from .roots import inside


class Relocation(NamedTuple):
    """The building machine's cache roots and, for each, this machine's root of the same family."""

    moves: tuple  # ((building root, root here or None), ...), the longest building root first

    @classmethod
    def of(cls, built: Mapping | None, here: Mapping) -> "Relocation":
        pairs = {}
        for family, root in (built or {}).items():
            if root:
                target = here.get(family)
                pairs[os.path.normpath(root)] = os.path.normpath(target) if target else None
        return cls(tuple(sorted(pairs.items(), key=lambda p: -len(p[0]))))

    def foreign_roots(self) -> tuple:
        """The building roots that are not this machine's own (a path under them needs moving)."""
        return tuple(b for b, h in self.moves if b != h)

    def mentioned(self, data: bytes) -> list[str]:
        """The building roots `data` names (those that are this machine's too are valid as they are)."""
        return [root for root in self.foreign_roots() if root.encode() in data]

    def moved(self, path: str) -> str | None:
        """`path` under a building root -> the same place here; `path` as it is when it is under
        no building root; None when it is under one this machine has no root for."""
        normal = os.path.normpath(path)
        for built, here in self.moves:
            if inside(normal, built):
                return None if here is None else here + normal[len(built):]
        return path


class Outcome(NamedTuple):
    """What the relocation of one family's staged files did."""

    rewritten: tuple = ()   # member paths rewritten for this machine
    kept: tuple = ()        # (member path, why): names the building paths, which no loader follows
    dropped: tuple = ()     # (member path, why): not installed

    def lines(self, family: str) -> list[str]:
        return [f"{family}/{rel} not installed: {why}" for rel, why in self.dropped]


def relocate_family(family, staged: str, dest: str, relocation: Relocation, apply: bool = True) -> Outcome:
    """Apply `family`'s PathRules to its staged tree (`staged`), whose files will land under `dest`
    (`apply` False: only say what an install would do, writing nothing)."""
    if not relocation.foreign_roots() or not os.path.isdir(staged):
        return Outcome()
    rewritten, kept, dropped = [], [], []
    for folder, dirs, names in os.walk(staged):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, staged)
            with open(path, "rb") as f:
                data = f.read()
            named = relocation.mentioned(data)
            if not named:
                continue
            try:
                verdict = _apply(family, rel, path, data, relocation, os.path.join(dest, rel), apply)
                why = (f"it names the building machine's {named[0]}, and no rule of {family.name} says "
                       "whether its loader follows that path")
            except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError) as e:
                detail = f": {e}" if isinstance(e, ValueError) and type(e) is ValueError else ""
                verdict, why = None, (f"it names the building machine's {named[0]} and cannot be rewritten "
                                      f"({type(e).__name__}{detail})")
            if verdict is None:
                if apply:
                    os.unlink(path)
                dropped.append((rel, why))
            elif verdict is True:
                rewritten.append(rel)
            else:
                kept.append((rel, verdict))
    return Outcome(tuple(rewritten), tuple(kept), tuple(dropped))


TEXT_ONLY = "it names the building paths only in text no loader follows (comments, repro strings)"


def _apply(family, rel: str, path: str, data: bytes, relocation: Relocation, final: str, apply: bool):
    """True: rewritten; a reason string: kept as it is; None: no rule matches."""
    for rule in family.paths:
        if not rule.matches(rel, path):
            continue
        if rule.rewrite is None:
            return rule.why
        new = rule.rewrite(data, relocation, final)  # inspect too: what would change, and what cannot
        if new == data:
            return TEXT_ONLY
        if apply:
            _write(path, new)
        return True
    return None


def _write(path: str, data: bytes) -> None:
    mode = os.stat(path).st_mode
    tmp = f"{path}.relocating"
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode & 0o7777)
    os.replace(tmp, path)


def summary_lines(outcomes: dict) -> list[str]:
    """Per family: the files naming the building machine's paths, by what an install does with them."""
    lines = []
    for family, outcome in outcomes.items():
        if not (outcome.rewritten or outcome.kept or outcome.dropped):
            continue
        lines.append(f"{family}: {len(outcome.rewritten)} rewritten for the installing machine, "
                     f"{len(outcome.kept)} kept (no loader follows the paths), {len(outcome.dropped)} not installed")
        reasons: dict = {}
        for _, why in outcome.kept:
            reasons[why] = reasons.get(why, 0) + 1
        lines += [f"  kept ({n}): {why}" for why, n in sorted(reasons.items())]
        lines += [f"  not installed: {family}/{rel}" for rel, _ in outcome.dropped]
    return lines
