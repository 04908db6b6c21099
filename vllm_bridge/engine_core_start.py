"""How vLLM starts its engine core: by fork, where the user asks for it (issue 54).

`vllm serve` sets VLLM_WORKER_MULTIPROC_METHOD=spawn where the user did not set it (vLLM 0.25's
vllm/entrypoints/serve/utils/api_utils.py and 0.33's vllm/entrypoints/common/startup.py,
``cli_env_setup``), so the engine core is a fresh interpreter that imports torch and vLLM again. On
an H200 (issue 54, stock vLLM 0.25.0, warm caches) the engine core logged its config 18 s after the
API server's first line with spawn and 1 s after with fork: ready in 64.5 s against 48.0 s. vLLM's
own default outside its CLI is fork, and it falls back to spawn by itself where CUDA is initialised
in the parent (vllm/utils/system_utils.py, ``_maybe_force_spawn``).

WARMUP_ENGINE_CORE_FORK=1 (measured with the plugin on an H200, bench/RESULTS.md part AH: warm ready
64.9 -> 50.1 s, medians of three; off by default until a run shows the same tokens with it): in the
process vLLM's CLI runs in, where the CLI and not the user chose spawn (the variable is absent from
the environment the process started with, /proc/self/environ), the plugin sets it back to fork, with
one line in vLLM's log. A user's own choice, in the environment or the command's, is never changed.
In the forked engine core the plugin does not register again (vLLM loads plugins once per
process, and the child inherits the parent's): what the plugin keeps per process is keyed by the
process id (vllm_bridge.timeline, vllm_bridge.bundle_source), and the Worker is patched by the
import hook the parent installed.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys

log = logging.getLogger("vllm.warmup_planner")

METHOD = "VLLM_WORKER_MULTIPROC_METHOD"
SWITCH = "WARMUP_ENGINE_CORE_FORK"


def start_environment(proc: str = "/proc") -> dict | None:
    """The environment this process started with (what the user and its parent set, before vLLM's
    CLI changed anything), or None where it cannot be read."""
    try:
        with open(os.path.join(proc, "self", "environ"), "rb") as f:
            raw = f.read(1 << 22)  # bounded: an environment is far smaller
    except OSError:
        return None
    entries = (e.split(b"=", 1) for e in raw.split(b"\0") if b"=" in e)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in entries}


def fork_reason(asked: bool, environ=os.environ, proc: str = "/proc") -> str | None:
    """Why the engine core may start by fork here, or None to change nothing: asked for
    (WARMUP_ENGINE_CORE_FORK, Settings.engine_core_fork), in the server's first process (not one
    multiprocessing started), spawn chosen by vLLM's CLI rather than by the user, and no CUDA
    context in this process."""
    if not asked:
        return None
    if multiprocessing.parent_process() is not None or environ.get(METHOD) != "spawn":
        return None
    start = start_environment(proc)
    if start is None or METHOD in start:
        return None  # the user's own choice (or one we cannot tell from the CLI's)
    if _cuda_initialized():
        return None  # vLLM would fall back to spawn anyway, with a warning
    return f"{SWITCH}=1; vLLM's CLI chose spawn, not the user"


def fork_engine_core(asked: bool, environ=os.environ, proc: str = "/proc") -> bool:
    """At register: VLLM_WORKER_MULTIPROC_METHOD=fork where fork_reason allows it (one log line)."""
    reason = fork_reason(asked, environ, proc)
    if reason is None:
        return False
    environ[METHOD] = "fork"
    log.info("warmup-planner: vLLM's engine core starts by fork, not in a fresh interpreter (%s): torch and "
             "vLLM are not imported again", reason)
    return True


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")  # never imported here for this: the API server may not have it yet
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without CUDA: nothing initialised
        return False
