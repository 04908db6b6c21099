"""What the executor's loop tells the rest of a run: a stage starts or ends, a step runs.

The loop (executor.run) walks the steps stage by stage and calls every hook of the run,
in order: the precompile pool (executor.precompile.Precompiler.hook(): waits for a step's jobs,
attributes them to its record), the report (records each step and times each stage), and
the progress display (which reads the report's stage totals, so it comes after it).
"""

from __future__ import annotations

import time
from typing import Protocol

from .progress import Progress
from .records import StepRecord
from .report import Report


class Hook(Protocol):
    def stage_start(self, stage: str, steps: list) -> None: ...

    def before_step(self, step) -> None: ...

    def after_step(self, step, record: StepRecord) -> None: ...

    def stage_end(self, stage: str) -> None: ...


class ReportHook:
    """Every record into the report, and each stage's wall time (its batch scope included)."""

    def __init__(self, report: Report):
        self.report = report
        self._started: dict[str, float] = {}

    def stage_start(self, stage: str, steps: list) -> None:
        self._started[stage] = time.perf_counter()

    def before_step(self, step) -> None:
        pass

    def after_step(self, step, record: StepRecord) -> None:
        self.report.add_step(record)

    def stage_end(self, stage: str) -> None:
        elapsed = time.perf_counter() - self._started.pop(stage)
        self.report.stage_wall[stage] = self.report.stage_wall.get(stage, 0.0) + elapsed


class ProgressHook:
    """The progress display: a line per stage, its steps and calls, the failures."""

    def __init__(self, progress: Progress, report: Report):
        self.progress, self.report = progress, report

    def stage_start(self, stage: str, steps: list) -> None:
        self.progress.stage_start(stage, len(steps), sum(s.planned_calls() for s in steps))

    def before_step(self, step) -> None:
        self.progress.step_start(step)

    def after_step(self, step, record: StepRecord) -> None:
        self.progress.step_end(record)

    def stage_end(self, stage: str) -> None:
        self.progress.stage_end(self.report.stage_summary(stage))
