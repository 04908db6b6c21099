"""The worker processes of one run, from their start to their end.

The pool is created before the main process imports torch or touches CUDA, so that the
workers' start-up overlaps the main process's own; its processes are started, and the first
jobs submitted, from a background thread, because starting the first worker waits for the
fork server's imports. It ends in one of three ways: left to exit once idle (the run went on),
joined (a caller's barrier: nothing of the pool may outlive it), or killed (cancelled); either
of the last two reaps this pool's own processes by their handles, never by name.

A daemon process may start a pool too (vLLM's tensor-parallel ranks are daemons): Python refuses
it children because a daemon is ended without joining them, which would orphan them. These
workers do not outlive it: they block on the pool's call queue, whose pipe breaks when the process
that owns the pool dies, and the fork server they come from exits with it too.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time

from .worker import init_worker, ready, run_job
from .worker_start import backend_attr, build_cuda_utils, worker_context, worker_setup, worker_specs

JOIN_S = 5.0  # how long a finished pool's workers get to exit before they are terminated
_CONFIG_LOCK = threading.RLock()


class WorkerPool:
    """One run's ProcessPoolExecutor and its starter thread (see the module docstring)."""

    def __init__(self, workers: int, book, options, timings):
        """Create the process pool (no process yet) for the jobs of `book`."""
        from concurrent.futures import ProcessPoolExecutor

        timings.created = time.time()
        self.workers, self.timings = workers, timings
        self.specs = worker_specs({s.job.backend for s in book.slots})
        self.setup = worker_setup(options.device, options.worker_env)
        # The offline driver compiles without CUDA, but a backend that launches Triton kernels
        # for real in the workers (vllm_bridge's) needs Triton's own driver there.
        self.setup["real_triton_driver"] = any(backend_attr(n, "needs_triton_driver", False) for n in self.specs)
        timings.target = self.setup.get("capability")
        preload = sorted({m for name in self.specs for m in backend_attr(name, "worker_preload", ())})
        self.executor = ProcessPoolExecutor(max_workers=workers, mp_context=worker_context(preload),
                                            initializer=init_worker,
                                            initargs=(self.specs, options.device, options.jit_monitor, options,
                                                      self.setup))
        self.started = threading.Event()  # set once the starter thread has done its part

    def start(self, then) -> None:
        """Start every worker from a background thread, then call `then` there (submit the first jobs)."""
        threading.Thread(target=self._spawn, args=(then,), name="warmup-precompile-start", daemon=True).start()

    def _spawn(self, then) -> None:
        try:
            with children_allowed():  # every process of the pool starts here (see the module docstring)
                for _ in range(self.workers):  # one no-op each: every worker starts now, not at its first job
                    self.executor.submit(ready).add_done_callback(self._on_ready)
            self.timings.spawned_s = round(time.time() - self.timings.created, 3)
            if self.setup.get("capability") and "triton" in self.specs:
                self.executor.submit(build_cuda_utils).add_done_callback(self._on_utils)
            then()
        except Exception as e:  # noqa: BLE001 - the jobs left unsubmitted are compiled by the main process
            self.timings.start_error = f"{type(e).__name__}: {e}"
        finally:
            self.started.set()

    def _on_ready(self, fut) -> None:
        try:
            info = fut.result()
        except BaseException as e:  # noqa: BLE001
            info = {"error": f"{type(e).__name__}: {e}", "time": time.time()}
        self.timings.worker_ready(info)

    def _on_utils(self, fut) -> None:
        try:
            self.timings.utils_s = fut.result()
        except BaseException as e:  # noqa: BLE001 - the main process builds it at its first kernel
            self.timings.utils_s = f"{type(e).__name__}: {e}"

    def await_start(self, timeout: float | None = None) -> bool:
        """Wait for the starter thread (at most `timeout` s); False if it has not finished."""
        return self.started.wait(timeout)

    def run(self, book, slots: list, follow) -> None:
        """Submit the jobs of `slots`, each followed by its key's future (waits.py); a job that
        cannot be submitted (a broken pool) fails, and the main process compiles its variant."""
        for slot in slots:
            try:
                future = follow(slot.job, self.submit(slot.job))
            except Exception as e:  # noqa: BLE001
                slot.result = book.ended(slot, f"not submitted ({type(e).__name__}: {e})")
                continue
            book.submitted(slot, future)

    def submit(self, job):
        with children_allowed():  # a submit may start a worker when none is idle yet
            return self.executor.submit(run_job, job)

    def shutdown(self, kill: bool = False, join: float | None = None) -> None:
        """End the pool. `kill`: terminate its workers now; `join`: let them exit on their own
        for up to that many seconds, then terminate what is left (either way they are gone)."""
        processes = list((getattr(self.executor, "_processes", None) or {}).values())
        try:
            self.executor.shutdown(wait=False, cancel_futures=True)
        except Exception:  # noqa: BLE001
            pass
        if join is not None:
            _join(processes, join)
        if kill or join is not None:
            _terminate(processes)


@contextlib.contextmanager
def children_allowed():
    """Inside, this process may start child processes even when it is a daemon (Python's check is
    the `daemon` entry of the current process's config, read when a child starts)."""
    config = multiprocessing.current_process()._config  # noqa: SLF001 - the one place Python keeps it
    with _CONFIG_LOCK:  # the starter thread and the waits' takeovers submit: one restores it, last
        daemon = config.get("daemon")
        if daemon:
            config["daemon"] = False
        try:
            yield
        finally:
            if daemon:
                config["daemon"] = daemon


def _join(processes, seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    for proc in processes:
        try:
            proc.join(max(0.0, deadline - time.perf_counter()))
        except Exception:  # noqa: BLE001
            pass


def _terminate(processes) -> None:
    """Terminate this pool's own workers that are still alive (by their handles), and reap them."""
    for proc in processes:
        try:
            if proc.is_alive():
                proc.terminate()
        except Exception:  # noqa: BLE001
            pass
    _join(processes, JOIN_S)
