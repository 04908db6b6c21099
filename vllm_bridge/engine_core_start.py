"""How vLLM starts its engine core: by fork, not in a fresh interpreter, where that was measured (issue 54).

`vllm serve` sets VLLM_WORKER_MULTIPROC_METHOD=spawn where the user did not set it (vLLM 0.25's
vllm/entrypoints/serve/utils/api_utils.py and 0.33's vllm/entrypoints/common/startup.py,
``cli_env_setup``), so the engine core is a fresh interpreter that imports torch and vLLM again. On
an H200 (issue 54, stock vLLM 0.25.0, warm caches) the engine core logged its config 18 s after the
API server's first line with spawn and 1 s after with fork: ready in 64.5 s against 48.0 s. vLLM's
own default outside its CLI is fork, and it falls back to spawn by itself where CUDA is initialised
in the parent, in a Ray actor, with NUMA binding or under WSL (vllm/utils/system_utils.py,
``_maybe_force_spawn``).

The plugin sets it back to fork, with one line in vLLM's log, in the process vLLM's CLI runs in,
where the CLI and not the user chose spawn (the variable is absent from the environment the process
started with, /proc/self/environ) and that process holds no CUDA context. A user's own choice, in
the environment or the command's, is never changed. WARMUP_ENGINE_CORE_FORK (Settings.engine_core_fork):
- unset, the default: once vLLM has made its config (EngineArgs.create_engine_config, before the
  engine core starts), where that engine runs on one GPU (one rank, one data-parallel engine): the
  case measured (bench/RESULTS.md part AI: warm ready 0.69-0.84x stock's with fork, the same tokens
  in every run; part AH: 0.79x). More ranks keep vLLM's spawn until a run measures them;
- 1: at register, whatever the engine's size;
- 0: never.
In the forked engine core the plugin does not register again (vLLM loads plugins once per
process, and the child inherits the parent's): what the plugin keeps per process is keyed by the
process id (vllm_bridge.timeline, vllm_bridge.bundles.source), and the Worker is patched by the
import hook the parent installed.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys

from . import patches

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


ASKED = f"{SWITCH}=1"
ONE_GPU = "the engine runs on one GPU"
PATCHED = "_warmup_planner_engine_core_start"  # on EngineArgs: vLLM's create_engine_config


def choose_start(setting: bool | None, environ=os.environ, proc: str = "/proc") -> bool:
    """At register, with Settings.engine_core_fork: True forks now; None (unset) once vLLM has made
    its config, where the engine runs on one GPU; False changes nothing. True if it forked now."""
    if setting is None:
        watch_engine_config(environ, proc)
        return False
    return bool(setting) and fork_engine_core(ASKED, environ, proc)


def watch_engine_config(environ=os.environ, proc: str = "/proc") -> bool:
    """Wrap vLLM's EngineArgs.create_engine_config where this process imported it (the API server: its
    argument parsing loaded the plugin; never imported only for this). True if wrapped."""
    engine_args = patches.imported("vllm.engine.arg_utils", "EngineArgs")
    if engine_args is None:
        return False

    def forking_one_gpu_engines(original):
        def create_engine_config(self, *args, **kwargs):
            config = original(self, *args, **kwargs)
            try:
                if one_gpu_engine(config):
                    fork_engine_core(ONE_GPU, environ, proc)
            except Exception as e:  # noqa: BLE001 - a start-up speed-up: vLLM starts with spawn either way
                log.info("warmup-planner: vLLM's engine core starts by spawn (%s: %s)", type(e).__name__, e)
            return config
        return create_engine_config

    patches.wrap_once(engine_args, "create_engine_config", PATCHED, forking_one_gpu_engines)
    return True


def one_gpu_engine(config) -> bool:
    """Whether vLLM's config (a VllmConfig) runs one engine on one GPU: one rank, one data-parallel engine."""
    parallel = getattr(config, "parallel_config", None)
    return getattr(parallel, "world_size", None) == 1 and getattr(parallel, "data_parallel_size", None) == 1


def fork_reason(why: str, environ=os.environ, proc: str = "/proc") -> str | None:
    """Why the engine core may start by fork here (`why`: the setting's reason, with the CLI's), or None to
    change nothing: in the server's first process (not one multiprocessing started), spawn chosen by
    vLLM's CLI rather than by the user, and no CUDA context in this process."""
    if multiprocessing.parent_process() is not None or environ.get(METHOD) != "spawn":
        return None
    start = start_environment(proc)
    if start is None or METHOD in start:
        return None  # the user's own choice (or one we cannot tell from the CLI's)
    if _cuda_initialized():
        return None  # vLLM would fall back to spawn anyway, with a warning
    return f"{why}; vLLM's CLI chose spawn, not the user"


def fork_engine_core(why: str, environ=os.environ, proc: str = "/proc") -> bool:
    """VLLM_WORKER_MULTIPROC_METHOD=fork where fork_reason allows it (one log line); True if set."""
    reason = fork_reason(why, environ, proc)
    if reason is None:
        return False
    environ[METHOD] = "fork"
    log.info("warmup-planner: vLLM's engine core starts by fork, not in a fresh interpreter (%s): torch and "
             "vLLM are not imported again; %s=0 keeps spawn", reason, SWITCH)
    return True


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")  # never imported here for this: the API server may not have it yet
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without CUDA: nothing initialised
        return False
