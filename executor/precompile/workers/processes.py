"""One lane's worker processes, from their start to their end (lanes.py says what each lane runs).

The pool is created before the main process imports torch or touches CUDA, so that the
workers' start-up overlaps the main process's own; its processes are started, and the first
jobs submitted, from a background thread, because starting the first worker waits for the
fork server's imports. It ends in one of three ways: left to exit once idle (the run went on),
joined (a caller's barrier: nothing of the pool may outlive it), or killed (cancelled); either
of the last two reaps this pool's own processes by their handles, never by name (process_tree.py).

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

from .process_tree import join as join_processes
from .process_tree import terminate
from .triton_costs import build_cuda_utils
from .worker import init_worker, ready, run_job

_CONFIG_LOCK = threading.RLock()


class WorkerPool:
    """One lane's ProcessPoolExecutor (see the module docstring)."""

    def __init__(self, workers: int, specs: dict, setup: dict, options, timings, lane: str, preload: list,
                 cuda_utils: bool = False):
        """Create the process pool (no process yet) whose workers run the backends of `specs` under
        `setup` (setup.py, with the lane's own entries); `preload`: the fork server's imports (one
        fork server a process: the lanes pass the union of theirs); `cuda_utils`: one worker builds
        Triton's CUDA utils for the main process."""
        from concurrent.futures import ProcessPoolExecutor

        self.workers, self.timings, self.lane = workers, timings, lane
        self.specs, self.setup, self.cuda_utils = specs, setup, cuda_utils
        timings.target = setup.get("capability")
        self.executor = ProcessPoolExecutor(max_workers=workers, mp_context=worker_context(preload),
                                            initializer=init_worker,
                                            initargs=(specs, options.device, options.jit_monitor, options, setup))
        self.started = threading.Event()  # set once the starter thread has done its part

    def spawn(self) -> None:
        """Start every worker now (on the lanes' starter thread: the first waits for the fork server)."""
        try:
            with children_allowed():  # every process of the pool starts here (see the module docstring)
                for _ in range(self.workers):  # one no-op each: every worker starts now, not at its first job
                    self.executor.submit(ready).add_done_callback(self._on_ready)
            self.timings.spawned_s = round(time.time() - self.timings.created, 3)
            if self.cuda_utils:
                self.executor.submit(build_cuda_utils).add_done_callback(self._on_utils)
        finally:
            self.started.set()

    def _on_ready(self, fut) -> None:
        try:
            info = fut.result()
        except BaseException as e:  # noqa: BLE001
            info = {"error": f"{type(e).__name__}: {e}", "time": time.time()}
        self.timings.worker_ready(dict(info, lane=self.lane))

    def _on_utils(self, fut) -> None:
        try:
            self.timings.utils_s = fut.result()
        except BaseException as e:  # noqa: BLE001 - the main process builds it at its first kernel
            self.timings.utils_s = f"{type(e).__name__}: {e}"

    def await_start(self, timeout: float | None = None) -> bool:
        """Wait for the starter thread (at most `timeout` s); False if it has not finished."""
        return self.started.wait(timeout)

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
            join_processes(processes, join)
        if kill or join is not None:
            terminate(processes)


def worker_context(preload=()):
    """How workers start: forked from a fork server that imported Triton and the kernels
    once (executor/worker_preload.py), plus `preload` (the modules the backends' jobs need:
    ``worker_preload`` of their classes, e.g. torch for DeepGEMM's), else spawned (each
    imports them itself). The fork server is one per process: the first pool's preload list
    is the one it keeps."""
    try:
        ctx = multiprocessing.get_context("forkserver")
    except ValueError:  # a platform without fork
        return multiprocessing.get_context("spawn")
    ctx.set_forkserver_preload(list(preload) + ["executor.worker_preload"])
    return ctx


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
