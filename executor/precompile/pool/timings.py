"""When the precompile pool's phases happened: one record its pieces fill, read by the report.

The pool's start (``created``, wall-clock) is the origin of every job's times in the report,
so that a trace of the run (bench/vllm_plugin_trace.py) can place them beside its own events;
the caller's seconds in start(), close() and finish() are kept apart from the jobs' because
they are what the pool costs the main process (bench/RESULTS.md reads both).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Timings:
    """The pool's times; the pieces write their own (workers/: the start, precompiler.py: the caller's)."""

    created: float | None = None       # time.time() of the pool's start (records are relative)
    start_s: float | None = None       # the caller's time in start()
    spawned_s: float | None = None     # pool start -> every worker process started
    close_s: float | None = None       # the caller's time in close()
    finish_s: float | None = None      # seconds finish() waited for the pool (a caller's barrier)
    start_error: str | None = None     # why the starter thread stopped submitting
    ready: list = field(default_factory=list)   # each worker's answer to its ready no-op
    ready_at: float | None = None      # time.time() the first worker answered
    utils_s: float | str | None = None  # seconds a worker spent building Triton's CUDA utils (or why not)
    target: int | None = None          # the compute capability the workers compiled for (None: CUDA asked)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextlib.contextmanager
    def clock(self, name: str, digits: int, add: bool = False, keep=None):
        """Time the caller's block into field `name` (`add`: onto what it holds; `keep()`: whether
        the time counts, asked at the end)."""
        began = time.perf_counter()
        try:
            yield
        finally:
            if keep is None or keep():
                before = (getattr(self, name) or 0.0) if add else 0.0
                setattr(self, name, round(before + time.perf_counter() - began, digits))

    def worker_ready(self, info: dict) -> None:
        """A worker answered (on the pool's thread: several may answer at once)."""
        with self._lock:
            self.ready.append(info)
            if self.ready_at is None:
                self.ready_at = info.get("time") or time.time()

    def since_created(self, stamp: float | None) -> float | None:
        return round(stamp - self.created, 3) if stamp is not None and self.created else None

    def report(self, results: list) -> dict:
        """When the pool and its jobs ran, relative to the pool's start, and the speed-up."""
        ran = [r for r in results if r.pid is not None]
        busy = sum(r.wall_s for r in ran)
        first = min((r.start for r in ran), default=None)
        wall = max(max(r.end for r in ran) - first, 1e-9) if ran else 0.0
        compile_ms = [r.compile_ms for r in ran if r.compile_ms is not None]
        return {
            "wall_s": round(wall, 3),
            "busy_s": round(busy, 3),                        # the jobs' own seconds, summed over workers
            "compile_s": round(sum(compile_ms) / 1000.0, 3),  # Triton's own
            "speedup": round(busy / wall, 2) if ran and wall > 0 else None,
            "created": self.created,
            "finish_s": self.finish_s,
            "start_s": self.start_s,
            "spawned_s": self.spawned_s,
            "close_s": self.close_s,
            "start_error": self.start_error,
            "first_worker_ready_s": self.since_created(self.ready_at),
            "first_job_s": self.since_created(first),
            "worker_init_s": sorted(i["init_s"] for i in self.ready if i.get("init_s") is not None),
            "target": self.target,
            "cuda_utils_s": self.utils_s,
        }
