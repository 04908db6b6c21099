"""Issue 44: the plugin never stops vLLM (vllm_bridge.step_aside), without vLLM: the one line, the
strict setting, the agreement between ranks, and each hook of the plugin once a worker stepped aside.
The last part holds the tests issue 44 item 7's mutation pass over vllm_bridge/step_aside.py, plugin.py and
warmup.py (now warmup/worker.py) called for: there, no test would have noticed a planted bug.

Through vLLM's own start-up on CPU, each cause: tests/integration/vllm_plugin/test_step_aside.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import socket
import sys
import time
import types
from types import SimpleNamespace as NS

import pytest
from test_worker_concerns import stock_vllm

from executor.bundle.startup import Origin
from planner.api import expand, load_engine, load_plan
from planner.errors import PlanError
from vllm_bridge import plugin
from vllm_bridge.releases import RELEASES, Release
from vllm_bridge.settings import PluginError, Settings
from vllm_bridge.step_aside import (
    SAID,
    StepAside,
    Verdict,
    agree,
    cause_of,
    gather_verdicts,
    step_aside,
    step_aside_line,
    world_group,
)
from vllm_bridge.warmup.worker import WorkerWarmup

LOGGER = "vllm.warmup_planner"
ENGINE = "llama-3.1-8b-fp8-h100"


@pytest.fixture(autouse=True)
def fresh_server(monkeypatch):
    """No cause said by a parent process; the mark a test's line leaves is undone after it."""
    monkeypatch.setenv(SAID, "")


def said(caplog, level=logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


# --- the line ----------------------------------------------------------------------------------------------

def test_the_cause_is_the_plan_errors_own_line_or_the_exceptions():
    assert cause_of(PlanError("invalid YAML: did not find ','", file="p.yaml", line=3)) == \
        "p.yaml:3: invalid YAML: did not find ','"
    assert cause_of(PlanError("unknown stage", file="p.yaml", line=2, path="stages[0].name")) == \
        "p.yaml:2: stages[0].name: unknown stage"
    assert cause_of(PluginError("warmup-planner: WARMUP_JOBS must be a whole number, got 'x'")) == \
        "WARMUP_JOBS must be a whole number, got 'x'"  # the plugin's prefix once, in the line
    assert cause_of(KeyError("model_config")) == "KeyError: 'model_config'"
    assert cause_of(RuntimeError("two\nlines")) == "RuntimeError: two lines"


def test_stepping_aside_is_one_warning_line_naming_the_cause(caplog):
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        aside = step_aside("p.yaml:3: invalid YAML", strict=False)
    assert aside == StepAside("p.yaml:3: invalid YAML", 0)
    assert said(caplog, logging.DEBUG) == [
        "warmup-planner: stepping aside: p.yaml:3: invalid YAML; vLLM starts as it would without the plugin"]
    assert os.environ[SAID] == "p.yaml:3: invalid YAML"  # what vLLM's processes started from here inherit


def test_a_cause_a_parent_process_said_is_not_said_again(caplog):
    """The API server meets register's causes first; the engine core and the workers it starts
    inherit its environment, meet the same cause, and step aside without a second warning."""
    environ = {SAID: "WARMUP_JOBS must be a whole number, got 'x'"}
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        step_aside("WARMUP_JOBS must be a whole number, got 'x'", strict=False, environ=environ)
        assert said(caplog) == []
        step_aside("another cause", strict=False, environ=environ)  # not the one said: said
    assert said(caplog) == [step_aside_line("another cause")] and environ[SAID] == "another cause"


def test_another_rank_says_its_cause_at_debug_only(caplog):
    environ = {}
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert step_aside("no engine", strict=False, rank=3, environ=environ) == StepAside("no engine", 3)
    assert said(caplog) == [] and said(caplog, logging.DEBUG) == [step_aside_line("no engine")]
    assert SAID not in environ


def test_strict_turns_the_step_aside_into_one_fatal_line(caplog):
    with caplog.at_level(logging.DEBUG, logger=LOGGER), pytest.raises(PluginError) as e:
        step_aside("m/config.json: architectures: Phi3ForCausalLM is not supported", strict=True)
    assert str(e.value) == ("warmup-planner: m/config.json: architectures: Phi3ForCausalLM is not supported "
                            "(WARMUP_STRICT=1)")
    assert said(caplog, logging.DEBUG) == []


# --- the agreement ----------------------------------------------------------------------------------------

def ranks(*causes):
    """A gather that answers the given verdicts, one per rank."""
    return lambda own: [Verdict(rank, cause) for rank, cause in enumerate(causes)]


def test_every_rank_runs_the_plan_when_none_stepped_aside(caplog):
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert agree(Verdict(0, None), strict=False, gather=ranks(None, None)) is None
    assert said(caplog, logging.DEBUG) == []


def test_a_cause_only_another_rank_met_is_said_by_rank_0(caplog):
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert agree(Verdict(0, None), strict=False, gather=ranks(None, "pool timed out")) == Verdict(1, "pool timed out")
        assert said(caplog) == [step_aside_line("rank 1: pool timed out")]
        caplog.clear()
        agree(Verdict(2, None), strict=False, gather=ranks(None, "pool timed out", None))  # rank 2: quiet
        agree(Verdict(1, "pool timed out"), strict=False, gather=ranks(None, "pool timed out"))  # its own: said
    assert said(caplog) == []


def test_ranks_that_cannot_agree_step_aside(caplog, monkeypatch):
    def broken(own):
        raise RuntimeError("Connection closed by peer")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        first = agree(Verdict(0, None), strict=False, gather=broken)
    cause = "the ranks could not agree on the plan (RuntimeError: Connection closed by peer)"
    assert first == Verdict(0, cause) and said(caplog) == [step_aside_line(cause)]
    caplog.clear()
    monkeypatch.setenv(SAID, "")  # another worker process
    with caplog.at_level(logging.DEBUG, logger=LOGGER):  # rank 0 cannot hear it: this rank says it
        assert agree(Verdict(2, None), strict=False, gather=broken) == Verdict(2, cause)
    assert said(caplog) == [step_aside_line(cause)]
    with pytest.raises(PluginError, match="could not agree"):
        agree(Verdict(0, None), strict=True, gather=broken)


def test_one_process_agrees_with_itself():
    assert gather_verdicts(Verdict(0, "x")) == [Verdict(0, "x")]  # no vLLM world group here
    assert gather_verdicts(Verdict(0, None), group=NS(world_size=1)) == [Verdict(0, None)]


def _rank_of_two(rank: int, port: int, cause, answers) -> None:
    """One rank of a two-rank gloo world (vLLM's world group's CPU side): its agreement."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        group = NS(world_size=2, cpu_group=dist.group.WORLD)
        first = agree(Verdict(rank, cause), strict=False, gather=lambda own: gather_verdicts(own, group))
        answers.put((rank, None if first is None else tuple(first)))
    finally:
        dist.destroy_process_group()


def test_the_ranks_agree_over_gloo_and_none_waits_for_ever():
    """Two processes, as vLLM's workers: rank 1's pool failed, rank 0's did not; both learn it, so
    both run vLLM's own warmup (the plan's collectives would otherwise wait on each other)."""
    pytest.importorskip("torch.distributed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    procs = [context.Process(target=_rank_of_two, args=(rank, port, cause, answers))
             for rank, cause in ((0, None), (1, "the precompile pool timed out"))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    got = dict(answers.get(timeout=5) for _ in procs)
    assert got == {0: (1, "the precompile pool timed out"), 1: (1, "the precompile pool timed out")}


# --- the plugin's hooks once a worker stepped aside ---------------------------------------------------------

class StockWorker:
    """vLLM's Worker as the plugin's wrappers see it, with vLLM's own methods recording their calls."""

    def __init__(self, rank=0):
        self.rank, self.vllm_config, self.calls = rank, None, []
        self.model_runner = NS(profile_run=lambda: self.calls.append("profile_run"))


def wrapped(settings, release=RELEASES["0.25.0"]):
    """The three patched methods over vLLM's own (recording) ones, in the executor's order."""
    def load_model(worker):
        worker.calls.append("vLLM's load_model")

    def determine_available_memory(worker):
        worker.model_runner.profile_run()
        worker.calls.append("vLLM's determine_available_memory")
        return 42

    def compile_or_warm_up_model(worker):
        worker.calls.append("vLLM's compile_or_warm_up_model")
        return "ready"
    return (plugin._load_model(load_model, release, settings),
            plugin._determine_available_memory(determine_available_memory, release, settings),
            plugin._compile_or_warm_up_model(compile_or_warm_up_model, release, settings))


def start_up(settings, worker):
    return [method(worker) for method in wrapped(settings)]


VLLMS_OWN = ["vLLM's load_model", "profile_run", "vLLM's determine_available_memory",
             "vLLM's compile_or_warm_up_model"]


def test_any_failure_to_prepare_steps_aside_and_vllms_methods_run_as_they_are(caplog, monkeypatch):
    def derive(*args):
        raise AttributeError("'ModelConfig' object has no attribute 'hf_text_config'")  # not a PlanError
    monkeypatch.setattr(WorkerWarmup, "prepare", classmethod(lambda cls, *args: derive()))
    worker = StockWorker()
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert start_up(Settings("vllm-0.25"), worker) == [None, 42, "ready"]
    assert worker.calls == VLLMS_OWN
    assert said(caplog) == [step_aside_line("AttributeError: 'ModelConfig' object has no attribute "
                                            "'hf_text_config'")]
    assert isinstance(getattr(worker, plugin.STATE), StepAside)


def test_strict_stops_load_model_before_the_weights(monkeypatch):
    monkeypatch.setattr(WorkerWarmup, "prepare", classmethod(
        lambda cls, *args: (_ for _ in ()).throw(PluginError("warmup-planner: p.yaml: no such file"))))
    worker = StockWorker()
    with pytest.raises(PluginError, match=r"^warmup-planner: p.yaml: no such file \(WARMUP_STRICT=1\)$"):
        wrapped(Settings("p.yaml", strict=True))[0](worker)
    assert worker.calls == []


def test_a_pool_that_does_not_start_is_withdrawn_and_steps_aside(caplog, monkeypatch):
    withdrawn = []
    state = NS(start=lambda: (_ for _ in ()).throw(OSError(24, "Too many open files")), withdraw=withdrawn.append)
    monkeypatch.setattr(WorkerWarmup, "prepare", classmethod(lambda cls, *args: state))
    worker = StockWorker()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        start_up(Settings("vllm-0.25"), worker)
    assert withdrawn == ["the plugin stepped aside"] and worker.calls == VLLMS_OWN
    assert said(caplog) == [step_aside_line("OSError: [Errno 24] Too many open files")]


def test_another_ranks_step_aside_makes_this_rank_run_vllms_own_warmup(monkeypatch):
    """Rank 0 prepared its plan; rank 1 stepped aside: at compile_or_warm_up_model rank 0 runs vLLM's
    own warmup (its fallback), not the plan."""
    monkeypatch.setattr(plugin, "agree", lambda own, strict: Verdict(1, "m/config.json: no engine"))
    state = NS(fallback=None, step_aside=lambda why, by_another_rank: setattr(state, "fallback", why),
               warm_up=lambda original: original(), expanded=NS(plan="vllm-0.25", engine=ENGINE), report=None)
    worker = StockWorker()
    setattr(worker, plugin.STATE, state)
    assert wrapped(Settings("vllm-0.25"))[2](worker) == "ready"
    assert state.fallback == "rank 1 stepped aside (m/config.json: no engine)"


def test_a_stepped_aside_worker_still_takes_part_in_the_agreement(monkeypatch):
    """Every rank with a plan asked for must answer, or the ranks that run it would wait for ever."""
    asked = []
    monkeypatch.setattr(plugin, "agree", lambda own, strict: asked.append(own))
    worker = StockWorker(rank=1)
    setattr(worker, plugin.STATE, StepAside("no engine", 1))
    assert wrapped(Settings("vllm-0.25"))[2](worker) == "ready"
    assert asked == [Verdict(1, "no engine")] and worker.calls == ["vLLM's compile_or_warm_up_model"]


def test_a_setting_the_plugin_cannot_use_steps_aside_at_register(caplog, monkeypatch):
    patched = []
    monkeypatch.setitem(sys.modules, "vllm", NS(__version__="0.25.0"))
    monkeypatch.setattr(plugin, "patch_worker", lambda release, settings: patched.append(release))
    monkeypatch.setenv("WARMUP_PLAN", "vllm-0.25")
    monkeypatch.setenv("WARMUP_JOBS", "many")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plugin.register()
    assert patched == [] and said(caplog) == [step_aside_line("WARMUP_JOBS must be a whole number, got 'many'")]
    monkeypatch.setenv("WARMUP_STRICT", "1")
    with pytest.raises(PluginError, match=r"WARMUP_JOBS must be a whole number, got 'many' \(WARMUP_STRICT=1\)$"):
        plugin.register()
    monkeypatch.setenv("WARMUP_STRICT", "perhaps")  # was the failure to be fatal? It cannot be told: fatal
    with pytest.raises(PluginError, match="WARMUP_STRICT must be 1 or 0, got 'perhaps'"):
        plugin.register()


def test_a_worker_class_without_a_method_the_table_names_is_left_as_it_is(caplog, monkeypatch):
    module = types.ModuleType("stock_worker")
    module.Worker = type("Worker", (), {"load_model": lambda self: None})
    monkeypatch.setitem(sys.modules, "stock_worker", module)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plugin._patch_or_step_aside(Release("vllm-0.25", worker_module="stock_worker"), Settings("vllm-0.25"))
    assert plugin.PATCHED not in vars(module.Worker)
    [line] = said(caplog)
    assert line.startswith("warmup-planner: stepping aside: AttributeError: ") and "determine_available_memory" in line


# --- a plan that fails to run, a report that cannot be written --------------------------------------------

def test_a_plan_whose_run_fails_steps_aside_and_vllms_warmup_runs_whole(caplog, monkeypatch, tmp_path):
    """The plan runs inside vLLM's kernel_warmup (vLLM's DeepGEMM sweep off there): a run that raises
    steps aside, vLLM's kernel_warmup runs again whole, its batches and capture as without the plugin."""
    calls = []
    worker_module, kernel_module = types.ModuleType("stock_gpu_worker"), types.ModuleType("stock_kernel_warmup")
    kernel_module.deep_gemm_warmup = vllms_sweep = lambda: calls.append("vLLM's DeepGEMM sweep")
    worker_module.kernel_warmup = lambda worker: calls.append("kernel_warmup") or kernel_module.deep_gemm_warmup()
    worker_module.warmup_kernels = lambda *args: calls.append("vLLM's synthetic batches")
    for module in (worker_module, kernel_module):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    release = Release("vllm-0.25", worker_module="stock_gpu_worker", kernel_warmup_module="stock_kernel_warmup")
    report = tmp_path / "report.json"
    settings = Settings("vllm-0.25", report=str(report))
    capture = lambda: calls.append("vLLM's capture") or 7
    worker = NS(rank=0, vllm_config=None, device="cpu", model_runner=NS(capture_model=capture))
    expanded = expand(load_plan("vllm-0.25"), load_engine(ENGINE))
    state = WorkerWarmup(worker, release, settings, load_engine(ENGINE), expanded)
    monkeypatch.setattr(state, "run_plan", lambda: (_ for _ in ()).throw(TypeError("a bug of ours")))

    def vllms_method():  # 0.25's order
        worker_module.kernel_warmup(worker)
        captured = worker.model_runner.capture_model()
        worker_module.warmup_kernels(worker.model_runner)
        return captured
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert state.warm_up(vllms_method) == 7
    assert calls == ["kernel_warmup", "kernel_warmup", "vLLM's DeepGEMM sweep", "vLLM's capture",
                     "vLLM's synthetic batches"]
    assert said(caplog) == [step_aside_line("the plan's run failed (TypeError: a bug of ours)")]
    assert kernel_module.deep_gemm_warmup is vllms_sweep and worker.model_runner.capture_model is capture
    assert json.loads(report.read_text())["host"]["fallback"] == "the plan's run failed (TypeError: a bug of ours)"


def bare_state(settings):
    expanded = expand(load_plan("vllm-0.25"), load_engine(ENGINE))
    worker = NS(vllm_config=None, rank=0, device="cpu", model_runner=None)
    state = WorkerWarmup(worker, RELEASES["0.25.0"], settings, load_engine(ENGINE), expanded)
    state.fallback = "the precompile pool timed out"  # vLLM's own warmup: the report still says why
    return state


def test_a_report_that_cannot_be_written_at_ready_is_one_line_or_fatal_under_strict(caplog, tmp_path):
    (tmp_path / "a-file").write_text("")
    path = str(tmp_path / "a-file" / "report.json")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert bare_state(Settings("vllm-0.25", report=path)).warm_up(lambda: "ready") == "ready"
    [line] = said(caplog)
    assert line.startswith(f"warmup-planner: cannot write the report: {path}: cannot write: ")
    with pytest.raises(PluginError, match=r"^warmup-planner: cannot write the report: .*\(WARMUP_STRICT=1\)$"):
        bare_state(Settings("vllm-0.25", report=path, strict=True)).warm_up(lambda: "ready")


def test_the_reports_path_is_checked_before_anything_slow(tmp_path):
    (tmp_path / "a-file").write_text("")
    worker = NS(vllm_config=None, rank=1, device="cpu")
    settings = Settings("vllm-0.25", engine=ENGINE, report=str(tmp_path / "a-file" / "report.json"))
    with pytest.raises(PluginError) as e:
        WorkerWarmup.prepare(worker, RELEASES["0.25.0"], settings)
    assert str(e.value).startswith(f"warmup-planner: {tmp_path}/a-file/report.rank1.json: cannot write: ")


# --- the engine's refusals as one line each ------------------------------------------------------------------

def refusing(monkeypatch, error):
    import vllm_bridge.engine.from_vllm as engine_module

    def engine_from_vllm_config(vllm_config, device=None):
        raise error
    monkeypatch.setattr(engine_module, "engine_from_vllm_config", engine_from_vllm_config)


def test_what_the_models_config_says_is_refused_at_its_line(monkeypatch, tmp_path):
    from planner.engine.hf.source import config_error
    from vllm_bridge.warmup.worker_plan import engine_of

    (tmp_path / "config.json").write_text('{\n  "architectures": ["MambaForCausalLM"],\n  "state_size": 16\n}\n')
    source = str(tmp_path / "config.json")
    refusing(monkeypatch, config_error(source, "architectures: MambaForCausalLM is not planned", "architectures"))
    with pytest.raises(PlanError) as e:
        engine_of(NS(model_config=NS(model=str(tmp_path), revision=None)))
    assert str(e.value) == f"{source}:2: architectures: MambaForCausalLM is not planned"


def test_what_vllm_resolved_is_refused_at_the_vllm_config(monkeypatch, tmp_path):
    from vllm_bridge.warmup.worker_plan import engine_of

    refusing(monkeypatch, ValueError("speculative method 'suffix' is not one the engine config models"))
    with pytest.raises(PlanError) as e:
        engine_of(NS(model_config=NS(model=str(tmp_path), revision=None)))
    assert str(e.value) == f"<VllmConfig of {tmp_path}>: speculative method 'suffix' is not one the engine config models"
    with pytest.raises(PlanError, match="^--from-vllm: speculative"):
        engine_of(NS(model_config=NS(model=str(tmp_path), revision=None)), where="--from-vllm")


# === found by issue 44 item 7's mutation pass: planted bugs no test above noticed ===========================

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
    assert world_group() is group


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
              "WARMUP_ENGINE_CORE_FORK", "WARMUP_FLASHINFER_SPLIT_COMPILE", "WARMUP_TORCH_MEGA_AOT")


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
    monkeypatch.setattr(plugin.flashinfer_flags, "choose_flags", lambda: calls.append(("flashinfer_flags",)))
    monkeypatch.setattr(plugin.mega_aot, "choose", lambda *, bundle_named: calls.append(("mega_aot", bundle_named)))
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
    assert calls == [("patch_worker",), ("fixes", off), ("fork", None), ("flashinfer_flags",), ("mega_aot", True),
                     ("source", "/nowhere/b.warmup", plain_http)]


@pytest.mark.parametrize("value, setting", [(None, None), ("", None), ("1", True), ("0", False)])
def test_register_hands_the_engine_core_setting_down_unset_as_unset(monkeypatch, value, setting):
    """Issue 54: WARMUP_ENGINE_CORE_FORK unset is the plugin's default (fork where the engine runs on one
    GPU), not 0."""
    environ = {"WARMUP_BUNDLE": "/nowhere/b.warmup"} | ({} if value is None else {"WARMUP_ENGINE_CORE_FORK": value})
    assert ("fork", setting) in registered(monkeypatch, **environ)


@pytest.mark.parametrize("value, chosen", [(None, True), ("", True), ("1", True), ("0", False)])
def test_register_chooses_flashinfers_flags_unless_turned_off(monkeypatch, value, chosen):
    """Issue 54: FlashInfer's nvcc flags are chosen at register, before vLLM makes its config (the plan
    ahead's build) and starts its engine core; WARMUP_FLASHINFER_SPLIT_COMPILE=0 keeps FlashInfer's own."""
    environ = {"WARMUP_BUNDLE": "/nowhere/b.warmup"} | ({} if value is None else
                                                        {"WARMUP_FLASHINFER_SPLIT_COMPILE": value})
    calls = registered(monkeypatch, **environ)
    assert (("flashinfer_flags",) in calls) is chosen
    if chosen:
        assert calls.index(("flashinfer_flags",)) < calls.index(("source", "/nowhere/b.warmup", False))


@pytest.mark.parametrize("value, chosen", [(None, True), ("", True), ("1", True), ("0", False)])
def test_register_asks_for_vllms_mega_aot_artifact_unless_turned_off(monkeypatch, value, chosen):
    """Issue 54: vLLM's mega AOT artifact is chosen at register, before vLLM makes its config and its engine
    core computes the compile cache's key; WARMUP_TORCH_MEGA_AOT=0 keeps vLLM's default."""
    environ = {"WARMUP_BUNDLE": "/nowhere/b.warmup"} | ({} if value is None else {"WARMUP_TORCH_MEGA_AOT": value})
    calls = registered(monkeypatch, **environ)
    assert (("mega_aot", True) in calls) is chosen
    if chosen:
        assert calls.index(("mega_aot", True)) < calls.index(("source", "/nowhere/b.warmup", False))


@pytest.mark.parametrize("environ, bundle_named", [
    ({"WARMUP_PLAN": "vllm-0.25-plugin"}, False),
    ({"WARMUP_PLAN": "vllm-0.25-plugin", "WARMUP_BUNDLE_OUT": "/nowhere/out.warmup"}, True),
    ({"WARMUP_BUNDLE": "oci://registry.example/warmup/m:1"}, True),
])
def test_register_tells_the_mega_aot_choice_whether_a_bundle_is_named(monkeypatch, environ, bundle_named):
    """A start that installs or writes a bundle keeps vLLM's default (mega_aot._cache_why_not)."""
    monkeypatch.setattr(plugin.ahead, "watch_engine_args", lambda settings: None)
    assert [c for c in registered(monkeypatch, **environ) if c[0] == "mega_aot"] == [("mega_aot", bundle_named)]


@pytest.mark.parametrize("name, value, cause", [
    ("WARMUP_FLASHINFER_SPLIT_COMPILE", "lots", "WARMUP_FLASHINFER_SPLIT_COMPILE must be 1 or 0, got 'lots'"),
    ("WARMUP_REGISTRY_PLAIN_HTTP", "maybe", "WARMUP_REGISTRY_PLAIN_HTTP must be 1 or 0, got 'maybe'"),
    ("WARMUP_BUNDLE_INERT", "fatal", "WARMUP_BUNDLE_INERT must be warn or error, got 'fatal'"),
    ("WARMUP_FIX_GC_FREEZE_CAPTURE", "disabled", "WARMUP_FIX_GC_FREEZE_CAPTURE must be 1 or 0, got 'disabled'"),
])
def test_a_switch_value_the_plugin_cannot_use_steps_aside_in_one_line(caplog, monkeypatch, name, value, cause):
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
    assert state.pool.precompiler is None
    state.finish_device_lane()
    state.abandon("not needed: vLLM's load_model failed")

    def never(*args):
        raise AssertionError("a pool that is not running was asked to finish or cancel")
    state.pool.precompiler = NS(running=False, finish_device_lane=never, cancel=never)
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
    release, worker_module, _ = stock_vllm(monkeypatch, calls)
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
    state.pool.precompiler = NS(running=True, cancel=cancelled.append)
    monkeypatch.setattr(state.flashinfer_waits, "uninstall", lambda: uninstalled.append("flashinfer waits"))

    def failing():  # inside "warmup before the plan"
        raise RuntimeError("CUDA out of memory")
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        state.warm_up(failing)
    assert cancelled == ["not needed: vLLM's warmup failed"] and uninstalled == ["flashinfer waits"]
    assert not state.monitor.installed
    assert [row["phase"] for row in state.phases.rows] == ["warmup before the plan"]  # the open phase closed


def test_another_ranks_step_aside_is_this_workers_fallback_without_a_second_line(caplog):
    state = bare_state(Settings("vllm-0.25", strict=True))
    state.fallback = None
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        state.step_aside("rank 1 stepped aside (no engine)", by_another_rank=True)  # strict: its rank raised
    assert state.fallback == "rank 1 stepped aside (no engine)" and said(caplog) == []


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
    assert state.pool.precompiler is pool


def test_a_summary_that_fails_at_ready_is_one_line(caplog, monkeypatch):
    state = bare_state(Settings("vllm-0.25"))
    from vllm_bridge.warmup import worker_report

    monkeypatch.setattr(worker_report, "summarise", lambda state: (_ for _ in ()).throw(KeyError("stages")))
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
