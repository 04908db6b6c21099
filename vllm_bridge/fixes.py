"""Start-up fixes vLLM made after a release a user runs, applied by the plugin where the release row
says the release lacks them (planner/engine/releases.py, missing_start_up_fixes; issue 46).

Each fix has its own switch (an environment variable, read by vllm_bridge.settings with the other
settings: `0` turns it off, Settings.fixes_off), its own line in vLLM's log when it is applied, and
names the vLLM change it brings back. A fix that cannot be applied (a class without the method) is
one warning line; vLLM starts without it, the plan is not touched.

- ``gc_freeze_capture``: the garbage collector frozen and disabled for the whole CUDA-graph
  capture, as vLLM 0.33's ``freeze_gc_for_cudagraph_capture`` does (vllm/utils/gc_utils.py, vLLM
  #54646: capture 12 -> 2 s on a 1.5B model). vLLM 0.25.0's Model Runner V2 captures with the
  collector running, and its V1 runner freezes it without disabling it, so a collection can run
  during every graph's capture (and can invalidate it: a finalized Triton kernel unloads its module).
  vLLM's own opt-out, VLLM_ENABLE_CUDAGRAPH_GC=1, is honoured as in 0.33.
"""

from __future__ import annotations

import functools
import gc
import importlib
import logging
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from typing import NamedTuple

from .step_aside import cause_of

log = logging.getLogger("vllm.warmup_planner")

PATCHED = "_warmup_planner_fixes"  # on a patched class: {method: the original}


class StartUpFix(NamedTuple):
    """One fix: what it wraps, how, and how to turn it off."""

    switch: str                           # environment variable; "0" turns the fix off (Settings.fixes_off)
    upstream: str                         # the vLLM change it brings back
    targets: tuple[tuple[str, str, str], ...]  # (module, class, method) it wraps, where imported
    wrap: Callable                        # method -> the method with the fix


@contextmanager
def frozen_gc():
    """vLLM 0.33's freeze_gc_for_cudagraph_capture: collect once, then no collection until the
    capture ends (VLLM_ENABLE_CUDAGRAPH_GC=1: vLLM's opt-out, nothing changes)."""
    if os.environ.get("VLLM_ENABLE_CUDAGRAPH_GC", "0") not in ("", "0"):
        yield
        return
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        try:
            gc.unfreeze()
            gc.collect()
        finally:
            if was_enabled:
                gc.enable()


def with_frozen_gc(method: Callable) -> Callable:
    @functools.wraps(method)
    def capture(*args, **kwargs):
        with frozen_gc():
            return method(*args, **kwargs)

    return capture


FIXES: dict[str, StartUpFix] = {
    "gc_freeze_capture": StartUpFix(
        "WARMUP_FIX_GC_FREEZE_CAPTURE", "vLLM 0.33's freeze_gc_for_cudagraph_capture (#54646)",
        (("vllm.v1.worker.gpu.model_runner", "GPUModelRunner", "capture_model"),     # Model Runner V2
         ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "capture_model")),    # V1
        with_frozen_gc),
}


def apply_fixes(missing: tuple[str, ...], on_import: Callable[[str, Callable], None],
                off: tuple[str, ...] = ()) -> list[str]:
    """Apply each fix of `missing` that its switch leaves on (`off`: those the user turned off,
    Settings.fixes_off): to a target class now where its module is imported, else when the process
    imports it (`on_import(module, callback)`); the fixes turned on."""
    on = [name for name in missing if name not in off]
    for name in on:
        for module, cls, method in FIXES[name].targets:
            if module in sys.modules:
                patch(name, module, cls, method)
            else:
                on_import(module, functools.partial(_patch_imported, name, module, cls, method))
    return on


def _patch_imported(name: str, module: str, cls: str, method: str, _module) -> None:
    patch(name, module, cls, method)


def patch(name: str, module: str, cls_name: str, method: str) -> bool:
    """Wrap `method` of the class with fix `name` (once); one line either way."""
    fix = FIXES[name]
    try:
        cls = getattr(importlib.import_module(module), cls_name)
        originals = vars(cls).get(PATCHED) or {}
        if method in originals:
            return True
        original = vars(cls)[method]
        setattr(cls, PATCHED, {**originals, method: original})
        setattr(cls, method, fix.wrap(original))
    except Exception as e:  # noqa: BLE001 - a fix we cannot apply: vLLM starts without it
        log.warning("warmup-planner: start-up fix %s not applied to %s.%s: %s", name, module, cls_name, cause_of(e))
        return False
    log.info("warmup-planner: start-up fix %s: %s.%s.%s runs with %s (%s=0 turns it off)", name, module, cls_name,
             method, fix.upstream, fix.switch)
    return True


def unpatch(module: str, cls_name: str) -> None:
    """Restore a class the fixes wrapped (tests)."""
    cls = getattr(importlib.import_module(module), cls_name)
    for method, original in (vars(cls).get(PATCHED) or {}).items():
        setattr(cls, method, original)
    if PATCHED in vars(cls):
        delattr(cls, PATCHED)
