"""FlashInfer's JIT modules built in a process of their own, ahead of the engine.

    python -m executor.precompile.workers.build_ahead --arch 9.0 --parent PID --timeout S GENERATOR...

The vLLM plugin starts it from vLLM's first process as soon as the model is known
(vllm_bridge/ahead.py), tens of seconds before vLLM starts its engine process and the pool with
it: these builds are the pool's long poles. Each GENERATOR is FlashInfer's 'module:function' that
returns a module's JitSpec; every module is built (not loaded: no CUDA context) under FlashInfer's
file lock, all at once (each is ninja over its own sources). The pool's job for the same module,
and vLLM's own first call of it, wait on that lock and then find the .so. One line a module on
stderr. It ends with the process that started it, and after --timeout seconds in any case, with
the ninja and nvcc it started. Its command line: build_ahead_command.py.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from ...backends.flashinfer_jit import FLASHINFER_ARCHS
from .build_ahead_command import MODULE
from .process_tree import descendants, kill

PARENT_POLL_S = 1.0
# The builder's niceness: vLLM's own start (its imports, its engine process, torch.compile) gets the
# cores first, then these builds, then the pool's device lane (lanes.DEVICE_LANE_NICE, higher).
BUILD_AHEAD_NICE = 5


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault(FLASHINFER_ARCHS, args.arch)  # FlashInfer asks CUDA nothing (setup.py)
    _end_with(args.parent)
    timer = threading.Timer(args.timeout, _stop, args=(f"not done after {args.timeout:g} s",))
    timer.daemon = True
    timer.start()
    try:
        os.nice(BUILD_AHEAD_NICE)
    except OSError:
        pass
    # FlashInfer's generator modules imported here, one after the other: two threads importing two
    # of its submodules at once deadlock in Python's import locks (_DeadlockError on
    # flashinfer.jit.sampling: bench/RESULTS.md part X). The builds then run at once.
    ready = [g for g in args.generators if _imported(g)]
    threads = [threading.Thread(target=_build, args=(g,), daemon=True) for g in ready]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    p.add_argument("--arch", required=True, help="the GPUs' compute capability, as FlashInfer reads it (9.0)")
    p.add_argument("--parent", type=int, required=True, help="the pid whose end ends this process")
    p.add_argument("--timeout", type=float, required=True, help="seconds after which what is left is ended")
    p.add_argument("generators", nargs="+", help="FlashInfer's 'module:function' of each JitSpec")
    return p


def _imported(path: str) -> bool:
    from executor.backends.flashinfer_jit import generator

    try:
        generator(path)
    except Exception as e:  # noqa: BLE001 - the pool's job or vLLM builds it then, and says why
        _say(f"{path.rpartition(':')[2]} not built ahead ({type(e).__name__}: {_first_line(e)})")
        return False
    return True


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0][:200] if str(e) else ""


def _build(path: str) -> None:
    from executor.backends.flashinfer_jit import BUILT, PREBUILT, UP_TO_DATE, build_only

    name = path.rpartition(":")[2]
    began = time.perf_counter()
    try:
        how = build_only(path)
    except Exception as e:  # noqa: BLE001 - the pool's job or vLLM builds it then, and says why
        _say(f"{name} not built ahead ({type(e).__name__}: {_first_line(e)})")
        return
    what = {BUILT: "built ahead", UP_TO_DATE: "up to date (nothing built)",
            PREBUILT: "prebuilt (flashinfer-jit-cache)"}[how]
    _say(f"{name} {what} in {time.perf_counter() - began:.1f} s")


def _end_with(parent: int) -> None:
    """End when `parent` does (it is then no longer this process's parent), or on SIGTERM; either
    ends what this process started. Looked at every second from a thread: Linux's parent-death
    signal follows the thread that started a process, and the plugin starts it from one that ends."""
    signal.signal(signal.SIGTERM, lambda *_: _stop("ended (SIGTERM)"))

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        _stop("its parent ended")

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _stop(why: str) -> None:
    kill(descendants(os.getpid()))
    _say(f"stopped: {why}")
    os._exit(1)


_SAY = threading.Lock()  # the builds' threads write whole lines


def _say(line: str) -> None:
    text = (f"warmup-planner: FlashInfer build ahead {line}" if line.startswith("stopped") else
            f"warmup-planner: FlashInfer module {line}")
    with _SAY:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
