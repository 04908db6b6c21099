"""vLLM's AOT-compiled model loaded beside its weights, not after them (issue 54; WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS).

On a warm start vLLM loads its torch.compile AOT artifact at the model's first forward, the profile run,
after load_model has returned: on an H200, 7.4-8.5 s for a 12B FP8 model after 2.8-3.0 s of dummy weights
(bench/RESULTS.md part AJ: "Dynamo bytecode transform" 4.7-5.0 s, the compiled graphs 2.1-3.0 s); real
weights take longer still. The artifact does not depend on the weights: it is the traced graph and its
kernels, called with the model's parameters as they are at each call.

So once vLLM's loader has made the model object (base_loader's ``initialize_model``, 0.25 and 0.33), this
starts vLLM's own load of that artifact in a thread, for each module vLLM compiles, and hands the loaded
function to the module before the weights are processed (base_loader's ``process_weights_after_loading``):
the first forward then finds it set, as vLLM's own load would have left it (decorators.py,
``_support_torch_compile.__call__``). What the thread runs is vLLM's: the artifact's path as __call__ makes
it, ``_try_load_aot_compiled_fn``. The join comes before the weights are processed because vLLM's load
sets the current vLLM config process-wide (``set_current_vllm_config``), which that step may set too.

Where anything is missing (no artifact: a cold start; AOT compile off; a release without these names) or
fails, nothing is handed over and vLLM loads at the first forward as always. Off by default: measured
slower on an H200 (bench/RESULTS.md part AK, a 12B model, dummy weights): the load on its thread took
10.5-12.0 s against 9-10 s on vLLM's path, beside 2.7 s of weights under one interpreter lock, and from the
weights' start to the profile run's end 15.5-16.8 s against 14.8 s. Weights read from disk leave the lock
free more often; that case is not measured.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import os
import sys
import threading
import time
from typing import NamedTuple

from . import timeline

log = logging.getLogger("vllm.warmup_planner")

PATCHED = "_warmup_planner_compile_load"  # on the loader module: vLLM's two functions, as they were
JOIN_DEADLINE_S = 600.0  # vLLM's own load at the first forward has no deadline; ours never hangs a start


class Names(NamedTuple):
    """Where vLLM 0.25 and 0.33 keep what this uses (read in both releases' source)."""

    loader_module: str = "vllm.model_executor.model_loader.base_loader"
    make_model: str = "initialize_model"                    # called by BaseModelLoader.load_model (0.33: create_model)
    weights_loaded: str = "process_weights_after_loading"  # called by it after load_weights
    decorators_module: str = "vllm.compilation.decorators"
    try_load: str = "_try_load_aot_compiled_fn"
    model_hash_key: str = "_model_hash_key"
    caching_module: str = "vllm.compilation.caching"
    hash_factors: str = "aot_compile_hash_factors"


NAMES = Names()


class Load(NamedTuple):
    """One compiled module's artifact being loaded beside the weights."""

    module: object
    path: str
    thread: threading.Thread
    result: list  # [loaded function or None] once the thread is done
    started: float


_pending: dict[int, list[Load]] = {}  # id(model) -> its loads, from the model's making to its weights' processing


def installed(names: Names = NAMES) -> bool:
    """install, where it can be: a failure is one line in vLLM's log, and vLLM loads as always."""
    try:
        install(names)
        return True
    except Exception as e:  # noqa: BLE001 - a start-up speed-up: vLLM loads at the first forward either way
        log.info("warmup-planner: vLLM's compiled model loads after the weights (%s: %s)", type(e).__name__, e)
        return False


def install(names: Names = NAMES) -> bool:
    """Wrap the loader module's two functions (once per process); True if wrapped now. The module is
    imported here, in the worker's load_model, where vLLM's loader imports it next anyway."""
    module = importlib.import_module(names.loader_module)
    if PATCHED in vars(module):
        return False
    make, processed = getattr(module, names.make_model), getattr(module, names.weights_loaded)
    setattr(module, PATCHED, (make, processed))

    def make_model(*args, **kwargs):
        model = make(*args, **kwargs)
        _start(model, names)
        return model

    def process_weights_after_loading(model, *args, **kwargs):
        hand_over(model)
        return processed(model, *args, **kwargs)

    setattr(module, names.make_model, make_model)
    setattr(module, names.weights_loaded, process_weights_after_loading)
    return True


def uninstall(names: Names = NAMES) -> None:
    """vLLM's two functions back in place (tests)."""
    module = importlib.import_module(names.loader_module)
    original = vars(module).get(PATCHED)
    if original is not None:
        setattr(module, names.make_model, original[0])
        setattr(module, names.weights_loaded, original[1])
        delattr(module, PATCHED)


def compiled_modules(model) -> list:
    """The modules of `model` vLLM compiles (its @support_torch_compile classes set
    was_aot_compile_fn_loaded_from_disk in __init__), not turned off, none of them loaded yet."""
    return [m for m in model.modules()
            if hasattr(m, "was_aot_compile_fn_loaded_from_disk") and not getattr(m, "do_not_compile", True)
            and getattr(m, "_allow_aot_compile", True) and getattr(m, "aot_compiled_fn", None) is None]


def artifact_path(module, names: Names = NAMES) -> tuple[str, str] | None:
    """(the hash directory, the rank's artifact) where vLLM's first forward would load it, or None where
    it would not try (AOT compile off, its cache off). The same computation as vLLM's __call__."""
    envs = importlib.import_module("vllm.envs")
    if not envs.VLLM_USE_AOT_COMPILE or envs.VLLM_DISABLE_COMPILE_CACHE:
        return None
    factors = list(getattr(importlib.import_module(names.caching_module), names.hash_factors)(module.vllm_config))
    factors.append(getattr(importlib.import_module(names.decorators_module), names.model_hash_key)(module.forward))
    root = os.path.join(envs.VLLM_CACHE_ROOT, "torch_compile_cache", "torch_aot_compile",
                        hashlib.sha256(str(factors).encode()).hexdigest())
    parallel = module.vllm_config.parallel_config
    return root, os.path.join(root, f"rank_{parallel.rank}_{parallel.data_parallel_index}", "model")


def _start(model, names: Names) -> None:
    """A thread per compiled module whose artifact is on disk (none on a cold start)."""
    try:
        loads = [load for m in compiled_modules(model) if (load := _start_one(m, names)) is not None]
    except Exception as e:  # noqa: BLE001 - a start-up speed-up: vLLM loads at the first forward either way
        log.info("warmup-planner: vLLM's compiled model loads after the weights (%s: %s)", type(e).__name__, e)
        return
    if loads:
        _pending[id(model)] = loads


def _start_one(module, names: Names) -> Load | None:
    where = artifact_path(module, names)
    if where is None or not os.path.isfile(where[1]):
        return None
    root, path = where
    # What vLLM's __call__ does before its own load, in the same order: the AOT directory is the
    # compilation's cache directory, and Inductor's cache lives under it (process-wide, as vLLM sets it).
    module.compilation_config.local_cache_dir = root
    inductor_cache = os.path.join(root, "inductor_cache")
    os.makedirs(inductor_cache, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache
    try_load = getattr(importlib.import_module(names.decorators_module), names.try_load)
    result: list = []
    thread = threading.Thread(target=_load, args=(try_load, module, path, _current_device(), result),
                              name="warmup-compile-load", daemon=True)
    load = Load(module, path, thread, result, time.monotonic())
    thread.start()
    return load


def _load(try_load, module, path: str, device, result: list) -> None:
    try:
        if device is not None:
            import torch
            torch.cuda.set_device(device)  # a thread starts on device 0: the artifact's kernels go to this rank's
        with timeline.span("torch.compile load, beside the weights", timeline.VLLM, background=True):
            result.append(try_load(module, path))
    except BaseException as e:  # noqa: BLE001 - vLLM's first forward loads (or raises) as it would have
        log.info("warmup-planner: vLLM's compiled model not loaded beside the weights (%s: %s); vLLM loads "
                 "it at its first forward", type(e).__name__, e)
        result.append(None)


def _current_device():
    torch = sys.modules.get("torch")  # the worker's: imported long before its load_model
    try:
        return torch.cuda.current_device() if torch is not None and torch.cuda.is_initialized() else None
    except Exception:  # noqa: BLE001 - no CUDA: the thread has nothing to choose
        return None


def hand_over(model) -> int:
    """Wait for the model's loads and set each loaded function where vLLM's __call__ would have; the
    number handed over. A load not done by JOIN_DEADLINE_S is left to vLLM's first forward."""
    loads = _pending.pop(id(model), ())
    handed = 0
    with timeline.span("plugin: compile load wait", timeline.PLUGIN) if loads else contextlib.nullcontext():
        waited = time.monotonic()
        for load in loads:
            load.thread.join(max(0.0, JOIN_DEADLINE_S - (time.monotonic() - load.started)))
            fn = load.result[0] if load.result else None
            if fn is None:
                continue
            load.module.aot_compiled_fn = fn
            load.module.was_aot_compile_fn_loaded_from_disk = True
            handed += 1
        if handed:
            log.info("warmup-planner: vLLM's compiled model loaded beside the weights (%d module(s); waited "
                     "%.2f s for it after them)", handed, time.monotonic() - waited)
    return handed

