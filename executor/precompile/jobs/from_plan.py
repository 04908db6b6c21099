"""The jobs of a plan: one per distinct compile key, at the first step and value that reach it.

A keyed step (planner.plan.steps) pairs each of its compile keys with the first value that
reaches it (``variants``): each becomes one job, the step reduced to that value and key
(``step.single``), whose backend still checks the pair. A step that pairs no key (a
kernel no dispatch model covers) is one job for the whole step, keyed by its content.
Jobs are released after the last autotune step before them: a tuning step rewrites the
tables that pick the GEMM variants, and its timings must not share the GPU with workers."""

from __future__ import annotations

import hashlib
import json

from planner.plan.steps import Autotune, Keyed

from .job import Job

PRECOMPILE_BACKENDS = ("triton", "deep_gemm")  # backends whose variants are compiled in workers by default


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
