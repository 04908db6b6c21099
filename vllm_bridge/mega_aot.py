"""vLLM's mega AOT artifact (VLLM_USE_MEGA_AOT_ARTIFACT), asked for on a torch where vLLM's code
supports it but vLLM's default leaves it off (issue 54: the torch.compile load of a warm start).

On a warm start vLLM 0.25 loads its AOT-compiled model by deserializing the FX graph, splitting it
again and loading each piece's compiled artifact: on an H200, for a 12B FP8 model, 7.7-10.0 s of a
40-57 s warm start, 4.8-6.3 s of them before vLLM's backend is called (bench/RESULTS.md part AM).
With the mega artifact (vllm#37198) the compiled pieces are one standalone-compile artifact, loaded
without splitting the graph again; upstream measured torch.compile's warm load 37-61 % shorter on
five models. vLLM turns it on by default from torch 2.12 (envs.use_mega_aot_artifact); its code
takes it from torch 2.10 (compiler_interface: standalone_compile's ``aot``), so on vLLM 0.25's torch
2.11 it is one variable away. Here, when WARMUP_TORCH_MEGA_AOT=1 asks for it:
- the plugin sets the variable in its first process, at register, before vLLM makes its config and
  starts its engine core: every process of the server reads the same value;
- never over a value the user set, and never where what it needs is off (vLLM's AOT compile, its
  standalone compile) or torch is older than 2.10: vLLM would refuse or ignore it;
- nothing where vLLM's own default already has it on.
The artifact is one of the compile cache's key factors (caching.aot_compile_hash_factors): a node whose
cache was filled without it compiles once more (a cold torch.compile), and a bundle is used only by a
start with the setting it was built with. Off by default until a GPU has measured it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re

log = logging.getLogger("vllm.warmup_planner")

VARIABLE = "VLLM_USE_MEGA_AOT_ARTIFACT"
MIN_TORCH = (2, 10)  # vLLM's compiler_interface passes standalone_compile's `aot` from here


def choose(environ=os.environ, vllm_envs=None, torch_version: str | None = None) -> bool:
    """Set VARIABLE to 1 in `environ` where vLLM would leave it off and can use it; True if set here.
    `vllm_envs` (vLLM's envs module) reads os.environ, which is `environ` in a server. One line in
    vLLM's log where it is set or kept off for a reason, from the first process only."""
    if environ.get(VARIABLE, "").strip():
        return False  # the user's, or this server's first process's: kept as it is
    if vllm_envs is None:
        import vllm.envs as vllm_envs
    why_not = _why_not(vllm_envs, _torch_version() if torch_version is None else torch_version)
    if why_not == "vLLM's default":
        return False  # nothing to ask for, nothing to say
    if why_not:
        _say("warmup-planner: vLLM's mega AOT artifact not asked for (%s); WARMUP_TORCH_MEGA_AOT is ignored", why_not)
        return False
    environ[VARIABLE] = "1"
    _say("warmup-planner: vLLM's torch.compile artifacts are one mega AOT artifact (%s=1; WARMUP_TORCH_MEGA_AOT=1): "
         "a warm start loads it without splitting the graph again; a compile cache filled without it compiles once "
         "more", VARIABLE)
    return True


def _why_not(vllm_envs, torch_version: str) -> str | None:
    """Why the variable is not set: vLLM's default already has it, or what it needs is off."""
    if vllm_envs.use_mega_aot_artifact():
        return "vLLM's default"
    if not vllm_envs.use_aot_compile():
        return "vLLM's AOT compile is off"
    if not vllm_envs.VLLM_USE_STANDALONE_COMPILE:
        return "VLLM_USE_STANDALONE_COMPILE=0"
    found = re.match(r"(\d+)\.(\d+)", torch_version or "")
    if found is None or (int(found[1]), int(found[2])) < MIN_TORCH:
        return f"torch {torch_version or '(unknown)'} is older than {'.'.join(map(str, MIN_TORCH))}"
    return None


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return ""


def _say(message: str, *args) -> None:
    if multiprocessing.parent_process() is None:  # vLLM's first process, not an engine core it spawned
        log.info(message, *args)
