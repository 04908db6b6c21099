"""The precompile pool of one run (``Precompiler``): its pieces put together, in the main process.

Each piece has one job: decide.py, book.py, processes.py, hook.py (the executor loop's hook),
barrier.py (DeepGEMM's cache, shared with the JIT monitor), node.py (the keys other processes
compile), timings.py and summary.py (the report); the package docstring says what each does.
Nothing here imports torch or triton."""

from __future__ import annotations

import threading
import time
from concurrent.futures import wait

from .barrier import DeepGemmBarrier
from .book import JobBook
from .costs import JobCosts
from .decide import Decision, decide
from .lanes import Lanes, lane_of
from .manifest import RunManifest
from .node import NodeClaims
from .processes import JOIN_S
from .summary import cached_keys, failure_line, pool_summary
from .timings import Timings

CANCEL_WAIT_S = 10.0  # how long cancel() waits for a starter thread that is still starting processes


class Precompiler:
    """The precompile phase of one run: whether a pool runs, its start and end, and what it did.
    `monitor`: the JIT monitor of the process that runs the plan; `progress`: the pool's line;
    `note`: where a takeover's line goes (node.py: a logger)."""

    def __init__(self, steps, options, backend_of, progress=None, monitor=None, note=None):
        self.steps, self.options, self.progress = steps, options, progress
        self.decision = Decision.of(options)
        self.status, self.reason = "off", None   # off | skipped | ran | cancelled, and why not ran
        self.manifest = RunManifest()
        self.book = JobBook(steps, backend_of)
        self.claims = NodeClaims(options.worker_env, note)  # other processes' compiles of the same keys
        self.barrier = DeepGemmBarrier(self.book, monitor)
        self.timings = Timings()
        self.costs = JobCosts()                  # the jobs' seconds at the last start: longest first
        self.note = note
        self.pool: Lanes | None = None           # None before the start and once the workers are ended
        self.lane_workers: dict = {}             # lane -> its worker processes (lanes.py)
        self.lane_waits: dict = {}               # lane -> {"waited_s", "still_running"} at its finish_lane()
        self._watchdog = None
        self._announced = False

    def attach(self, monitor, progress) -> None:
        """The run's monitor and display, for a pool started ahead of the run without them
        (start_precompile). Those given first stay."""
        if self.barrier.monitor is None:
            self.barrier.watched_by(monitor)
        self.progress = self.progress or progress

    def start(self) -> "Precompiler":
        """Decide, then start the pool and submit the jobs that need no earlier step."""
        with self.timings.clock("start_s", 4):
            d = decide(self.decision, self.book, self.manifest, self.claims)
            self.status, self.reason = d.status, d.reason
            if d.status == "skipped":
                self._announce()
            if d.status == "ran":
                self.pool = Lanes(d.workers, self.book, self.options, self.timings)
                self.lane_workers = self.pool.workers_of()
                self.claims.start(self.pool, self.book.slots)
                self.pool.start(then=lambda: self.submit(-1))
        return self

    def submit(self, index: int) -> None:
        """Submit the jobs whose last autotune step is at or before `index`, the longest first (costs.py)."""
        if self.pool is not None:
            self.pool.run(self.book, self.book.due(index, self.costs.order), self.claims.follow)

    finish_s = property(lambda self: self.timings.finish_s)  # finish()'s wait (a caller's barrier)

    # --- the end: idle, cancelled, a caller's barrier, the run's end ----------------------------------

    def end_idle(self) -> None:
        """Every job answered (hook.py): the idle workers exit on their own, nobody waits for them;
        the monitor learns the pool's DeepGEMM kernels now, whichever step runs next."""
        self.book.settle()
        self.barrier.absorb()
        self._end_pool()
        self._announce()

    def cancel(self, why: str) -> None:
        """Stop: drop queued jobs, end the workers (a job cut short leaves no partial entry)."""
        if self.pool is None:
            return
        self.pool.await_start(CANCEL_WAIT_S)  # a starter thread stuck in a process start is not waited for
        self.book.cancel_queued(why)
        self._end_pool(kill=True)
        self.book.settle_all(missing=why)
        if self.status == "ran":
            self.status, self.reason = "cancelled", why

    def finish(self, timeout: float) -> str | None:
        """A caller's barrier: release every job, wait for all (at most `timeout` s in all), end the
        workers and wait for them to exit, so that nothing of the pool (its processes, their CUDA
        contexts) outlives this call; for a caller that runs the plan after the pool, with no tuning
        step between (`finish_lane` is the plugin's: one lane). None when the pool ran (or had
        nothing to do), else why not, in one line: its workers did not start, it timed out (they
        are killed), or no job succeeded."""
        if self.pool is None:
            return None
        with self.timings.clock("finish_s", 3):
            deadline = time.perf_counter() + max(0.0, timeout)
            why = self._await_released(self.book.slots, timeout, deadline, "")
            if why is not None:
                return why
            self._wind_up(join=max(JOIN_S, deadline - time.perf_counter()))
            return failure_line(self.book.results())

    def finish_lane(self, lane: str, timeout: float) -> str | None:
        """A caller's barrier for one lane alone (lanes.py): release every job, wait for that lane's
        (at most `timeout` s), end its workers and wait for them to exit; the other lane goes on.
        None when its jobs ran (or it had none), else why not in one line; on a time-out the whole
        pool is cancelled (its jobs are then compiled by whoever needs them)."""
        if self.pool is None:
            return None
        began = time.perf_counter()
        deadline = began + max(0.0, timeout)
        slots = [s for s in self.book.slots if lane_of(s.job.backend) == lane]
        why = self._await_released(slots, timeout, deadline, f"{lane} ")
        if why is not None:
            return why
        self.book.settle(slots)
        self.barrier.absorb()
        if self.pool.has(lane):
            self.pool.shutdown(join=max(JOIN_S, deadline - time.perf_counter()), lane=lane)
        self.lane_waits[lane] = {"waited_s": round(time.perf_counter() - began, 3), "still_running": self.pending()}
        return failure_line([s.result for s in slots if s.result is not None])

    def _await_released(self, slots: list, timeout: float, deadline: float, what: str) -> str | None:
        """Release every job, then wait until `deadline` for the jobs of `slots`; None once they are
        done, else the pool is cancelled and this says why (the workers did not start, or a time-out)."""
        if not self.pool.await_start(max(0.0, deadline - time.perf_counter())):
            self.cancel(f"the workers did not start within {timeout:g} s")
            return self.reason
        self.submit(len(self.steps))
        pending = [s.future for s in slots if s.future is not None]
        _, not_done = wait(pending, timeout=max(0.0, deadline - time.perf_counter()))
        if not_done:
            self.cancel(f"timed out after {timeout:g} s with {len(pending) - len(not_done)} of {len(slots)} "
                        f"{what}jobs done")
            return self.reason
        return None

    def pending(self) -> list[str]:
        """The jobs not answered yet, as 'backend key' (what the log says is still running)."""
        return [f"{s.job.backend} {s.job.key}" for s in self.book.slots
                if s.result is None and not (s.future is not None and s.future.done())]

    def bound(self, seconds: float) -> None:
        """What is left of the pool ends within `seconds`: a job that hangs is killed (with what it
        started) and its kernel is compiled by whoever needs it, one line to `note`. A hung build
        would otherwise hold FlashInfer's file lock, and vLLM's process would wait on it for ever."""
        if self.pool is None or self._watchdog is not None:
            return
        self._watchdog = threading.Timer(max(0.0, seconds), self._overdue, args=(seconds,))
        self._watchdog.daemon = True
        self._watchdog.start()

    def _overdue(self, seconds: float) -> None:
        left = self.pending()
        if self.pool is None or not left:
            return
        self.cancel(f"{len(left)} jobs still running {seconds:g} s after vLLM's memory profile: ended "
                    "(their kernels compile where they are first needed)")
        if self.note is not None:
            self.note(f"precompile: {self.reason}: {', '.join(left[:4])}{' ...' if len(left) > 4 else ''}")

    def close(self, interrupted: bool = False) -> None:
        """The run is over: wait for the jobs still running (a Ctrl-C cancels them instead)."""
        with self.timings.clock("close_s", 4, add=True, keep=lambda: self.status in ("ran", "cancelled")):
            if self.pool is None:
                return
            self.pool.await_start()
            if interrupted:
                self.cancel("interrupted (Ctrl-C)")
                return
            self.book.end_unsubmitted("not run: the run ended first")  # held back: the run stopped early
            wait(self.book.futures())
            self._wind_up()

    def _wind_up(self, join: float | None = None) -> None:
        """Every job answered: their records, the DeepGEMM kernels to the monitor, the workers ended."""
        self.book.settle()
        self.barrier.absorb()
        self._end_pool(join=join)
        self._announce()

    def _end_pool(self, kill: bool = False, join: float | None = None) -> None:
        pool, self.pool = self.pool, None
        if self._watchdog is not None:
            self._watchdog.cancel()
        self.costs.record(self.book.results())
        self.claims.close()
        if pool is not None:
            pool.shutdown(kill=kill, join=join)

    def summary(self) -> dict:
        return pool_summary(self)

    def _announce(self) -> None:
        if not self._announced and self.progress is not None:
            self._announced = True
            self.progress.precompile(self.summary())

    def write_manifest(self, records: list) -> None:
        """Record the keys now in the disk cache (summary.cached_keys)."""
        self.manifest.add(cached_keys(self.book, records))
