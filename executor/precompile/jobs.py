"""Precompile jobs: one per distinct compile key of a plan, at the first step and value that reach it.

A keyed step (planner.plan.steps) pairs each of its compile keys with the first value that
reaches it (``variants``): each becomes one job, the step reduced to that value and key
(``step.single``), whose backend still checks the pair. A step that pairs no key (a
kernel no dispatch model covers) is one job for the whole step, keyed by its content.
Jobs are released after the last autotune step before them: a tuning step rewrites the
tables that pick the GEMM variants, and its timings must not share the GPU with workers."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field

from planner.plan.steps import Autotune, Keyed

PRECOMPILE_BACKENDS = ("triton", "deep_gemm")  # backends whose variants are compiled in workers by default


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
    claim: object = None      # its key's claims (claims.KeyClaim; None: none, it compiles unclaimed)


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
    status: str = "ok"                 # ok | failed | unavailable | cancelled (held: waits.py's, never final)
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
    claim: dict | None = None          # how the key was had: compiled under this pool's claim, waited for... (waits.py)

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


def step_content_key(step) -> str:
    """The key of a whole-step job: its content (not its id or stage), so stable across plans."""
    body = {k: v for k, v in step.to_dict().items() if k not in ("id", "stage")}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:20]
    return f"step:{step.kind}:{digest}"


def step_keys(step) -> list[str]:
    """The compile keys a keyed step warms (its content key when it pairs none)."""
    return step.compile_keys or [step_content_key(step)]


def eligible(step, backend_of, backends) -> str | None:
    """The backend whose variants a step's keys name, when its jobs can run in workers."""
    if not isinstance(step, Keyed) or step.backend not in backends:
        return None
    if backend_of(step) != step.backend:
        return None  # --backend chose another implementation: the keys describe the planned one
    return step.backend


def compile_jobs(steps, backend_of=None, backends=PRECOMPILE_BACKENDS,
                 have: frozenset | set = frozenset()) -> list[Job]:
    """One job per distinct (backend, key) not in `have`, at the first step and value that reach it.

    `backend_of(step)` resolves --backend (default: what the step names); only steps run by
    their planned backend, one of `backends`, get jobs. Plan order."""
    backend_of = backend_of or (lambda step: step.backend)
    seen = set(have)
    jobs: list[Job] = []
    last_tune = -1
    for index, step in enumerate(steps):
        if isinstance(step, Autotune):
            last_tune = index
            continue
        backend = eligible(step, backend_of, backends)
        if backend is not None:
            jobs += _step_jobs(step, backend, seen, dict(backend=backend, kind=step.kind, step_id=step.id,
                                                         index=index, release=last_tune))
    return jobs


def _step_jobs(step, backend: str, seen: set, common: dict) -> list[Job]:
    """A job per variant not seen yet, at its first value; a whole-step job when the step
    pairs no key with a value (a kernel the dispatch models do not cover)."""
    if not step.variants:
        key = step_content_key(step)
        if (backend, key) in seen:
            return []
        seen.add((backend, key))
        return [Job(key=key, keys=[key], step=step, values=step.call_values(), whole_step=True, **common)]
    jobs = []
    for variant in step.variants:
        if (backend, variant.key) in seen:
            continue
        seen.add((backend, variant.key))
        single = step.single(variant)
        jobs.append(Job(key=variant.key, keys=[variant.key], step=single, values=single.call_values(), **common))
    return jobs
