"""FlashInfer's nvcc told to spread each compile unit's device-code optimisation over the machine's
cores (``--split-compile=0``), where no module of the JIT workspace was built otherwise (issue 54).

A cold start's longest pole is a FlashInfer JIT module (its ``sampling`` module: three compile
units, one nvcc each). On an H200 (bench/RESULTS.md part AL) that module built alone in 135.9 s with
FlashInfer's flags and in 55.0 s with ``--split-compile=0``; in a 12B FP8 model's cold `vllm serve`
with the plugin, its build ahead took 49.8 and 54.2 s against 81.2 and 86.7 s and the server was
ready in 88.5 and 92.0 s against 110.0 and 116.3 s, alternating in one lease, with the same tokens and
the same KV cache.

FlashInfer adds FLASHINFER_EXTRA_CUDAFLAGS to every nvcc command it writes into a module's
``build.ninja`` (flashinfer/jit/cpp_ext.py), runs ninja at every load from its JIT workspace, and
ninja rebuilds a module whose command changed. So the flags must be the same in every process of a
start and in the starts after it:
- the plugin sets the variable in its first process, at register, before vLLM makes its config (the
  plan ahead's build process) and starts its engine core: every process of the server inherits it;
- a user's own FLASHINFER_EXTRA_CUDAFLAGS is never changed (their flags are the workspace's);
- a workspace that already holds a module built without the flag (by stock vLLM, or by a plugin
  before this setting) keeps FlashInfer's flags: adding one would build each such module again.
Modules a bundle placed load from FlashInfer's AOT directory, without ninja: flags do not touch them.
WARMUP_FLASHINFER_SPLIT_COMPILE=0 (Settings.flashinfer_split_compile): FlashInfer's own flags.
"""

from __future__ import annotations

import logging
import multiprocessing
import os

log = logging.getLogger("vllm.warmup_planner")

VARIABLE = "FLASHINFER_EXTRA_CUDAFLAGS"
SPLIT_COMPILE = "--split-compile=0"  # nvcc: as many threads as the machine has cores, per compile unit


def choose_flags(environ=os.environ) -> bool:
    """Set SPLIT_COMPILE as FlashInfer's extra nvcc flags in `environ` where the user set none and the
    workspace holds no module built without it; True if set here. One line in vLLM's log where it sets
    the flag or keeps FlashInfer's for the workspace's sake, from the first process only (a spawned
    engine core inherits the choice); none where the user's flags are kept."""
    if environ.get(VARIABLE, "").strip():
        return False  # the user's, or this server's first process's: kept as it is
    from executor.caches.flashinfer_jit import flashinfer_version, modules_built_without

    if flashinfer_version() is None:
        return False  # no FlashInfer: nothing it builds, nothing to say

    try:
        built_otherwise = modules_built_without(SPLIT_COMPILE, environ)
    except Exception as e:  # noqa: BLE001 - an optimisation: FlashInfer builds with its own flags
        _say("warmup-planner: FlashInfer's nvcc flags kept (its workspace not read: %s: %s)", type(e).__name__, e)
        return False
    if built_otherwise:
        _say("warmup-planner: FlashInfer's modules %s were built with FlashInfer's own nvcc flags: kept (a changed "
             "flag would build them again)", ", ".join(built_otherwise))
        return False
    environ[VARIABLE] = SPLIT_COMPILE
    _say("warmup-planner: FlashInfer's nvcc spreads each compile unit over the cores (%s=%s; "
         "WARMUP_FLASHINFER_SPLIT_COMPILE=0: FlashInfer's own flags)", VARIABLE, SPLIT_COMPILE)
    return True


def _say(message: str, *args) -> None:
    if multiprocessing.parent_process() is None:  # vLLM's first process, not an engine core it spawned
        log.info(message, *args)
