"""WorkerWarmup split by concern (issue 56 item 3): the precompile pool's lane
(vllm_bridge/warmup/pool_lane.py) and the swaps of vLLM's names (vllm_bridge/warmup/swaps.py) are
modules of their own, each on its own here; WorkerWarmup (vllm_bridge/warmup/worker.py) coordinates
them and is the one that steps aside: the concerns return a cause, and ``step_aside`` alone sets the
worker's fallback.

Through the coordinator (the pool that does not start, the failed device lane, the plan in vLLM's
kernel_warmup): tests/vllm_bridge/test_step_aside.py and test_vllm_plugin_cpu.py.
"""

from __future__ import annotations

import ast
import logging
import os
import sys
import types
from types import SimpleNamespace as NS

import pytest

from vllm_bridge.releases import Release
from vllm_bridge.step_aside import SAID
from vllm_bridge.warmup import pool_lane, swaps, worker
from vllm_bridge.warmup.pool_lane import PoolLane
from vllm_bridge.warmup.worker import WorkerWarmup

LOGGER = "vllm.warmup_planner"
WARMUP = os.path.dirname(os.path.abspath(worker.__file__))


@pytest.fixture(autouse=True)
def fresh_server(monkeypatch):
    monkeypatch.setenv(SAID, "")  # no cause said by a parent process; a line's mark undone after the test


def said(caplog, level=logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


# --- the swaps ---------------------------------------------------------------------------------------------

def test_a_swapped_name_is_restored_or_removed_also_when_the_body_fails():
    owner = types.SimpleNamespace(kept="vLLM's")
    with pytest.raises(RuntimeError), swaps.swapped(owner, "kept", "ours"), swaps.swapped(owner, "added", "ours"):
        assert (owner.kept, owner.added) == ("ours", "ours")
        raise RuntimeError("vLLM's warmup failed")
    assert owner.kept == "vLLM's" and not hasattr(owner, "added")


def stock_vllm(monkeypatch, calls):
    """0.25's names on stand-in modules: kernel_warmup (with its DeepGEMM sweep), the batches, the capture."""
    worker_module, kernel_module = types.ModuleType("concerns_gpu_worker"), types.ModuleType("concerns_kernel_warmup")
    kernel_module.deep_gemm_warmup = lambda: calls.append("vLLM's DeepGEMM sweep")
    worker_module.kernel_warmup = lambda w: calls.append("kernel_warmup") or kernel_module.deep_gemm_warmup()
    worker_module.warmup_kernels = lambda *args: calls.append("vLLM's synthetic batches")
    for module in (worker_module, kernel_module):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    release = Release("vllm-0.25", worker_module=worker_module.__name__, kernel_warmup_module=kernel_module.__name__)
    return release, worker_module, kernel_module


def coordinator(release, calls, ran=True, runner=None):
    """What the swaps read of the coordinator, and the plan's run it answers."""
    state = NS(release=release, fallback=None, runner=runner,
               worker=NS(model_runner=NS(capture_model=lambda: calls.append("vLLM's capture") or 7)),
               phases=NS(end=lambda: calls.append("phase ends"), begin=lambda name: calls.append(f"phase: {name}")))

    def run_plan_or_step_aside():
        calls.append("the plan")
        if not ran:
            state.fallback = "the plan's run failed"
        return ran
    state.run_plan_or_step_aside = run_plan_or_step_aside
    return state


@pytest.mark.parametrize("ran", [True, False])
def test_redirected_puts_the_plan_in_vllms_warmup_and_gives_its_names_back(monkeypatch, ran):
    calls = []
    release, worker_module, kernel_module = stock_vllm(monkeypatch, calls)
    vllms = (worker_module.kernel_warmup, worker_module.warmup_kernels, kernel_module.deep_gemm_warmup)
    state = coordinator(release, calls, ran=ran, runner=NS(cudagraph_memory_bytes=1234))
    with swaps.redirected(state):
        worker_module.kernel_warmup("worker")
        captured = state.worker.model_runner.capture_model()
        worker_module.warmup_kernels("runner")
    after = ["phase: warmup after the plan"]
    if ran:  # vLLM's sweep off, the plan's batches and capture in place of vLLM's
        assert calls == ["kernel_warmup", "phase ends", "the plan", *after] and captured == 1234
    else:    # vLLM's own kernel_warmup again, whole, and its batches
        assert calls == ["kernel_warmup", "phase ends", "the plan", *after, "kernel_warmup", "vLLM's DeepGEMM sweep",
                         "vLLM's synthetic batches"]
    assert (worker_module.kernel_warmup, worker_module.warmup_kernels, kernel_module.deep_gemm_warmup) == vllms
    assert "capture_model" in vars(state.worker.model_runner)  # vLLM's own, given back


def test_redirected_gives_vllms_names_back_when_its_warmup_fails(monkeypatch):
    calls = []
    release, worker_module, _ = stock_vllm(monkeypatch, calls)
    vllms = (worker_module.kernel_warmup, worker_module.warmup_kernels)
    state = coordinator(release, calls)
    runner = state.worker.model_runner
    capture = runner.capture_model
    with pytest.raises(MemoryError), swaps.redirected(state):
        raise MemoryError("CUDA out of memory")
    assert (worker_module.kernel_warmup, worker_module.warmup_kernels, runner.capture_model) == (*vllms, capture)


def test_a_plan_that_captured_nothing_leaves_the_capture_to_vllm():
    calls = []
    capture = swaps.plans_capture(NS(runner=None), lambda: calls.append("vLLM's capture") or 7)
    assert capture() == 7
    capture = swaps.plans_capture(NS(runner=NS(cudagraph_memory_bytes=None)), lambda: 8)
    assert capture() == 8 and calls == ["vLLM's capture"]


# --- the pool's lane -----------------------------------------------------------------------------------------

def test_a_pool_that_does_not_start_is_a_cause_not_a_step_aside(caplog, monkeypatch):
    import executor.run

    monkeypatch.setattr(executor.run, "start_precompile",
                        lambda *args, **kwargs: (_ for _ in ()).throw(OSError(24, "Too many open files")))
    lane = PoolLane(0, monitor=None)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        why = lane.start("plan", "facts", "options")
    assert why == "the precompile pool did not start (OSError: [Errno 24] Too many open files)"
    assert lane.precompiler is None and said(caplog, logging.INFO) == []
    assert lane.summary(4) == {"status": "off", "reason": "4 jobs"}


def test_a_device_lane_that_fails_is_a_cause_and_one_that_finishes_one_line(caplog):
    lane = PoolLane(3, monitor=None)
    assert lane.finish_device_lane(5.0) is None  # no pool: nothing to finish
    lane.precompiler = NS(running=True, finish_device_lane=lambda timeout: f"timed out after {timeout:g} s",
                          device_lane_wait={"waited_s": 5.0})
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert lane.finish_device_lane(5.0) == "the precompile pool timed out after 5 s"
    assert lane.waited_s == 5.0 and said(caplog, logging.INFO) == []
    lane.precompiler = NS(running=True, finish_device_lane=lambda timeout: None,
                          device_lane_wait={"waited_s": 1.5, "still_running": []})
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert lane.finish_device_lane(5.0) is None
    assert lane.waited_s == 1.5 and len(said(caplog, logging.INFO)) == 1
    assert said(caplog, logging.INFO)[0].startswith("warmup-planner: precompile (rank 3): vLLM waited 1.5 s")


def test_the_lane_ends_a_running_pool_only():
    cancelled = []
    lane = PoolLane(0, monitor=None)
    lane.end("not needed")  # none started
    lane.precompiler = NS(running=False, cancel=cancelled.append)
    lane.end("not needed")
    lane.precompiler = NS(running=True, cancel=cancelled.append)
    lane.end("not needed: vLLM's profile run failed")
    assert cancelled == ["not needed: vLLM's profile run failed"]


# --- the coordinator ---------------------------------------------------------------------------------------------

def test_a_concern_never_steps_aside_itself():
    """The pool's lane and the swaps import no way to step aside, and nothing of the worker above them."""
    for module in (pool_lane, swaps):
        with open(module.__file__, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    for alias in node.names} | {node.module or "" for node in ast.walk(tree)
                                                if isinstance(node, ast.ImportFrom)}
        assert not imported & {"step_aside", "strict_error", "worker", "WorkerWarmup"}, module.__name__


def test_only_step_aside_sets_the_workers_fallback():
    """One way to give way: in the warmup sub-package, `.fallback` is assigned in WorkerWarmup's
    __init__ (None) and its step_aside, nowhere else."""
    found = []
    for name in sorted(os.listdir(WARMUP)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(WARMUP, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
                if any(isinstance(t, ast.Attribute) and t.attr == "fallback" for t in targets):
                    found.append(f"{name}:{function.name}")
    assert sorted(set(found)) == ["worker.py:__init__", "worker.py:step_aside"]


def test_the_worker_holds_its_pool_in_the_lane_and_no_swap_of_its_own():
    assert not hasattr(worker, "swapped") and not hasattr(worker, "importlib")
    kept = {"redirected", "then_finish_device_lane", "_plan_then_vllm", "_modelled_off", "_unless_ran_by_plan",
            "_captured", "_install_pool_triton_files", "_note"}
    assert kept.isdisjoint(vars(WorkerWarmup))
    coordinates = {"step_aside", "abandon", "withdraw", "finish_device_lane", "run_plan_or_step_aside"}
    assert coordinates <= set(vars(WorkerWarmup))
