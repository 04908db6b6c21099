"""Issue 44 item 7: the plugin's step-aside path, where the mutation pass over vllm_bridge/step_aside.py,
plugin.py and warmup.py (now warmup/worker.py) found no test that would notice a planted bug (CPU, without vLLM)."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
import types
from types import SimpleNamespace as NS

import pytest
from test_step_aside import (  # noqa: F401 - fresh_server: the autouse fixture of those tests, here too
    ENGINE,
    LOGGER,
    VLLMS_OWN,
    StockWorker,
    bare_state,
    fresh_server,
    said,
    start_up,
    wrapped,
)

from executor.bundle.startup import Origin
from planner.api import expand, load_engine, load_plan
from vllm_bridge import plugin, step_aside
from vllm_bridge.releases import RELEASES, Release
from vllm_bridge.settings import PluginError, Settings
from vllm_bridge.step_aside import StepAside, step_aside_line
from vllm_bridge.warmup.worker import WorkerWarmup


def fake_modules(monkeypatch, **modules):
    """Modules of vLLM's the code imports, as plain namespaces in sys.modules."""
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)


# --- the agreement's group ---------------------------------------------------------------------------------

def test_the_ranks_agree_over_vllms_world_group_where_vllm_has_one(monkeypatch):
    """Without it every rank would agree with itself alone, and a rank whose pool failed would run
    vLLM's warmup while the others wait in the plan's collectives."""
    group = NS(world_size=1, name="vLLM's world group")
    fake_modules(monkeypatch, vllm={}, **{"vllm.distributed": {},
                                         "vllm.distributed.parallel_state": {"get_world_group": lambda: group}})
    assert step_aside.world_group() is group


# --- register: a vLLM the plugin cannot patch ---------------------------------------------------------------

def test_a_vllm_release_the_plugin_does_not_know_is_one_line_naming_it_at_register(caplog, monkeypatch):
    patched = []
    monkeypatch.setitem(sys.modules, "vllm", NS(__version__="0.19.1"))
    monkeypatch.setattr(plugin, "patch_worker", lambda release, settings: patched.append(release))
    monkeypatch.setenv("WARMUP_PLAN", "vllm-0.25")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plugin.register()
    [line] = said(caplog)
    assert patched == [] and line.startswith("warmup-planner: stepping aside: WARMUP_PLAN is set but vLLM 0.19.1 "
                                             "is installed; the plugin supports vLLM ")
    monkeypatch.setenv("WARMUP_STRICT", "1")
    with pytest.raises(PluginError, match=r"vLLM 0\.19\.1 is installed.*\(WARMUP_STRICT=1\)$"):
        plugin.register()


# --- register: the settings it reads once, handed to what uses them ----------------------------------------

ONE_READER = ("WARMUP_PLAN", "WARMUP_BUNDLE", "WARMUP_BUNDLE_OUT", "WARMUP_REGISTRY_PLAIN_HTTP", "WARMUP_BUNDLE_INERT",
              "WARMUP_FIX_GC_FREEZE_CAPTURE", "WARMUP_STRICT", "WARMUP_TIMELINE", "WARMUP_PLAN_REPORT",
              "WARMUP_ENGINE_CORE_FORK")


def registered(monkeypatch, **environ) -> list:
    """register in a process with vLLM 0.25.0 and `environ`: what it handed to the fixes, the engine
    core's start and the bundle's source (each replaced by a recorder)."""
    calls = []
    for name in ONE_READER:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setitem(sys.modules, "vllm", NS(__version__="0.25.0"))
    monkeypatch.setattr(plugin, "patch_worker", lambda release, settings: calls.append(("patch_worker",)))
    monkeypatch.setattr(plugin.fixes, "apply_fixes", lambda missing, on_import, off: calls.append(("fixes", off)))
    monkeypatch.setattr(plugin.engine_core_start, "choose_start", lambda setting: calls.append(("fork", setting)))
    monkeypatch.setattr(plugin.bundle_source, "for_process", lambda value, timeout_s, *, plain_http: calls.append(
        ("source", value, plain_http)) or NS(wait_early=lambda: None, thread=None))
    monkeypatch.setattr(plugin.bundle, "install_early", lambda path, stage: None)
    plugin.register()
    return calls


@pytest.mark.parametrize("plain, fix, expected", [
    (None, None, (False, ())),
    ("1", "0", (True, ("gc_freeze_capture",))),
    (" Yes ", "off", (True, ("gc_freeze_capture",))),
    ("off", "on", (False, ())),
])
def test_register_hands_the_registry_switch_and_the_fix_switches_down_from_its_settings(monkeypatch, plain, fix,
                                                                                      expected):
    environ = {"WARMUP_BUNDLE": "/nowhere/b.warmup"}
    if plain is not None:
        environ["WARMUP_REGISTRY_PLAIN_HTTP"] = plain
    if fix is not None:
        environ["WARMUP_FIX_GC_FREEZE_CAPTURE"] = fix
    calls = registered(monkeypatch, **environ)
    plain_http, off = expected
    assert calls == [("patch_worker",), ("fixes", off), ("fork", None), ("source", "/nowhere/b.warmup", plain_http)]


@pytest.mark.parametrize("value, setting", [(None, None), ("", None), ("1", True), ("0", False)])
def test_register_hands_the_engine_core_setting_down_unset_as_unset(monkeypatch, value, setting):
    """Issue 54: WARMUP_ENGINE_CORE_FORK unset is the plugin's default (fork where the engine runs on one
    GPU), not 0."""
    environ = {"WARMUP_BUNDLE": "/nowhere/b.warmup"} | ({} if value is None else {"WARMUP_ENGINE_CORE_FORK": value})
    assert ("fork", setting) in registered(monkeypatch, **environ)


@pytest.mark.parametrize("name, value, cause", [
    ("WARMUP_REGISTRY_PLAIN_HTTP", "maybe", "WARMUP_REGISTRY_PLAIN_HTTP must be 1 or 0, got 'maybe'"),
    ("WARMUP_BUNDLE_INERT", "fatal", "WARMUP_BUNDLE_INERT must be warn or error, got 'fatal'"),
    ("WARMUP_FIX_GC_FREEZE_CAPTURE", "disabled", "WARMUP_FIX_GC_FREEZE_CAPTURE must be 1 or 0, got 'disabled'"),
])
def test_a_registry_inert_or_fix_value_the_plugin_cannot_use_steps_aside_in_one_line(caplog, monkeypatch, name,
                                                                                      value, cause):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert registered(monkeypatch, WARMUP_BUNDLE="/nowhere/b.warmup", **{name: value}) == []
    assert said(caplog) == [step_aside_line(cause)]
    monkeypatch.setenv("WARMUP_STRICT", "1")
    with pytest.raises(PluginError, match=rf"{cause} \(WARMUP_STRICT=1\)$"):
        plugin.register()


def test_the_workers_bundle_steps_take_the_registry_and_inert_settings_from_register(monkeypatch):
    """load_model's wait for the pull and the use checked after ready: the Settings register read,
    not the environment at that time."""
    calls = recording_bundle(monkeypatch)
    pulls = []
    monkeypatch.setattr(plugin.bundle_source, "for_process", lambda value, timeout_s, *, plain_http: pulls.append(
        (value, timeout_s, plain_http)) or NS(wait=lambda: ("b.warmup", 1.5)))
    monkeypatch.setenv("WARMUP_REGISTRY_PLAIN_HTTP", "0")
    monkeypatch.setenv("WARMUP_BUNDLE_INERT", "warn")
    settings = Settings(None, bundle="oci://r.example/b:v1", pull_timeout_s=9.0, registry_plain_http=True,
                        bundle_inert="error")
    assert start_up(settings, StockWorker()) == [None, 42, "ready"]
    assert pulls == [("oci://r.example/b:v1", 9.0, True)]
    assert calls == [("install_before_compile", "b.warmup"), ("record_roots", None), ("check_use", "error"),
                     ("build_after_ready", None, Origin())]


def stock_worker_module(monkeypatch, name="stock_worker_mod"):
    module = types.ModuleType(name)
    module.Worker = type("Worker", (), {"load_model": lambda self: "vLLM's",
                                        "determine_available_memory": lambda self: 42,
                                        "compile_or_warm_up_model": lambda self: "ready"})
    monkeypatch.setitem(sys.modules, name, module)
    return module


def test_a_worker_class_already_imported_is_patched_at_once(monkeypatch):
    module = stock_worker_module(monkeypatch)
    release = Release("vllm-0.25", worker_module=module.__name__)
    plugin.patch_worker(release, Settings("vllm-0.25"))
    try:
        assert plugin.PATCHED in vars(module.Worker)
        assert module.Worker.load_model.__wrapped__ is vars(module.Worker)[plugin.PATCHED]["load_model"]
    finally:
        plugin.unpatch_worker(release)
    assert plugin.PATCHED not in vars(module.Worker)


# --- the bundle goes its own way, whether the plan runs or the plugin stepped aside ---------------------------

def recording_bundle(monkeypatch, uses=None):
    calls = []
    for name in ("install_before_compile", "record_roots"):
        monkeypatch.setattr(plugin.bundle, name, lambda worker, arg, *rest, name=name: calls.append((name, arg)))
    monkeypatch.setattr(plugin.bundle, "check_use", lambda worker, inert: calls.append(("check_use", inert)) or uses)
    monkeypatch.setattr(plugin.bundle, "build_after_ready",
                        lambda worker, out, origin: calls.append(("build_after_ready", out, origin)))
    return calls


def test_a_stepped_aside_worker_still_installs_and_builds_the_bundle_it_was_asked_for(caplog, monkeypatch):
    calls = recording_bundle(monkeypatch)
    monkeypatch.setattr(WorkerWarmup, "prepare", classmethod(
        lambda cls, *args: (_ for _ in ()).throw(PluginError("warmup-planner: p.yaml: no such file"))))
    worker = StockWorker()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert start_up(Settings("p.yaml", bundle="in.tar", bundle_out="out.tar"), worker) == [None, 42, "ready"]
    assert worker.calls == VLLMS_OWN and said(caplog) == [step_aside_line("p.yaml: no such file")]
    assert calls == [("install_before_compile", "in.tar"), ("record_roots", "out.tar"), ("check_use", "warn"),
                     ("build_after_ready", "out.tar", Origin())]  # no plan ran: the bundle names none


@dataclasses.dataclass
class Use:
    family: str
    loaded: int


def test_a_worker_that_runs_the_plan_reports_the_bundles_use_and_names_the_plan_as_its_origin(monkeypatch):
    calls = recording_bundle(monkeypatch, uses=[Use("triton", 3)])
    monkeypatch.setattr(plugin, "agree", lambda own, strict: None)  # every rank runs the plan
    ran, amended = [], []
    state = NS(fallback=None, warm_up=lambda original: ran.append("the plan") or original(),
               amend_report=lambda key, value: amended.append((key, value)),
               expanded=NS(plan="vllm-0.25", engine=ENGINE), report=NS(digest="d1g3st"))
    worker = StockWorker()
    setattr(worker, plugin.STATE, state)
    assert wrapped(Settings("vllm-0.25", bundle_out="out.tar"))[2](worker) == "ready"
    assert ran == ["the plan"] and worker.calls == ["vLLM's compile_or_warm_up_model"]
    assert amended == [("bundle_use", [{"family": "triton", "loaded": 3}])]
    assert calls == [("check_use", "warn"), ("build_after_ready", "out.tar", Origin("vllm-0.25", ENGINE, "d1g3st"))]


# --- the worker's side: a pool that is off, the monitor, the phases -------------------------------------------

def test_a_worker_without_a_running_pool_has_no_device_lane_to_finish_or_end():
    """WARMUP_JOBS=1 (no pool), or a pool already gone: vLLM's profile run and a failing load_model
    pass through (an AttributeError there would stop vLLM or hide vLLM's own error)."""
    state = bare_state(Settings("vllm-0.25"))
    assert state.precompiler is None
    state.finish_device_lane()
    state.abandon("not needed: vLLM's load_model failed")

    def never(*args):
        raise AssertionError("a pool that is not running was asked to finish or cancel")
    state.precompiler = NS(running=False, finish_device_lane=never, cancel=never)
    state.finish_device_lane()
    state.abandon("not needed: vLLM's load_model failed")


def test_warm_up_installs_the_monitor_when_load_model_was_not_the_plugins_to_wrap():
    """The compiles after ready are logged even where load_model (which installs it) was not wrapped."""
    state = bare_state(Settings("vllm-0.25"))
    assert not state.monitor.installed
    try:
        assert state.warm_up(lambda: "ready") == "ready"
        assert state.monitor.installed
    finally:
        state.monitor.uninstall()


def plan_worker(monkeypatch, calls):
    """A worker whose vLLM method is 0.25's (kernel_warmup, capture, batches), on stock modules."""
    worker_module, kernel_module = types.ModuleType("stock_gpu_worker2"), types.ModuleType("stock_kernel_warmup2")
    kernel_module.deep_gemm_warmup = lambda: calls.append("vLLM's DeepGEMM sweep")
    worker_module.kernel_warmup = lambda worker: calls.append("kernel_warmup") or kernel_module.deep_gemm_warmup()
    worker_module.warmup_kernels = lambda *args: calls.append("vLLM's synthetic batches")
    for module in (worker_module, kernel_module):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    release = Release("vllm-0.25", worker_module=worker_module.__name__, kernel_warmup_module=kernel_module.__name__)
    worker = NS(rank=0, vllm_config=None, device="cpu",
                model_runner=NS(capture_model=lambda: calls.append("vLLM's capture") or 7))
    expanded = expand(load_plan("vllm-0.25"), load_engine(ENGINE))
    state = WorkerWarmup(worker, release, Settings("vllm-0.25"), load_engine(ENGINE), expanded)

    def vllms_method():
        worker_module.kernel_warmup(worker)
        captured = worker.model_runner.capture_model()
        worker_module.warmup_kernels(worker.model_runner)
        return captured
    return state, vllms_method


def test_a_plan_that_runs_is_timed_between_vllms_warmup_before_and_after_it(caplog, monkeypatch):
    """The report's phases: vLLM's warmup before the plan ends before the plan starts, the one after
    it begins once the plan is done; vLLM's kernel_warmup runs once, its batches not at all."""
    calls, plan_ran = [], []
    state, vllms_method = plan_worker(monkeypatch, calls)
    monkeypatch.setattr(state, "run_plan", lambda: plan_ran.append(time.time()) or calls.append("the plan"))
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER):
            assert state.warm_up(vllms_method) == 7
    finally:
        state.monitor.uninstall()
    assert calls == ["kernel_warmup", "the plan", "vLLM's capture"]
    assert state.fallback is None
    before, after = state.report.host["phases"]
    assert (before["phase"], after["phase"]) == ("warmup before the plan", "warmup after the plan")
    assert before["end"] <= plan_ran[0] <= after["start"]
    assert "warmup-planner: vLLM's warmup_kernels skipped: the plan ran its batches" in said(caplog, logging.INFO)


def test_a_failed_warmup_withdraws_the_plan_and_lets_vllms_error_through(monkeypatch):
    calls = []
    state, _ = plan_worker(monkeypatch, calls)
    state.monitor.install()
    cancelled, uninstalled = [], []
    state.precompiler = NS(running=True, cancel=cancelled.append)
    monkeypatch.setattr(state.flashinfer_waits, "uninstall", lambda: uninstalled.append("flashinfer waits"))

    def failing():  # inside "warmup before the plan"
        raise RuntimeError("CUDA out of memory")
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        state.warm_up(failing)
    assert cancelled == ["not needed: vLLM's warmup failed"] and uninstalled == ["flashinfer waits"]
    assert not state.monitor.installed
    assert [row["phase"] for row in state.phases.rows] == ["warmup before the plan"]  # the open phase closed


def test_another_ranks_step_aside_is_this_workers_fallback():
    state = bare_state(Settings("vllm-0.25"))
    state.fallback = None
    state.fall_back("rank 1 stepped aside (no engine)")
    assert state.fallback == "rank 1 stepped aside (no engine)"


def test_a_pool_that_does_not_start_is_this_ranks_step_aside(caplog, monkeypatch):
    import executor.run

    state = bare_state(Settings("vllm-0.25"))
    state.fallback = None
    monkeypatch.setattr(executor.run, "start_precompile",
                        lambda *args, **kwargs: (_ for _ in ()).throw(OSError(24, "Too many open files")))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        state._start_pool(4)
    cause = "the precompile pool did not start (OSError: [Errno 24] Too many open files)"
    assert state.fallback == cause and said(caplog) == [step_aside_line(cause)]
    assert state.options.jobs == 4  # the pool's options, not the serial ones
    pool = NS(running=True)
    monkeypatch.setattr(executor.run, "start_precompile", lambda *args, **kwargs: pool)
    state._start_pool(4)
    assert state.precompiler is pool


def test_a_summary_that_fails_at_ready_is_one_line(caplog, monkeypatch):
    state = bare_state(Settings("vllm-0.25"))
    monkeypatch.setattr(state, "_summarise", lambda: (_ for _ in ()).throw(KeyError("stages")))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        state._finish_report()
    assert said(caplog) == ["warmup-planner: cannot write the report: KeyError: 'stages'"]


def test_a_prepared_worker_has_its_plan_and_deepgemms_cache_where_vllm_puts_it(monkeypatch, tmp_path):
    fake_modules(monkeypatch, vllm={}, **{"vllm.envs": {"VLLM_CACHE_ROOT": str(tmp_path)}})
    monkeypatch.setenv("DG_JIT_CACHE_DIR", "")  # so that the one the plugin sets is undone after the test
    monkeypatch.delenv("DG_JIT_CACHE_DIR")
    worker = NS(vllm_config=None, rank=0, device="cpu")
    state = WorkerWarmup.prepare(worker, RELEASES["0.25.0"], Settings("vllm-0.25", engine=ENGINE))
    assert isinstance(state, WorkerWarmup) and state.expanded.plan == "vllm-0.25"
    assert os.environ["DG_JIT_CACHE_DIR"].startswith(str(tmp_path))
    assert not isinstance(state, StepAside)
