"""The book of one run's precompile jobs: the keys each step reaches, the job that warms each key,
and what became of every job.

Kept apart from the processes so that the questions the run asks of it (which jobs an autotune
step held back, which a step must wait for, what a step or the whole pool compiled, which keys
are now cached: summary.py) are answered, and tested, without starting a worker
(tests/executor/test_precompile_pieces.py). Results arrive on the pool's threads: the first word
on a job stays (a cancel may speak before the worker's answer lands).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ..jobs.from_plan import compile_jobs, eligible, step_keys
from ..jobs.job import Job, JobResult


@dataclass
class Slot:
    job: Job
    future: object = None           # set once submitted to a worker
    result: JobResult | None = None
    submitted: float | None = None


@dataclass
class StepJobs:
    keys: list = field(default_factory=list)   # (backend, key) of the step
    jobs: list = field(default_factory=list)   # slots whose first step is this one


class JobBook:
    """The jobs of one run by key and by step, and their results (see the module docstring)."""

    def __init__(self, steps, backend_of):
        self.steps = steps
        self.backend_of = backend_of
        self.backends: tuple = ()
        self.index_of = {s.id: i for i, s in enumerate(steps)}
        self.info: dict[str, StepJobs] = {}  # step id -> its keys and jobs (steps workers can warm)
        self.slots: list[Slot] = []
        self.by_key: dict = {}               # (backend, key) -> the slot of its job
        self._released = -2                  # the last step index whose held-back jobs were released
        self._lock = threading.Lock()

    def plan(self, backends: tuple) -> set:
        """The (backend, key) pairs the plan's steps reach through `backends`."""
        self.backends = backends
        for step in self.steps:
            backend = eligible(step, self.backend_of, backends)
            if backend is not None:
                self.info[step.id] = StepJobs(keys=[(backend, k) for k in step_keys(step)])
        return {key for info in self.info.values() for key in info.keys}

    def open(self, have: set) -> int:
        """A job for every planned key not in `have` (the manifest); returns how many."""
        self.slots = [Slot(job) for job in compile_jobs(self.steps, self.backend_of, self.backends, have)]
        for slot in self.slots:
            for key in slot.job.keys:
                self.by_key.setdefault((slot.job.backend, key), slot)
            self.info[slot.job.step_id].jobs.append(slot)
        return len(self.slots)

    # --- submitting, and the answers ----------------------------------------------------------------

    def due(self, index: int, order) -> list[Slot]:
        """The jobs released once the step at `index` has run (those whose last autotune step is at
        or before it), not yet submitted, as `order` sorts them (jobs/costs.py: the longest first)."""
        if index <= self._released:
            return []
        self._released = index
        return order([s for s in self.slots if s.future is None and s.job.release <= index])

    def submitted(self, slot: Slot, future) -> None:
        slot.future, slot.submitted = future, time.time()
        future.add_done_callback(lambda fut: self._answered(slot, fut))

    def _answered(self, slot: Slot, fut) -> None:
        if fut.cancelled():
            result = self.ended(slot, "cancelled", status="cancelled")
        else:
            try:
                result = fut.result()
            except BaseException as e:  # noqa: BLE001 - a crashed worker (BrokenProcessPool)
                result = self.ended(slot, f"{type(e).__name__}: {e}")
        with self._lock:
            if slot.result is None:  # the first word stays
                slot.result = result

    @staticmethod
    def ended(slot: Slot, why: str, status: str = "failed") -> JobResult:
        """The record of a job that did not run in a worker: its status and why."""
        return JobResult.of(slot.job).ended(status, why)

    def settle(self, slots=None) -> None:
        """Done callbacks run on the pool's thread: make sure the results of done jobs are here."""
        for slot in self.slots if slots is None else slots:
            if slot.result is None and slot.future is not None and slot.future.done():
                self._answered(slot, slot.future)

    def end_unsubmitted(self, why: str) -> None:
        """Jobs never submitted (held back when the run stopped) end as cancelled, with why."""
        for slot in self.slots:
            if slot.future is None and slot.result is None:
                slot.result = self.ended(slot, why, status="cancelled")

    def cancel_queued(self, why: str) -> None:
        """Drop what no worker has taken yet; a job already running is left to its worker's end."""
        self.end_unsubmitted(why)
        for slot in self.slots:
            if slot.future is not None and not slot.future.done():
                slot.future.cancel()

    def settle_all(self, missing: str) -> None:
        """After the workers are gone: every job has a record (`missing`: why, for those without)."""
        self.settle()
        for slot in self.slots:
            if slot.result is None:
                slot.result = self.ended(slot, missing, status="cancelled")

    # --- questions --------------------------------------------------------------------------------

    def step_slots(self, step_id: str) -> list[Slot]:
        """The jobs of a step's keys (also those another step reached first)."""
        info = self.info.get(step_id)
        return [self.by_key[k] for k in info.keys if k in self.by_key] if info else []

    def futures(self) -> list:
        return [s.future for s in self.slots if s.future is not None]

    def all_done(self) -> bool:
        """Every job submitted and answered (or never to be)."""
        if any(s.future is None and s.result is None for s in self.slots):
            return False
        return all(s.future is None or s.future.done() for s in self.slots)

    def results(self) -> list[JobResult]:
        return [s.result for s in self.slots if s.result is not None]
