"""What vLLM's start-up compiled, phase by phase and stage by stage, in vLLM's log and the report.

One JIT monitor (executor.jit_monitor) per worker counts everything from the plugin's first
hook to ready: vLLM's own phases (loading the weights, the memory-profiling run with its
torch.compile, vLLM's warmup around the plan) as *phases*, and the plan's steps through the
executor, which counts them on the same monitor. So a compile is counted once, in the phase or
the step it happened in, and the totals are the sum of the rows.

Counts by kind: Triton (every ``triton.compile``, Inductor's kernels included, split into
compiled and loaded from the disk cache), DeepGEMM (kernels appearing in its JIT cache; loads
only where the cache layout records them, 2.8), torch.compile (Dynamo frame compiles) and
FlashInfer (JIT modules built: on the H100 two of them held a cold start with FlashInfer for
about 190 s inside two stages whose line said nothing of it, bench/RESULTS.md part U; in the
log only where one was built). In a
plan stage the DeepGEMM loads are known without the layout's help: a step's calls reach its
compile keys, one kernel each, so the keys whose kernel this process did not compile were loaded
from the cache (the step's many calls per kernel are calls, not loads).
"""

from __future__ import annotations

import contextlib
import logging
import time

from executor.caches.registry import monitored
from executor.jit_monitor import StepCounts
from planner.plan.steps import Keyed

from .. import timeline

COUNTED = tuple(f.monitor for f in monitored())  # how the monitor counts each family's compiles (its module)
KINDS = tuple(m.kind for m in COUNTED)
QUIET_WHEN_ZERO = ("flashinfer",)  # said in vLLM's log only where it happened: most servers build none

log = logging.getLogger("vllm.warmup_planner")


def counts_by_kind(jit: dict | None) -> dict:
    """{"compiled": {kind: n}, "loaded": {kind: n}} from the monitor's counts of one step or phase;
    a DeepGEMM load the cache layout cannot show is left out of "loaded" (see the module doc)."""
    jit = jit or {}
    compiled = {m.kind: jit.get(m.compiled, 0) for m in COUNTED}
    unset = StepCounts()  # a counter's value where the monitor says nothing (None: it cannot tell)
    loaded = {m.kind: jit.get(m.loaded, getattr(unset, m.loaded)) for m in COUNTED if m.loaded}
    return {"compiled": compiled, "loaded": {k: v for k, v in loaded.items() if v is not None}}


def add_counts(total: dict, more: dict) -> dict:
    for side in ("compiled", "loaded"):
        for kind, n in more.get(side, {}).items():
            total.setdefault(side, {})[kind] = total.get(side, {}).get(kind, 0) + n
    return total


def describe_counts(counts: dict) -> str:
    """'compiled DeepGEMM 58, Triton 0, torch.compile 0; loaded DeepGEMM 0, Triton 6'."""
    names = {m.kind: m.label for m in COUNTED}
    parts = []
    for side in ("compiled", "loaded"):
        values = {k: v for k, v in (counts.get(side) or {}).items() if v or k not in QUIET_WHEN_ZERO}
        if values:
            parts.append(f"{side} " + ", ".join(f"{names[k]} {values[k]}" for k in KINDS if k in values))
    return "; ".join(parts) or "nothing compiled or loaded"


class Phases:
    """vLLM's start-up phases, each counted on the worker's monitor (begin_step/end_step)."""

    def __init__(self, monitor):
        self.monitor = monitor
        self.rows: list[dict] = []
        self._open: tuple[str, float] | None = None

    @contextlib.contextmanager
    def phase(self, name: str, owner: str = timeline.VLLM):
        self.begin(name, owner)
        try:
            yield
        finally:
            self.end()

    def begin(self, name: str, owner: str = timeline.VLLM) -> None:
        """`owner`: whose work the phase is on the start-up timeline (vLLM's, or the plugin's own)."""
        self.end()  # at most one phase at a time
        self.monitor.begin_step(name)
        self._open = (name, time.time(), owner)

    def end(self) -> dict | None:
        if self._open is None:
            return None
        name, start, owner = self._open
        self._open = None
        counts = self.monitor.end_step()
        row = {"phase": name, "start": start, "end": time.time(),
               **counts_by_kind(counts.as_dict() if counts is not None else None)}
        row["wall_s"] = round(row["end"] - start, 3)
        self.rows.append(row)
        timeline.mark(name, start, row["end"], owner, compiled=row["compiled"])
        return row


# --- plan stages ---------------------------------------------------------------------------------------

def stage_rows(records, writes_deep_gemm, kernels: dict | None = None) -> list[dict]:
    """One row per plan stage: steps, calls, wall, counts by kind, and the pool's jobs for it.
    `kernels`: step id -> the distinct kernels (compile keys) the step reaches, where known."""
    rows: dict[str, dict] = {}
    for r in records:
        row = rows.setdefault(r.stage, {"stage": r.stage, "steps": 0, "calls": 0, "wall_s": 0.0,
                                        "compiled": {}, "loaded": {}, "pool_jobs": 0, "pool_jobs_ok": 0,
                                        "pool_compiled": 0})
        row["steps"] += 1
        row["calls"] += r.kernel_calls or 0
        row["wall_s"] = round(row["wall_s"] + r.wall_s, 3)
        add_counts(row, _step_counts(r, writes_deep_gemm, (kernels or {}).get(r.id)))
        pre = r.precompile or {}
        row["pool_jobs"] += pre.get("jobs", 0)
        row["pool_jobs_ok"] += pre.get("jobs", 0) - pre.get("failed", 0)
        row["pool_compiled"] += pre.get("compiled") or 0
    return list(rows.values())


def _step_counts(record, writes_deep_gemm, kernels: int | None) -> dict:
    counts = counts_by_kind(record.jit)
    if record.status == "ok" and kernels is not None and writes_deep_gemm(record.backend or ""):
        # each key is one kernel: the ones this process did not compile came from the cache
        counts["loaded"]["deep_gemm"] = max(0, kernels - counts["compiled"]["deep_gemm"])
    return counts


def step_kernels(steps) -> dict:
    """step id -> its distinct kernels, for the steps whose compile keys the plan knows."""
    return {s.id: len(s.compile_keys) for s in steps if isinstance(s, Keyed) and s.variants}


def stage_line(row: dict) -> str:
    pool = (f"; pool: {row['pool_jobs_ok']}/{row['pool_jobs']} jobs done, {row['pool_compiled']} compiled"
            if row["pool_jobs"] else "")
    return (f"warmup-planner: stage {row['stage']}: {row['steps']} steps, {row['calls']} calls, "
            f"{describe_counts(row)}{pool}, {row['wall_s']:.2f} s")
