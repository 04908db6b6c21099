"""A precompile job, and what became of it: the two records the pool passes between processes.

A ``Job`` travels to a worker (pickled: plain fields, the step reduced to what it runs); its
``JobResult`` comes back, or is made in the main process for a job that never ran (cancelled,
not submitted, a key another process compiled). from_plan.py makes the jobs of a plan."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


@dataclass
class Job:
    """One worker task: warm `keys` by running `values` of `step` through `backend`."""

    key: str                  # the job's own key (the first of `keys`)
    keys: list[str]           # the compile keys it warms
    backend: str
    kind: str
    step_id: str
    index: int                # the step's position in the plan
    step: object              # the step as the worker runs it (a variant's job: only its first value)
    values: list              # the values of the step's family method (step.call_values())
    whole_step: bool = False  # every value of a step that pairs no key with a value
    release: int = -1         # index of the last autotune step before it (-1: none)
    claim: object = None      # its key's claims (claims/on_disk.KeyClaim; None: none, it compiles unclaimed)


@dataclass
class JobResult:
    """What became of a job: run in a worker (`pid` set), or not run (failed to submit,
    cancelled, the backend unavailable there); the JIT monitor's counts where it ran."""

    key: str
    keys: list
    step: str                          # the step id
    backend: str
    kind: str
    whole_step: bool
    values: int                        # how many values it ran
    status: str = "ok"                 # ok | failed | unavailable | cancelled (held: claims/waits.py's, never final)
    error: str | None = None
    pid: int | None = None
    compiled: int | None = None
    disk_loads: int | None = None
    compile_ms: float | None = None
    deep_gemm_jit: int | None = None
    deep_gemm_loads: int | None = None
    deep_gemm_entries: list = field(default_factory=list)  # the DeepGEMM cache entries it saw appear
    start: float = field(default_factory=time.time)
    end: float | None = None
    wall_s: float = 0.0
    oom: bool = False
    claim: dict | None = None          # how the key was had: compiled under this pool's claim, waited for... (claims/)

    @classmethod
    def of(cls, job: Job, **fields) -> "JobResult":
        return cls(key=job.key, keys=list(job.keys), step=job.step_id, backend=job.backend, kind=job.kind,
                   whole_step=job.whole_step, values=len(job.values), **fields)

    def ended(self, status: str, error: str | None) -> "JobResult":
        """Ended now without running: its status and why."""
        self.status, self.error, self.end = status, error, time.time()
        return self

    def public(self, created: float | None) -> dict:
        """The record for the report: times relative to the pool's start, the number of keys."""
        out = {k: v for k, v in asdict(self).items()
               if k not in ("start", "end", "keys", "oom", "deep_gemm_entries", "claim")}
        if self.oom:
            out["oom"] = True
        if self.claim:
            out["claim"] = {k: v for k, v in self.claim.items() if k not in ("entries", "end") and v is not None}
        out["keys"] = len(self.keys)
        if created is not None and self.pid is not None:
            out["start_s"] = round(self.start - created, 3)
            out["end_s"] = round(self.end - created, 3)
        return out
