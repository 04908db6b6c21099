"""A start-up bundle written after ready, beside vLLM (vllm_bridge/bundles/startup.py lists the caches at ready
and hands the listing here): a daemon thread packs it, and the process's exit waits for it a bounded
time, then stops it; the file is written whole or not at all (executor/bundle/archive.py)."""

from __future__ import annotations

import atexit
import logging
import threading
import time

from ..step_aside import cause_of

log = logging.getLogger("vllm.warmup_planner")

EXIT_WAIT_S = 120.0   # at the process's exit, how long a bundle still being written is waited for
CANCEL_WAIT_S = 5.0   # then, how long its writer is given to stop and remove its temporary file
_writers: list = []   # this process's Writers not yet finished
_lock = threading.Lock()
_hooked = False


class Writer:
    """One bundle written in a daemon thread: it never keeps the process alive on its own, and the
    process's exit (``finish_at_exit``) waits for it, EXIT_WAIT_S at most, then stops it (nothing
    written: the file appears whole or not at all, executor/bundle/archive.py). Its outcome is one
    log line: the bundle written, when and how long it took, or why none was."""

    def __init__(self, out: str, listed, ready: float):
        self.out, self.listed, self.ready = out, listed, ready
        self.listed_s = time.monotonic() - ready  # what the listing took, on the critical path
        self.cancel = threading.Event()
        self.thread = threading.Thread(target=self._run, name="warmup-planner-bundle", daemon=True)

    def start(self) -> Writer:
        with _lock:
            _writers.append(self)
        _hook_exit()
        self.thread.start()
        return self

    def _run(self) -> None:
        from executor.bundle import Cancelled, startup_summary, write_listed

        started = time.monotonic()
        try:
            manifest = write_listed(self.out, self.listed, cancelled=self.cancel.is_set)
        except Cancelled:
            log.warning("warmup-planner: no bundle written: the process exited %.1f s into writing %s, "
                        "which was not waited for longer", time.monotonic() - started, self.out)
        except Exception as e:  # noqa: BLE001 - ours: one line, the server runs
            log.warning("warmup-planner: no bundle written: %s", cause_of(e))
        else:
            done = time.monotonic()
            log.info("warmup-planner: bundle %s written %.1f s after ready, in %.1f s beside vLLM (its files listed "
                     "at ready in %.2f s): %s", self.out, done - self.ready, done - started, self.listed_s,
                     startup_summary(manifest))
        finally:
            with _lock:
                if self in _writers:
                    _writers.remove(self)

    def finish(self, timeout: float) -> None:
        """Wait `timeout` s for the bundle, then stop its writer (CANCEL_WAIT_S more for it to go). A
        writer still stuck, or a process killed, leaves no file: the bundle is written into an unnamed
        file that only gets its name once complete (planner.output.replacement)."""
        self.thread.join(timeout)
        if not self.thread.is_alive():
            return
        self.cancel.set()
        self.thread.join(CANCEL_WAIT_S)
        if self.thread.is_alive():  # stuck in a read or a write: the thread's own line never comes
            log.warning("warmup-planner: no bundle written: the process exits while %s is still being written "
                        "(%.0f s waited); nothing of it is left there", self.out,
                        timeout + CANCEL_WAIT_S)


def finish_at_exit(timeout: float | None = None) -> None:
    """Every bundle of this process still being written: waited for, then stopped (at exit)."""
    with _lock:
        writers = list(_writers)
    deadline = time.monotonic() + (EXIT_WAIT_S if timeout is None else timeout)
    for writer in writers:
        writer.finish(max(0.0, deadline - time.monotonic()))


def _hook_exit() -> None:
    """finish_at_exit at the process's exit, before Python joins its threads: also in a process of
    multiprocessing's (vLLM's engine core and workers), which leaves by os._exit, running no atexit
    handler but threading's own. Once per process."""
    global _hooked
    with _lock:
        if _hooked:
            return
        _hooked = True
    try:
        threading._register_atexit(finish_at_exit)  # what concurrent.futures uses
    except (AttributeError, RuntimeError):  # another Python, or the interpreter is exiting already
        atexit.register(finish_at_exit)
