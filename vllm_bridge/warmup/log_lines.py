"""The plugin's lines in vLLM's log: the device lane's barrier, the pool, each plan stage, the summary.

They go through vLLM's own logger (its handler, level and format), among vLLM's own lines. Their
counts add up: each compile is counted in one row (vllm_bridge.warmup.phases), and the report
(WARMUP_PLAN_REPORT) holds the same rows.
"""

from __future__ import annotations

import logging
import time

from .. import timeline
from . import phases as ph

log = logging.getLogger("vllm.warmup_planner")  # under vLLM's logger: its handler, level and format


def device_lane_line(lane: dict, rank: int = 0) -> str:
    """What the device lane's barrier cost vLLM, and what went on past it (the CUDA-free lane)."""
    running = lane.get("still_running") or []
    line = (f"precompile (rank {rank}): vLLM waited {lane.get('waited_s') or 0.0:.1f} s after its profile run "
            "for the jobs that hold a CUDA context, now ended")
    if running:
        line += (f"; still running in CUDA-free workers ({len(running)}): {', '.join(running[:4])}"
                 f"{' ...' if len(running) > 4 else ''}")
    return line


def _pool_line(p: dict, rank: int = 0) -> str:
    """The pool of one rank: its jobs, and of the keys the node's ranks share through one cache (the
    claims: executor/precompile/claims/) those this rank compiled, those it waited for or loaded
    (another process compiled them), and the node's total: each key once."""
    line = (f"precompile (rank {rank}): {p.get('ok', 0)} of {p['jobs']} jobs done on {p['workers']} workers in "
            f"{p.get('wall_s') or 0.0:.1f} s, {p.get('compiled') or 0} kernels compiled")
    c = p.get("claims")
    if c:
        line += (f"; keys: {c['compiled']} compiled by this rank, {c['waited']} waited for, {c['loaded']} loaded, "
                 f"{c['node_keys']} on the node by {c['node_processes']} processes")
        line += f", {len(c['taken_over'])} taken over" if c.get("taken_over") else ""
    return line


def summary_line(plan: str, stages: list, phases: list, precompile: dict | None, fallback: str | None,
                 rank: int = 0) -> str:
    """The one line vLLM's log gets at the end: what the plan ran, what the pool did, what each of
    vLLM's phases compiled (counts add up: each compile is counted in one row)."""
    if fallback:
        return f"warmup-planner: {fallback}; vLLM's own warmup ran"
    total = {}
    for row in stages:
        ph.add_counts(total, row)
    text = (f"warmup-planner: plan {plan} ran: {sum(r['steps'] for r in stages)} steps, "
            f"{sum(r['calls'] for r in stages)} calls in {sum(r['wall_s'] for r in stages):.1f} s "
            f"({ph.describe_counts(total)})")
    if precompile and precompile.get("jobs"):
        text += "; " + _pool_line(precompile, rank)
    for row in phases:
        compiled = row["compiled"]
        if any(compiled.values()):
            text += f"; vLLM {row['phase']} compiled " + ", ".join(f"{k} {v}" for k, v in compiled.items() if v)
    return text


class LogProgress:
    """The executor's progress events as lines of vLLM's log: one per stage (calls, compiles and
    loads by kind, the pool's jobs for it, wall time), one per failed step, one for the pool."""

    def __init__(self, report, kernels: dict | None = None):
        self.report, self.kernels = report, kernels
        self.stage_started: float | None = None

    def stage_start(self, name: str, steps: int, calls: int) -> None:
        self.stage_started = time.time()  # the stage's mark on the start-up timeline, at its end

    def step_start(self, step) -> None:
        pass

    def tick(self, n: int) -> None:
        pass

    def step_end(self, record) -> None:
        if record.status in ("failed", "unavailable"):
            log.warning("warmup-planner: %s %s: %s", record.status, record.id, record.error or "")

    def stage_end(self, summary: dict) -> None:
        from executor.registry import writes_deep_gemm

        records = [r for r in self.report.steps if r.stage == summary["stage"]]
        for row in ph.stage_rows(records, writes_deep_gemm, self.kernels):
            log.info(ph.stage_line(row))
        if self.stage_started is not None:
            timeline.mark(f"plan: {summary['stage']}", self.stage_started, time.time(), timeline.PLUGIN)
            self.stage_started = None

    def precompile(self, summary: dict) -> None:
        pass  # the barrier logged it

    def message(self, text: str) -> None:
        log.info("warmup-planner: %s", text)
