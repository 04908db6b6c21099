"""vLLM's names swapped for the length of one of its calls (WorkerWarmup's, vllm_bridge.warmup.worker).

The plugin sets no VLLM_* variable (they feed vLLM's torch.compile cache key): what the plan does in
place of vLLM's own warmup, it does by swapping vLLM's functions and methods where vLLM looks them up,
each restored after the call, also when it fails (``swapped``):

- ``then_finish_device_lane``: the model runner's profile run (vllm_bridge.plugin swaps it inside
  determine_available_memory): vLLM's, then the pool's device lane finished, before vLLM measures
  the GPU's memory; a profile run that fails ends the pool at once;
- ``redirected``, inside compile_or_warm_up_model:
  - the release's plan hook (kernel_warmup, in its worker module): vLLM's, with what the plan models
    off inside it (``modelled_off``: its serial DeepGEMM sweep, the names of
    Release.modelled_in_kernel_warmup in kernel_warmup's module, do nothing), then the plan's run; a
    plan that steps aside there gets vLLM's kernel_warmup again, whole;
  - the release's synthetic batches (warmup_kernels): skipped (the plan ran its own), unless the
    plan stepped aside;
  - the model runner's capture method: the bytes of the plan's capture (vLLM logs them); the plan's
    own call, or a plan that captured nothing, reaches vLLM's.

The swaps decide nothing: they read the coordinator's state (``state``, a WorkerWarmup: its release,
worker, phases, fallback and runner) and call its methods (run_plan_or_step_aside,
finish_device_lane, abandon).
"""

from __future__ import annotations

import contextlib
import importlib
import logging

log = logging.getLogger("vllm.warmup_planner")  # under vLLM's logger: its handler, level and format


@contextlib.contextmanager
def swapped(owner, name: str, value):
    """`owner.name` is `value` inside, and what it was after (also when the body fails)."""
    had = name in vars(owner)
    before = vars(owner).get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if had:
            setattr(owner, name, before)
        else:
            delattr(owner, name)


# --- determine_available_memory: the device lane's barrier, after vLLM's profile run ---

def then_finish_device_lane(state, profile_run):
    """vLLM's profile_run, then the pool's device lane finished (state.finish_device_lane)."""
    def profile_then_finish(*args, **kwargs):
        try:
            result = profile_run(*args, **kwargs)
        except BaseException:
            state.abandon("not needed: vLLM's profile run failed")  # the worker is going down
            raise
        state.finish_device_lane()
        return result
    return profile_then_finish


# --- compile_or_warm_up_model: the plan in place of what it models ---

@contextlib.contextmanager
def redirected(state):
    """vLLM's names that the plan replaces, swapped for the duration of one warmup."""
    release = state.release
    module = importlib.import_module(release.worker_module)
    model_runner = state.worker.model_runner
    capture = getattr(model_runner, release.capture_method)
    with contextlib.ExitStack() as stack:
        plan_hook = plan_in_kernel_warmup(state, getattr(module, release.plan_hook))
        stack.enter_context(swapped(module, release.plan_hook, plan_hook))
        batches = unless_ran_by_plan(state, getattr(module, release.batches_hook))
        stack.enter_context(swapped(module, release.batches_hook, batches))
        stack.enter_context(swapped(model_runner, release.capture_method, plans_capture(state, capture)))
        yield


def plan_in_kernel_warmup(state, kernel_warmup):
    """vLLM's kernel_warmup with what the plan models off, then the plan; vLLM's whole again where
    the plan stepped aside."""
    def plan_then_vllm(worker, *args, **kwargs):
        with modelled_off(state.release):
            kernel_warmup(worker, *args, **kwargs)
        state.phases.end()
        ran = state.run_plan_or_step_aside()
        state.phases.begin("warmup after the plan")
        if not ran:  # vLLM's own, whole: what the plan ran in its place was off above
            kernel_warmup(worker, *args, **kwargs)
    return plan_then_vllm


@contextlib.contextmanager
def modelled_off(release):
    """Inside vLLM's kernel_warmup, what the plan runs itself does nothing."""
    module = importlib.import_module(release.kernel_warmup_module)
    with contextlib.ExitStack() as stack:
        for name in release.modelled_in_kernel_warmup:
            stack.enter_context(swapped(module, name, lambda *a, **k: None))
        yield


def unless_ran_by_plan(state, warmup_kernels):
    """vLLM's synthetic batches: skipped (the plan ran its own), unless the plan stepped aside."""
    def batches(*args, **kwargs):
        if state.fallback:
            return warmup_kernels(*args, **kwargs)
        log.info("warmup-planner: vLLM's %s skipped: the plan ran its batches", state.release.batches_hook)
        return None
    return batches


def plans_capture(state, capture):
    """capture_model as vLLM calls it after the plan: the plan's capture's bytes (vLLM logs them);
    the plan's own call, or a plan that captured nothing, reaches vLLM's capture_model."""
    def captured(*args, **kwargs):
        runner = state.runner
        if runner is not None and runner.cudagraph_memory_bytes is not None:
            return runner.cudagraph_memory_bytes
        return capture(*args, **kwargs)
    return captured
