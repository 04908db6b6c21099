"""vLLM's model-class inspection in a forked child of the API server, not in a fresh interpreter
(issue 54; WARMUP_MODEL_INSPECTION_FORK).

Where vLLM's model-info cache ($VLLM_CACHE_ROOT/modelinfos) has no entry for the model's class (a cold
start, a machine no bundle filled), vLLM 0.25 and 0.33 inspect the class "in another process to avoid
initializing CUDA" (vllm/model_executor/models/registry.py, ``_run_in_subprocess``): a fresh
``python -m vllm.model_executor.models.registry`` that imports torch and vLLM again, on the API
server's path before it makes its config. On an H200 that was 23.5 s of a 152.5 s cold start of a 12B
model, 19.2 s of them the child's imports (bench/RESULTS.md part AJ).

A child forked from the API server has torch and vLLM imported already and, like vLLM's, leaves the
server's own process without a CUDA context; it runs the same function (vLLM's inspection of the
class) and sends its result back through a pipe, pickled as vLLM's child does. Where the server holds
a CUDA context (a fork would inherit it) or the child fails, exits without a result or runs past
DEADLINE_S, vLLM's own subprocess runs as always: one line in vLLM's log, never a different answer.
On by default since bench/RESULTS.md part AK (H200, a 12B model's cold start: the API server's engine
config 23.5 s -> 2.2 s, the same tokens and KV cache); WARMUP_MODEL_INSPECTION_FORK=0 gives vLLM's own.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import sys
import threading
import time

log = logging.getLogger("vllm.warmup_planner")

REGISTRY = "vllm.model_executor.models.registry"
RUN = "_run_in_subprocess"  # registry's module global, called by _LazyRegisteredModel.inspect_model_cls
PATCHED = "_warmup_planner_model_inspection"
# vLLM's child took 23.5 s with its imports (part AJ), a forked one has them and answers in seconds (part AK).
# A fork can hang one way: another thread inside an import at the fork leaves that module's import lock held
# for ever in the child. The plugin's own threads that import while vLLM resolves the model (the plan ahead,
# vllm_bridge/ahead.py) hold IMPORTING, and the fork waits for it (at most GATE_WAIT_S); a thread of someone
# else's is bounded by the deadline, 30 s, then vLLM's own subprocess.
DEADLINE_S = 30.0
IMPORTING = threading.Lock()
GATE_WAIT_S = 5.0


def install(registry=None) -> bool:
    """Wrap the registry module's _run_in_subprocess, once per process; True if wrapped now. `registry`:
    the module (None: where this process imported it; the plugin's import hook calls this when it does)."""
    registry = registry if registry is not None else sys.modules.get(REGISTRY)
    if registry is None or PATCHED in vars(registry):
        return False
    original = getattr(registry, RUN)
    setattr(registry, PATCHED, original)

    def run_in_subprocess(fn):
        result = in_fork(fn)
        return original(fn) if result is _NONE else result

    setattr(registry, RUN, run_in_subprocess)
    return True


def uninstall(registry) -> None:
    """vLLM's function back in place (tests)."""
    if PATCHED in vars(registry):
        setattr(registry, RUN, vars(registry)[PATCHED])
        delattr(registry, PATCHED)


class _None:
    """No result from the fork: vLLM's own subprocess runs."""


_NONE = _None()


def in_fork(fn, deadline_s: float = DEADLINE_S):
    """fn() run in a forked child, its pickled result returned; _NONE (one line said) where it cannot be."""
    why = _cannot_fork()
    if why:
        log.info("warmup-planner: vLLM inspects the model class in a fresh interpreter (%s)", why)
        return _NONE
    started = time.monotonic()
    read_end, write_end = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # or the child's exit writes the parent's buffered lines a second time
    gated = IMPORTING.acquire(timeout=GATE_WAIT_S)  # no thread of ours inside an import at the fork
    try:
        pid = os.fork()
    finally:
        if gated:
            IMPORTING.release()
    if pid == 0:  # the child: never returns into the server's code
        os.close(read_end)
        _child(fn, write_end)
    os.close(write_end)
    try:
        outcome = _read_outcome(read_end, pid, deadline_s)
    finally:
        os.close(read_end)
    if isinstance(outcome, str):
        log.info("warmup-planner: the model class's inspection in a forked child failed (%s); vLLM inspects it "
                 "in a fresh interpreter", outcome)
        return _NONE
    log.info("warmup-planner: vLLM's model class inspected in a forked child (%.2f s), not a fresh interpreter",
             time.monotonic() - started)
    return outcome[0]


def _cannot_fork() -> str | None:
    if not hasattr(os, "fork"):
        return "no fork on this platform"
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return "this process holds a CUDA context, which a forked child would share"
    except Exception:  # noqa: BLE001 - a torch without CUDA: nothing initialised
        pass
    return None


def _child(fn, write_end: int) -> None:
    code = 0
    try:
        try:
            payload = pickle.dumps(("ok", fn()))
        except BaseException as e:  # noqa: BLE001 - the parent falls back to vLLM's own subprocess
            payload, code = pickle.dumps(("error", f"{type(e).__name__}: {e}")), 1
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
    finally:
        os._exit(code)  # no atexit handler, no flush of what the server buffered


def _read_outcome(read_end: int, pid: int, deadline_s: float):
    """(result,) from the child, or a one-line reason there is none; the child reaped either way."""
    chunks, end = [], time.monotonic() + deadline_s
    while True:
        left = end - time.monotonic()
        if left <= 0 or not select.select([read_end], [], [], left)[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return f"no answer within {deadline_s:.0f} s"
        chunk = os.read(read_end, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    try:
        kind, value = pickle.loads(b"".join(chunks))
    except Exception:  # noqa: BLE001 - a child that died before writing all of it
        return f"the child exited with status {status} and no result"
    return (value,) if kind == "ok" else value


def watch(after_import) -> None:
    """install now where this process imported vLLM's registry, else when it does (the plugin's hook)."""
    if REGISTRY in sys.modules:
        install()
    else:
        after_import(REGISTRY, install)

