"""The DeepGEMM barrier between the pool's workers and the main process's JIT monitor.

DeepGEMM is counted by the kernels that appear in its cache directory, which the workers and
the main process share. While workers may still add kernels there, the monitor must not count
what appears (``busy``: it would charge the pool's kernels to whatever step runs), so the first
step that waits for jobs waits for every DeepGEMM job too. Once they are all done, each kernel
the pool compiled is counted for one job (deep_gemm_counts.py) and the monitor is told which
they are (its ``absorb`` of family ``deep_gemm``): they are not the main process's compiles.
"""

from __future__ import annotations

from ... import registry
from .deep_gemm_counts import attribute_deep_gemm, compiled_elsewhere


class DeepGemmBarrier:
    """The pool's side of DeepGEMM's shared cache (see the module docstring)."""

    def __init__(self, book, monitor=None):
        self.book = book                 # the run's JobBook: which jobs compile into DeepGEMM's cache
        self.monitor = None
        self._writes: dict = {}          # backend name -> whether it compiles into DeepGEMM's cache
        self._waited = False             # the first step with jobs waited for every DeepGEMM job
        self._absorbed = False
        if monitor is not None:
            self.watched_by(monitor)

    def watched_by(self, monitor) -> None:
        """The JIT monitor of the process that runs the plan: it holds off counting DeepGEMM's
        cache while ``busy`` (its ``pool_busy``) and learns the pool's kernels when they are done."""
        self.monitor = monitor
        monitor.pool_busy = self.busy

    def writes(self, backend: str) -> bool:
        """Whether the backend's jobs compile into DeepGEMM's cache (its class's ``jit_cache``)."""
        if backend not in self._writes:
            self._writes[backend] = registry.writes_deep_gemm(backend)
        return self._writes[backend]

    def with_first_wait(self, futures: set) -> set:
        """The futures a step waits for: the first step that waits for any also waits for every
        DeepGEMM job, so that no later step's count includes the pool's kernels."""
        if not self._waited and futures:
            self._waited = True
            futures |= {s.future for s in self.book.slots if self.writes(s.job.backend)}
        return futures

    def busy(self) -> bool:
        """Workers may still add DeepGEMM kernels to the shared cache (the main monitor waits)."""
        return any(self.writes(s.job.backend) and s.result is None
                   and not (s.future is not None and s.future.done()) for s in self.book.slots)

    def entries(self) -> set:
        """The DeepGEMM cache entries the workers compiled (each once, whichever worker saw it)."""
        return {e for r in self.book.results() for e in r.deep_gemm_entries}

    def absorb(self) -> None:
        """Once every DeepGEMM job is done: count each kernel the pool compiled for one job, and
        tell the monitor which they are. Once."""
        if self._absorbed or self.busy():
            return
        self.book.settle()
        self._absorbed = True
        ours = [r for r in self.book.results() if self.writes(r.backend)]
        theirs = compiled_elsewhere(ours)
        attribute_deep_gemm(ours + theirs)
        if self.monitor is not None:
            self.monitor.absorb("deep_gemm", self.entries() | {e for r in theirs for e in r.deep_gemm_entries})
