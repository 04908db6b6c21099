"""One worker's report and its summary line (WorkerWarmup's, vllm_bridge.warmup.worker).

The report (WARMUP_PLAN_REPORT, with the rank's suffix) is checked writable at load_model, before
minutes of warmup, and written once vLLM is ready; what is learnt after it (the bundle's use) is
written into it again. After ready there is nothing to step aside from: a report that cannot be
written is one warning line (WARMUP_STRICT=1: PluginError), never a stopped server.
"""

from __future__ import annotations

import logging
import time

from planner.output import check_writable

from ..settings import Settings, with_rank
from ..step_aside import cause_of, strict_error
from . import phases as ph
from .flashinfer_waits import prebuilt_line
from .log_lines import summary_line

log = logging.getLogger("vllm.warmup_planner")


def check_report_path(settings: Settings, rank: int) -> None:
    """The report this rank writes once vLLM is ready, refused now rather than after minutes of
    warmup: WriteError (a PlanError) names it."""
    path = with_rank(settings.report, rank)
    if path:
        check_writable(path)


def summarise(state):
    """The worker's report with its host part (the phases, stages, waits and fallback), and its
    summary line in vLLM's log; a fallback that ran no plan gets a report of the plan it did not run."""
    from executor.registry import writes_deep_gemm
    from executor.report import Report

    report, plan = state.report, state.in_worker_plan()
    if report is None:  # the fallback: no plan ran
        report = Report(plan, state.options.public())
        report.precompile = state.pool.precompiler.summary() if state.pool.precompiler else None
        report.finished = time.time()
    stages = ph.stage_rows(report.steps, writes_deep_gemm, ph.step_kernels(plan.steps))
    state.flashinfer_waits.uninstall()
    report.host = {"engine": "vllm", "rank": state.rank, "fallback": state.fallback,
                   "precompile_wait_s": state.pool.waited_s, "phases": state.phases.rows, "stages": stages,
                   "flashinfer_waits": list(state.flashinfer_waits.waits),
                   "after_ready_jsonl": state.monitor.jsonl_path}
    log.info(summary_line(state.expanded.plan, stages, state.phases.rows, report.precompile, state.fallback,
                          state.rank))
    for line in (state.flashinfer_waits.line(), prebuilt_line((report.precompile or {}).get("records") or [])):
        if line:
            log.info("warmup-planner: %s", line)
    return report


def write(report, settings: Settings, rank: int) -> None:
    """The report to WARMUP_PLAN_REPORT (the rank's file), where asked; a failure is failed's line."""
    if settings.report:
        try:
            report.write(with_rank(settings.report, rank))
        except Exception as e:  # noqa: BLE001 - checked writable at load_model: a disk full since, say
            failed(settings, cause_of(e))


def failed(settings: Settings, cause: str) -> None:
    """After ready there is nothing to step aside from: one warning line (WARMUP_STRICT=1: PluginError)."""
    why = f"cannot write the report: {cause}"
    if settings.strict:
        raise strict_error(why)
    log.warning("warmup-planner: %s", why)
