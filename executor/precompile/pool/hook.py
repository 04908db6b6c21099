"""The precompile pool as the executor's loop sees it (executor.hooks): one hook among the run's.

Before a step the main process waits for the jobs of that step's keys only, so that compiling
(in the workers) and loading (here) overlap; after it, the step's record says what the workers
did for it, a failure that stops the run stops the queue too (its variants will not be needed),
and an autotune step releases the jobs it held back (its timings must not share the GPU with
workers, and it rewrites the tables that pick the variants).
"""

from __future__ import annotations

import time

from planner.plan.steps import Autotune

from .summary import step_share


class PrecompileHook:
    """A Precompiler in the executor's loop (executor.hooks.Hook)."""

    def __init__(self, pre):
        self.pre = pre                    # the run's Precompiler
        self.stop_on_error = pre.options.on_error == "stop"
        self._waited: dict = {}           # step id -> seconds before_step waited for its jobs

    def stage_start(self, stage: str, steps: list) -> None:
        pass

    def before_step(self, step) -> None:
        self._waited[step.id] = self.wait_for(step)

    def after_step(self, step, record) -> None:
        pre = self.pre
        if step.id in self._waited:
            waited = self._waited.pop(step.id)
            info = pre.book.info.get(record.id)
            if info is not None and pre.status == "ran":
                record.precompile = step_share(info, waited)
        if record.status == "failed" and self.stop_on_error:
            pre.cancel(f"not needed: step {step.id} failed (--on-error stop)")
        if isinstance(step, Autotune) and pre.pool is not None and step.id in pre.book.index_of:
            pre.pool.await_start()
            pre.submit(pre.book.index_of[step.id])
        self.maybe_finish()

    def stage_end(self, stage: str) -> None:
        pass

    def wait_for(self, step) -> float:
        """Block until the jobs of this step's keys are done (the first such step: and every
        DeepGEMM job, barrier.py); returns the seconds waited."""
        pre = self.pre
        pool = pre.pool  # read once: a watchdog may end the pool meanwhile (precompiler.py, bound)
        if pool is None or step.id not in pre.book.info:
            return 0.0
        start = time.perf_counter()
        pool.await_start()  # the first jobs' futures exist from here
        slots = pre.book.step_slots(step.id)
        futures = pre.barrier.with_first_wait({s.future for s in slots})
        futures = {f for f in futures if f is not None and not f.done()}
        if futures:
            from concurrent.futures import wait

            wait(futures)
        pre.book.settle(slots)
        pre.barrier.absorb()
        waited = time.perf_counter() - start
        self.maybe_finish()
        return waited

    def maybe_finish(self) -> None:
        """Once every job has answered, the workers only hold memory: end them."""
        pool = self.pre.pool
        if pool is not None and pool.started.is_set() and self.pre.book.all_done():
            self.pre.end_idle()
