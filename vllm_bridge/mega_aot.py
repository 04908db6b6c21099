"""vLLM's mega AOT artifact (VLLM_USE_MEGA_AOT_ARTIFACT), asked for on a torch where vLLM's code
supports it but vLLM's default leaves it off (issue 54: the torch.compile load of a warm start).

On a warm start vLLM 0.25 loads its AOT-compiled model by deserializing the FX graph, splitting it
again and loading each piece's compiled artifact. With the mega artifact (vllm#37198) the compiled
pieces are one standalone-compile artifact, loaded without splitting the graph again. On an H200, a
12B FP8 model's warm `vllm serve` (bench/RESULTS.md part AN, alternating in one lease, the same tokens):
vLLM's "torch.compile took" 0.52-1.58 s with it against 11.6-15.0 s without; ready 45.8 s against
58.8 s (medians of three). vLLM turns it on by default from torch 2.12 (envs.use_mega_aot_artifact);
its code takes it from torch 2.10 (compiler_interface: standalone_compile's ``aot``), so on vLLM 0.25's
torch 2.11 it is one variable away. The plugin (WARMUP_TORCH_MEGA_AOT, on by default):
- sets the variable in its first process, at register, before vLLM makes its config and starts its
  engine core: every process of the server reads the same value;
- never over a value the user set, and never where what it needs is off (vLLM's AOT compile, its
  standalone compile, its compile cache) or torch is older than 2.10: vLLM would refuse or ignore it;
  nothing where vLLM's own default already has it on.
The artifact is one of the compile cache's key factors (caching.aot_compile_hash_factors): a start with
the other value finds nothing of the cache's and compiles cold. So, like FlashInfer's flags
(flashinfer_flags.py), it follows the cache:
- a torch.compile cache that holds an AOT artifact and no MARKER (filled by stock vLLM, or by the plugin
  before this setting) keeps vLLM's default;
- where the plugin sets it, it first writes MARKER beside the cache (``$VLLM_CACHE_ROOT``, outside every
  cache a bundle packs): the next starts on that cache set it again;
- a start that installs or writes a bundle (WARMUP_BUNDLE, WARMUP_BUNDLE_OUT) keeps vLLM's default:
  the bundles proved on machines that never built them carry the artifacts without it.
Part AO ran the first two cases on an H200: the plugin's own caches loaded with the artifact (0.37-1.35 s),
stock's caches kept vLLM's default and loaded warm, with no cold compile.
"""

from __future__ import annotations

import glob
import logging
import multiprocessing
import os
import re

from planner.output import write_atomic

log = logging.getLogger("vllm.warmup_planner")

VARIABLE = "VLLM_USE_MEGA_AOT_ARTIFACT"
MIN_TORCH = (2, 10)  # vLLM's compiler_interface passes standalone_compile's `aot` from here
MARKER = "warmup-planner.mega-aot"  # in $VLLM_CACHE_ROOT: the plugin's starts on this cache ask for the artifact
MARKER_TEXT = (f"warmup-planner: the plugin's starts on this cache set {VARIABLE}=1 (vllm_bridge/mega_aot.py); "
               "remove this file to let them keep vLLM's default once the cache holds artifacts\n")
AOT_ARTIFACTS = os.path.join("torch_compile_cache", "torch_aot_compile", "*", "rank_*", "model")  # vLLM's AOT layout


def choose(environ=os.environ, vllm_envs=None, torch_version: str | None = None, *, bundle_named: bool = False) -> bool:
    """Set VARIABLE to 1 in `environ` where vLLM would leave it off, can use it, and the compile cache
    was not filled without it; True if set here. `vllm_envs` (vLLM's envs module) reads os.environ,
    which is `environ` in a server. `bundle_named`: this start installs or writes a bundle. One line in
    vLLM's log where it is set or kept off for a reason, from the first process only."""
    if environ.get(VARIABLE, "").strip():
        return False  # the user's, or this server's first process's: kept as it is
    try:
        if vllm_envs is None:
            import vllm.envs as vllm_envs
        why_not = _why_not(vllm_envs, _torch_version() if torch_version is None else torch_version)
        if why_not == "vLLM's default":
            return False  # nothing to ask for, nothing to say
        if why_not is None:
            why_not = _cache_why_not(vllm_envs, bundle_named)
    except (ImportError, AttributeError) as e:  # a vLLM without what this reads: its own default stays
        why_not = f"vLLM's settings not read: {type(e).__name__}: {e}"
    if why_not:
        _say("warmup-planner: vLLM's mega AOT artifact not asked for (%s)", why_not)
        return False
    environ[VARIABLE] = "1"
    _say("warmup-planner: vLLM's torch.compile artifacts are one mega AOT artifact (%s=1; WARMUP_TORCH_MEGA_AOT=0: "
         "vLLM's default): a warm start loads it without splitting the graph again", VARIABLE)
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


def _cache_why_not(vllm_envs, bundle_named: bool) -> str | None:
    """Why this start keeps the compile cache's own value: a bundle named, the cache off, or filled
    without the artifact (an AOT artifact there and no MARKER). Where none, MARKER is written first: a
    start that cannot mark the cache for the next ones does not change its key."""
    if bundle_named:
        return "a bundle is installed or written: bundles carry vLLM's artifacts without it"
    if vllm_envs.VLLM_DISABLE_COMPILE_CACHE:
        return "vLLM's compile cache is off"
    root = vllm_envs.VLLM_CACHE_ROOT
    marker = os.path.join(root, MARKER)
    if os.path.isfile(marker):
        return None
    if glob.glob(os.path.join(glob.escape(root), AOT_ARTIFACTS)):
        return f"vLLM's torch.compile cache in {root} was filled without it: kept, not compiled again"
    try:  # whole or not at all: another server's start may read it now
        write_atomic(marker, MARKER_TEXT, make_folder=True)
    except OSError as e:  # WriteError is one
        return f"{marker} not written: {e.strerror or e}"
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
