"""What `warmup bundle inspect` prints of a bundle besides its fingerprint line: its members that name
the building machine's cache paths, and per family (a start-up bundle) or per backend (a plan's) what
it holds against what its plan asks (executor/bundle/cli.py prints it).
"""

from __future__ import annotations

import os

from planner import api
from planner.errors import PlanError
from planner.plan.steps import Keyed

from .. import precompile
from ..caches import deep_gemm_install, registry
from ..caches.relocate import Relocation, relocate_family, summary_lines
from . import environment

LIST_LIMIT = 20  # keys listed per backend and kind (missing, extra); the rest counted


def building_paths(manifest, extracted: str) -> list[str]:
    """What an install does with the members that name the building machine's cache paths
    (executor/caches/relocate.py), family by family; [] when none does."""
    # what an install anywhere else would do: each family's root at some other path
    relocation = Relocation.of(manifest.roots, {f: os.path.join(os.sep, "elsewhere", f) for f in manifest.roots or {}})
    outcomes = {family.name: relocate_family(family, os.path.join(extracted, family.name), "", relocation, apply=False)
                for family in registry.FAMILIES}
    lines = summary_lines(outcomes)
    return ["members naming the building machine's cache paths (an install makes them this machine's):", *lines] \
        if lines else []


def startup_report(manifest) -> list[str]:
    """A vLLM start-up bundle: per family its entries, files and bytes, and where it was packed from."""
    sizes = family_sizes(manifest)
    files: dict = {}
    for f in manifest.files:
        files[f.path.split("/")[0]] = files.get(f.path.split("/")[0], 0) + 1
    names = [k for k in registry.names() if k in sizes]
    rows = [(n, sizes[n][0], files[n], sizes[n][1]) for n in names]
    total = ("total", sum(r[1] for r in rows), sum(r[2] for r in rows), sum(r[3] for r in rows))
    lines = table([("family", "entries", "files", "bytes"), *rows, total])
    built = [""] + [(manifest.roots or {}).get(n, "-") for n in names] + [""]
    lines = [f"{line}  {root}".rstrip() for line, root in zip(lines, ["built from"] + built[1:])]
    return lines + _deep_gemm_notes(manifest)


def fingerprint_table(fp: dict, with_vllm: bool = False) -> list[str]:
    """What the bundle was built with, one field a line: what install checks against this machine
    (the DeepGEMM include directory may differ: install re-keys 2.5/2.6 entries for its own); a
    vLLM start-up's adds vLLM's version and the hash of the config vLLM keys its compile cache with."""
    rows = [(k, fp.get(k)) for k in environment.FIELDS + (environment.VLLM_FIELDS if with_vllm else ())]
    rows += [(f"{k} (may differ: re-keyed)", fp.get(k)) for k in environment.PATH_FIELDS]
    width = max(len(k) for k, _ in rows)
    return ["fingerprint (install refuses a machine that differs):"] + [f"  {k.ljust(width)}  {v}" for k, v in rows]


def key_report(manifest) -> list[str]:
    """A table per family (entries, bytes, the plan's keys present, missing, and extra keys),
    then the keys missing and extra, LIST_LIMIT each and a count of the rest."""
    planned, note = planned_keys(manifest)
    held = held_keys(manifest)
    sizes = family_sizes(manifest)
    names = [k for k in registry.names() if k in sizes or k in held or k in (planned or {})]
    names += sorted((set(sizes) | set(held) | set(planned or {})) - set(registry.names()))
    rows = [family_row(name, sizes.get(name, (0, 0)), planned, held.get(name, set())) for name in names]
    total = ["total"] + [sum(r[i] for r in rows) if all(isinstance(r[i], int) for r in rows) else "-"
                         for i in range(1, 7)]
    lines = table([("family", "entries", "bytes", "plan keys", "present", "missing", "extra"), *rows, total])
    lines += [note] if note else []
    for name in names:
        want, have = (planned or {}).get(name, set()), held.get(name, set())
        if planned is not None:
            lines += listing(f"{name}: plan keys missing", sorted(want - have))
            lines += listing(f"{name}: keys in the bundle, not in the plan", sorted(have - want))
    return lines + _deep_gemm_notes(manifest)


def family_row(name: str, size: tuple, planned: dict | None, have: set) -> tuple:
    if planned is None:
        return (name, *size, "-", "-", "-", "-")
    want = planned.get(name, set())
    return (name, *size, len(want), len(want & have), len(want - have), len(have - want))


def table(rows: list) -> list[str]:
    """Columns two spaces apart: the first left-aligned, the numbers right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return ["  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]).rstrip()
            for row in cells]


def listing(title: str, items: list) -> list[str]:
    """'TITLE (N):' and the first LIST_LIMIT items, one a line, then '... and M more'."""
    if not items:
        return []
    more = len(items) - LIST_LIMIT
    return ([f"{title} ({len(items)}):"] + [f"  {item}" for item in items[:LIST_LIMIT]]
            + ([f"  ... and {more} more"] if more > 0 else []))


def family_sizes(manifest) -> dict:
    """family -> (entries, bytes): an entry is a DeepGEMM kernel directory, a Triton cache
    directory or a FlashInfer file; the bytes are all the family's files."""
    entries: dict = {}
    sizes: dict = {}
    for f in manifest.files:
        family, entry = (f.path.split("/") + [""])[:2]
        sizes[family] = sizes.get(family, 0) + f.size
        if f.path != f"triton/{precompile.MANIFEST_NAME}":
            entries.setdefault(family, set()).add(entry)
    return {family: (len(entries.get(family, ())), size) for family, size in sizes.items()}


def held_keys(manifest) -> dict:
    """backend -> the plan keys the bundle holds (its DeepGEMM kernels', the precompile manifest's)."""
    held = {"deep_gemm": {k.key for k in manifest.deep_gemm if k.key}} if manifest.deep_gemm else {}
    for backend, keys in manifest.keys.items():
        held.setdefault(backend, set()).update(keys)
    return held


def planned_keys(manifest) -> tuple[dict | None, str | None]:
    """(backend -> the plan's keys, None), or (None, why) when the plan does not expand here."""
    try:
        return plan_keys(manifest.plan, manifest.engine), None
    except PlanError as e:
        return None, f"plan keys not compared: plan {manifest.plan} on {manifest.engine} does not expand here ({e})"


def _deep_gemm_notes(manifest) -> list[str]:
    lines = []
    helpers = sorted({k.name for k in manifest.deep_gemm if not k.key})
    if helpers:
        lines.append(f"deep_gemm helper kernels (no plan key, compiled with the first call): {', '.join(helpers)}")
    legacy = [k for k in manifest.deep_gemm if k.layout == deep_gemm_install.LEGACY]
    if legacy:
        movable = sum(k.context is not None for k in legacy)
        lines.append(f"deep_gemm 2.5/2.6 entries re-keyable for another install path: {movable} of {len(legacy)}")
    return lines


def plan_keys(plan: str, engine: str) -> dict:
    """backend -> the compile keys of the plan expanded now (as the manifest names it)."""
    expanded = api.expand(api.load_plan(plan), api.load_engine(engine))
    out: dict = {}
    for step in expanded.steps:
        if isinstance(step, Keyed) and step.compile_keys:
            out.setdefault(step.backend, set()).update(step.compile_keys)
    return out
