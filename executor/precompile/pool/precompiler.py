"""The precompile pool of one run (``Precompiler``): its pieces put together, in the main process.

Each piece has one job: jobs/decide.py (whether the run gets a pool), book.py (the jobs and their
results), workers/lanes.py (the worker processes), hook.py (the executor loop's hook), barrier.py
(DeepGEMM's cache, shared with the JIT monitor), claims/node.py (the keys other processes compile),
timings.py and summary.py (the report); the package docstring says what each does. The class is
the package's interface (executor/precompile/__init__.py): outside the package, only its methods
and properties are used, never its pieces (tests/executor/test_precompile_interface.py). Nothing here
imports torch or triton."""

from __future__ import annotations

import threading
import time
from concurrent.futures import wait

from planner.errors import one_line

from ..claims.node import NodeClaims
from ..jobs.costs import JobCosts
from ..jobs.decide import Decision, decide
from ..jobs.manifest import RunManifest
from ..workers.lanes import DEVICE_LANE, Lanes, lane_of
from ..workers.process_tree import JOIN_S
from .barrier import DeepGemmBarrier
from .book import JobBook
from .hook import PrecompileHook
from .summary import cached_keys, failure_line, pool_summary
from .timings import Timings

CANCEL_WAIT_S = 10.0  # how long cancel() waits for a starter thread that is still starting processes


class Precompiler:
    """The precompile phase of one run: whether a pool runs, its start and end, and what it did.
    `monitor`: the JIT monitor of the process that runs the plan; `progress`: the pool's line;
    `note`: where a takeover's line goes (claims/node.py: a logger); `env`: the run's environment,
    resolved once, where the caches the claims and the manifest live in are (executor/caches/roots.py;
    default: this process's when they are read). Callers use its methods and
    properties (submit() and end_idle() are the loop hook's, hook.py); its pieces (book, pool,
    barrier, claims, ...) are the package's own."""

    def __init__(self, steps, options, backend_of, progress=None, monitor=None, note=None, env=None):
        self.steps, self.options, self.progress = steps, options, progress
        self.decision = Decision.of(options)
        self._status, self._reason = "off", None  # off | skipped | ran | cancelled, and why not ran
        self.manifest = RunManifest(env)
        self.book = JobBook(steps, backend_of)
        self.claims = NodeClaims(options.worker_env, note, env)  # other processes' compiles of the same keys
        self.barrier = DeepGemmBarrier(self.book, monitor)
        self.timings = Timings()
        self.costs = JobCosts()                  # the jobs' seconds at the last start: longest first
        self.note = note
        self.pool: Lanes | None = None           # None before the start and once the workers are ended
        self.lane_workers: dict = {}             # lane -> its worker processes (workers/lanes.py)
        self.lane_waits: dict = {}               # lane -> {"waited_s", "still_running"} at its finish_lane()
        self._watchdog = None
        self._announced = False

    # --- the start -----------------------------------------------------------------------------------

    def start(self) -> "Precompiler":
        """Decide, then start the pool and submit the jobs that need no earlier step. Never raises:
        precompiling is an optimisation, so a start that fails leaves the pool off, and says why."""
        try:
            self._start()
        except Exception as e:  # noqa: BLE001 - never the run's failure
            try:
                self.cancel("failed to start")
            except Exception:  # noqa: BLE001
                pass
            self._status, self._reason = "off", f"precompile failed to start ({type(e).__name__}: {e})"
        return self

    def _start(self) -> None:
        with self.timings.clock("start_s", 4):
            d = decide(self.decision, self.book, self.manifest, self.claims)
            self._status, self._reason = d.status, d.reason
            if d.status == "skipped":
                self._announce()
            if d.status == "ran":
                self.pool = Lanes(d.workers, self.book, self.options, self.timings)
                self.lane_workers = self.pool.workers_of()
                self.claims.start(self.pool, self.book.slots)
                self.pool.start(then=lambda: self.submit(-1))

    def attach(self, monitor, progress) -> None:
        """The run's monitor and display, for a pool started ahead of the run without them
        (executor.run.start_precompile). Those given first stay."""
        if self.barrier.monitor is None:
            self.barrier.watched_by(monitor)
        self.progress = self.progress or progress

    def hook(self) -> PrecompileHook:
        """The pool in the executor's loop (executor.hooks.Hook): a step waits for its own jobs."""
        return PrecompileHook(self)

    # --- what the pool is, and what it did ----------------------------------------------------------

    status = property(lambda self: self._status, doc="off | skipped | ran | cancelled")
    reason = property(lambda self: self._reason, doc="why the pool did not run, or was cancelled (one line)")
    running = property(lambda self: self._status == "ran", doc="a pool started, and was not cancelled")
    holds_workers = property(lambda self: self.pool is not None, doc="worker processes started and not yet ended")
    finish_s = property(lambda self: self.timings.finish_s, doc="what finish() waited (a caller's barrier)")

    def results(self) -> list:
        """What became of each job so far (jobs/job.py JobResult), in plan order."""
        return self.book.results()

    def pending(self) -> list[str]:
        """The jobs not answered yet, as 'backend key' (what the log says is still running)."""
        return [f"{s.job.backend} {s.job.key}" for s in self.book.slots
                if s.result is None and not (s.future is not None and s.future.done())]

    @property
    def device_lane_wait(self) -> dict:
        """What finish_device_lane() waited: {"waited_s", "still_running"} ({} before it)."""
        return self.lane_waits.get(DEVICE_LANE) or {}

    def summary(self) -> dict:
        """The pool's record for the report (its keys: pool/summary.py)."""
        return pool_summary(self)

    # --- the jobs, as the loop releases them ---------------------------------------------------------

    def submit(self, index: int) -> None:
        """Submit the jobs whose last autotune step is at or before `index`, the longest first (jobs/costs.py)."""
        if self.pool is not None:
            self.pool.run(self.book, self.book.due(index, self.costs.order), self.claims.follow)

    def end_idle(self) -> None:
        """Every job answered (hook.py): the idle workers exit on their own, nobody waits for them;
        the monitor learns the pool's DeepGEMM kernels now, whichever step runs next."""
        self.book.settle()
        self.barrier.absorb()
        self._end_pool()
        self._announce()

    # --- a caller's barriers ---------------------------------------------------------------------------

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
        """A caller's barrier for one lane alone (workers/lanes.py): release every job, wait for that
        lane's (at most `timeout` s), end its workers and wait for them to exit; the other lane goes
        on. None when its jobs ran (or it had none), else why not in one line; on a time-out the whole
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

    def finish_device_lane(self, timeout: float) -> str | None:
        """A serving engine's barrier before it measures the GPU's memory (vLLM's, after its profile
        run): the device lane finished (finish_lane: its jobs hold CUDA contexts, whose memory the
        measurement would count), then what is left of the pool bounded to `timeout` s more (bound).
        None when the lane's jobs ran, else why not in one line. Never raises: a failure of the pool's
        own cancels it and is the line. What the barrier waited: device_lane_wait."""
        try:
            why = self.finish_lane(DEVICE_LANE, timeout)
            self.bound(timeout)
        except Exception as e:  # noqa: BLE001 - ours: one line, never a hang
            self.cancel("failed")
            why = f"failed ({type(e).__name__}: {one_line(e)})"
        return why

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

    # --- the end: cancelled, or the run's end --------------------------------------------------------

    def cancel(self, why: str) -> None:
        """Stop: drop queued jobs, end the workers (a job cut short leaves no partial entry)."""
        if self.pool is None:
            return
        self.pool.await_start(CANCEL_WAIT_S)  # a starter thread stuck in a process start is not waited for
        self.book.cancel_queued(why)
        self._end_pool(kill=True)
        self.book.settle_all(missing=why)
        if self._status == "ran":
            self._status, self._reason = "cancelled", why

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

    def end_run(self, records: list, interrupted: bool = False) -> dict:
        """The run is over (close; `interrupted`: by a Ctrl-C), the keys it left in the disk caches
        are added to the manifest (`records`: the run's step records), and the summary is returned
        for the report. Never raises: a failure to close is said in the reason."""
        try:
            self.close(interrupted=interrupted)
            self.write_manifest(records)
        except Exception as e:  # noqa: BLE001
            self._reason = (self._reason or "") + f" (closing failed: {type(e).__name__}: {e})"
        return self.summary()

    def write_manifest(self, records: list) -> None:
        """Record the keys now in the disk cache (summary.cached_keys)."""
        self.manifest.add(cached_keys(self.book, records))

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

    def _announce(self) -> None:
        if not self._announced and self.progress is not None:
            self._announced = True
            self.progress.precompile(self.summary())
