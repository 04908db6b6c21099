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
import os
import signal
import threading
import time

from .worker import init_worker, ready, run_job
from .worker_start import backend_attr, build_cuda_utils, worker_context, worker_setup, worker_specs

JOIN_S = 5.0  # how long a finished pool's workers get to exit before they are terminated
DEVICE_LANE, COMPILE_LANE = "device", "compile"  # the lanes (lanes.py): with a CUDA context, without
DEVICE_LANE_NICE = 5  # the device lane's workers' niceness (what they start inherits it)
_CONFIG_LOCK = threading.RLock()


class WorkerPool:
    """One lane's ProcessPoolExecutor (lanes.py puts the lanes together; see the module docstring)."""

    def __init__(self, workers: int, backends, options, timings, lane: str, preload: list):
        """Create the process pool (no process yet) for the jobs of `backends` in `lane`; `preload`:
        the fork server's imports (one fork server a process: the lanes pass the union of theirs)."""
        from concurrent.futures import ProcessPoolExecutor

        timings.created = timings.created or time.time()
        self.workers, self.timings, self.lane = workers, timings, lane
        self.specs = worker_specs(backends)
        self.setup = worker_setup(options.device, options.worker_env, cuda_free=lane == COMPILE_LANE)
        # The offline driver compiles without CUDA, but a backend that launches Triton kernels
        # for real in the workers (vllm_bridge's) needs Triton's own driver there.
        self.setup["real_triton_driver"] = lane == DEVICE_LANE and any(
            backend_attr(n, "needs_triton_driver", False) for n in self.specs)
        # The device lane yields the CPU to the compile lane's long builds and to vLLM's own process
        # (torch.compile): its many short jobs fill the cores those leave idle (lanes.py).
        self.setup["nice"] = DEVICE_LANE_NICE if lane == DEVICE_LANE else 0
        timings.target = self.setup.get("capability")
        self.executor = ProcessPoolExecutor(max_workers=workers, mp_context=worker_context(preload),
                                            initializer=init_worker,
                                            initargs=(self.specs, options.device, options.jit_monitor, options,
                                                      self.setup))
        self.started = threading.Event()  # set once the starter thread has done its part

    def spawn(self) -> None:
        """Start every worker now (on the lanes' starter thread: the first waits for the fork server)."""
        try:
            with children_allowed():  # every process of the pool starts here (see the module docstring)
                for _ in range(self.workers):  # one no-op each: every worker starts now, not at its first job
                    self.executor.submit(ready).add_done_callback(self._on_ready)
            self.timings.spawned_s = round(time.time() - self.timings.created, 3)
            if self.setup.get("capability") and "triton" in self.specs and self.lane == COMPILE_LANE:
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
            _join(processes, join)
        if kill or join is not None:
            _terminate(processes)


def preload_of(specs) -> list:
    """The modules the fork server imports for the backends of `specs` (their ``worker_preload``)."""
    return sorted({m for name in specs for m in backend_attr(name, "worker_preload", ())})


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
    """Terminate this pool's own workers that are still alive (by their handles) and what they
    started (a FlashInfer build's ninja and nvcc), and reap them: a build cut short would otherwise
    go on writing the files vLLM's process then builds itself."""
    started = [pid for proc in processes if _alive(proc) for pid in descendants(proc.pid)]
    for proc in processes:
        try:
            if proc.is_alive():
                proc.terminate()
        except Exception:  # noqa: BLE001
            pass
    for pid in started:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _join(processes, JOIN_S)


def _alive(proc) -> bool:
    try:
        return proc.is_alive()
    except Exception:  # noqa: BLE001
        return False


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (Linux's /proc; none elsewhere), children first."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])  # the name may hold spaces and ')'
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(0), [])
        out += below
        todo += below
    return out
