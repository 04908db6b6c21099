"""The main process's side of the claims: a key another process compiles is waited for, bounded.

Where a worker finds the key held by another process's live owner (owner.py), its job's answer is
"held", and the key's future (key_future.py) stays open: one thread (Waits) looks at the claim every
POLL_S s until the done mark appears (the main process then loads the kernel), or the owner is gone,
the claim released, stale or held past the wait bound (on_disk.py): the key is then taken over,
submitted again to this pool, with one line to `note`."""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future

from ..jobs.job import JobResult
from .key_future import KeyFuture
from .on_disk import done_entries, look, who

POLL_S = 0.2  # how often a waiting process looks at the claims it waits on


@dataclasses.dataclass
class Wait:
    """A key this process waits for: its job, since when, and a takeover's line."""
    job: object
    fut: KeyFuture
    since: float
    took_over: str | None = None


class Waits:
    """The keys held by other processes, looked at from one thread (see the module docstring)."""

    def __init__(self, submit, note, wait_s: float, poll_s: float = POLL_S):
        self.submit, self.note = submit, note  # job -> the executor's future; a line for the log
        self.wait_s, self.poll_s = wait_s, poll_s
        self._waits: list[Wait] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def follow(self, job, inner, wait: Wait | None = None) -> KeyFuture:
        """The key's future, answered by `inner` (the executor's) unless another process holds it."""
        fut = wait.fut if wait is not None else KeyFuture()
        fut.inner = inner
        inner.add_done_callback(lambda done: self._answered(job, fut, done, wait))
        return fut

    def _answered(self, job, fut: KeyFuture, inner, wait: Wait | None) -> None:
        """The worker's answer: the key's (compiled, failed, found done), or a wait (held elsewhere)."""
        if inner.cancelled():
            Future.cancel(fut)  # the executor dropped it (cancel_futures): so is the key's
        elif inner.exception() is not None:
            fut.settle(error=inner.exception())  # a crashed worker: the book records it
        elif (inner.result().claim or {}).get("how") == "held":
            since, line = (wait.since, wait.took_over) if wait is not None else (time.time(), None)
            self._add(Wait(job, fut, since, line))
        else:
            if wait is not None and inner.result().claim:
                inner.result().claim.update(took_over=wait.took_over, waited_s=round(time.time() - wait.since, 3))
            fut.settle(inner.result())

    def _add(self, wait: Wait) -> None:
        with self._lock:
            if self._closed:
                Future.cancel(wait.fut)
                return
            self._waits.append(wait)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="warmup-precompile-waits", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._waits = [w for w in self._waits if not w.fut.done()]
                if self._closed or not self._waits:
                    self._thread = None
                    return
                waits = list(self._waits)
            for wait in waits:
                try:
                    over = self._closed or self._check(wait)
                except Exception as e:  # noqa: BLE001 - never a wait forever: the main process compiles it
                    wait.fut.settle(JobResult.of(wait.job).ended("failed", f"wait failed ({type(e).__name__}: {e})"))
                    over = True
                if over:
                    with self._lock:
                        self._waits = [w for w in self._waits if w is not wait]
            time.sleep(self.poll_s)

    def _check(self, wait: Wait) -> bool:
        """Look at the key's claim once; True when this process no longer waits for it."""
        if wait.fut.done():
            return True
        seen = look(wait.job.claim)
        waited = time.time() - wait.since
        if seen.done is not None:
            result = JobResult.of(wait.job).ended("ok", None)
            result.claim = {"how": "waited", "by": who(seen.done), "waited_s": round(waited, 3),
                            "took_over": wait.took_over, **done_entries(seen.done)}
            wait.fut.settle(result)
            return True
        if seen.held and waited < self.wait_s:
            return False
        why = seen.free or ("no claim holds it" if seen.gen is None
                            else f"it held the key {waited:.0f} s (bound {self.wait_s:g} s)")
        self._take_over(wait, seen, why)
        return True

    def _take_over(self, wait: Wait, seen, why: str) -> None:
        """Submit the key again: this pool's worker takes the next claim (past `seen.gen`)."""
        job = dataclasses.replace(wait.job, claim=dataclasses.replace(wait.job.claim, after=seen.gen))
        owner = f" from {who(seen.owner)}" if seen.owner else ""
        wait.took_over = f"precompile: taking over {job.backend} key {job.key}{owner}: {why}"
        self.note(wait.took_over)
        try:
            inner = self.submit(job)
        except Exception as e:  # noqa: BLE001 - a broken pool: the main process compiles the key
            wait.fut.settle(JobResult.of(job).ended("failed", f"not resubmitted ({type(e).__name__}: {e})"))
            return
        self.follow(job, inner, Wait(job, wait.fut, wait.since, wait.took_over))

    def close(self) -> None:
        """The pool is ending: nothing more is submitted, the waits still open are cancelled."""
        with self._lock:
            self._closed = True
            waits, self._waits = self._waits, []
        for wait in waits:
            Future.cancel(wait.fut)
