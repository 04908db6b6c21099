"""What became of one step: its status, the backend that ran it, its calls, time and JIT counts.

Each step ends `ok`, `failed` (any exception, with its text and the step id),
`unavailable` (its backend or the model runner is missing here) or `skipped`
(`--runner none`, or not reached after a failure with ``on_error="stop"`` or Ctrl-C).
The report (executor.report) keeps one record per step and writes it as JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

STATUSES = ("ok", "failed", "unavailable", "skipped")


@dataclass
class StepRecord:
    id: str
    stage: str
    kind: str
    status: str = "ok"
    backend: str | None = None          # what ran it: a backend's name, or "runner"
    planned_backend: str | None = None  # what the plan named
    kernel_calls: int = 0
    planned_calls: int = 0
    wall_s: float = 0.0
    error: str | None = None            # one line
    jit: dict | None = None             # the JIT monitor's counts for the step (None: monitor off)
    details: dict | None = None         # what the handler reports (autotune: the tables)
    precompile: dict | None = None      # what the precompile workers did for the keys it reaches first
    interrupted: bool = False
    oom: bool = False
    traceback: str | None = None

    OPTIONAL = ("details", "precompile", "interrupted", "oom", "traceback")  # written only when set

    @classmethod
    def for_step(cls, step, **fields) -> "StepRecord":
        return cls(id=step.id, stage=step.stage, kind=step.kind, planned_calls=step.planned_calls(), **fields)

    @classmethod
    def not_run(cls, step, why: str) -> "StepRecord":
        return cls.for_step(step, status="skipped", error=why)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in self.OPTIONAL or v}
