"""The plugin builds the generic Triton variants before vLLM's JIT monitor starts, seals them, and
says so in one line; a launch that runs one after ready is a finding, never a compile
(executor/triton_generic.py is tested through Triton itself in tests/executor/test_triton_generic.py)."""

from __future__ import annotations

import json
import logging
import sys
import types
from types import SimpleNamespace as NS

import pytest

from executor.triton_generic import CloseResult, GenericUse
from planner.api import expand, load_engine, load_plan
from vllm_bridge.releases import RELEASES
from vllm_bridge.settings import Settings
from vllm_bridge.warmup.generic_variants import built_line
from vllm_bridge.warmup.worker import WorkerWarmup


class Closure:
    """GenericVariants as the worker sees it: installed, closing with a given result (or error)."""

    def __init__(self, order, result=None, error=None):
        self.order, self.result, self.error = order, result or CloseResult(seen=5, built=3, already=2), error
        self.installed, self.sealed = True, False

    def close(self):
        self.order.append("close")
        if self.error:
            raise self.error
        return self.result

    def seal(self):
        self.order.append("seal")
        self.sealed = True

    def uninstall(self):
        self.order.append("uninstall")
        self.installed = False


@pytest.fixture
def vllm_monitor(monkeypatch):
    """A stand-in for vllm.utils.jit_monitor whose activate records when it ran."""
    order = []
    module = types.ModuleType("vllm.utils.jit_monitor")
    module.activate = lambda **kw: order.append(("activate", kw["mode"]))
    for name in ("vllm", "vllm.utils"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.utils.jit_monitor", module)
    return module, order


STATES: list = []


@pytest.fixture(autouse=True)
def _monitors_uninstalled():
    """A sealed monitor stays installed, as in vLLM: here it goes with its test (its Triton hooks
    left behind made a later test of the monitor see a listener it did not install)."""
    yield
    while STATES:
        STATES.pop().monitor.uninstall()


def state(settings=None):
    expanded = expand(load_plan("vllm-0.25"), load_engine("llama-3.1-8b-fp8-h100"))
    worker = NS(vllm_config=None, rank=0, device="cpu", model_runner=None)
    s = WorkerWarmup(worker, RELEASES["0.25.0"], settings or Settings("vllm-0.25"),
                     load_engine("llama-3.1-8b-fp8-h100"), expanded)
    STATES.append(s)
    return s


def vllm_method(module):
    """vLLM's compile_or_warm_up_model as far as its monitor goes: it imports activate at the call."""
    def compile_or_warm_up_model():
        from vllm.utils.jit_monitor import activate
        activate(mode="error", verbose=False)
        return "ready"
    return compile_or_warm_up_model


def test_the_generic_variants_are_built_and_sealed_before_vllms_monitor_starts(vllm_monitor, caplog):
    module, order = vllm_monitor
    original = module.activate
    s = state()
    s.fallback = "a rank stepped aside"  # vLLM's own method, whole: the order holds there too
    s.generics.variants = Closure(order)
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert s.warm_up(vllm_method(module)) == "ready"
    assert order == ["close", "seal", ("activate", "error")]
    assert module.activate is original, "vLLM's monitor module is left as it was"
    lines = [r.getMessage() for r in caplog.records if "generic Triton variants" in r.getMessage()]
    assert lines == ["warmup-planner: " + built_line(s.generics.closed, 0)]
    assert "generic Triton variants" in [p["phase"] for p in s.phases.rows]


def test_a_release_without_vllms_monitor_seals_them_at_the_end_of_the_warmup():
    order = []
    s = state()
    s.fallback = "no plan"
    s.generics.variants = Closure(order)
    assert s.warm_up(lambda: "ready") == "ready"
    assert order == ["close", "seal"] and s.monitor.sealed


def test_a_build_that_fails_is_one_line_and_vllm_serves(vllm_monitor, caplog):
    module, order = vllm_monitor
    s = state()
    s.fallback = "no plan"
    s.generics.variants = Closure(order, error=RuntimeError("ptxas died"))
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert s.warm_up(vllm_method(module)) == "ready"
    assert order == ["close", "uninstall", ("activate", "error")]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["warmup-planner: rank 0: the generic Triton variants were not built: RuntimeError: ptxas died"]


def test_a_launch_that_ran_a_generic_variant_is_a_finding_not_a_compile(tmp_path, caplog):
    s = state(Settings("vllm-0.25", jit_log=str(tmp_path / "after-ready.jsonl")))
    s.monitor.seal()
    use = GenericUse("_gumbel_sample_kernel", "[('i32', '')]{...}", "[('i32', '')]{generic}")
    with caplog.at_level(logging.WARNING, logger="vllm.warmup_planner"):
        s.generics.ran(use)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "_gumbel_sample_kernel ran its generic Triton variant after ready" in line and "nothing compiled" in line
    (event,) = [json.loads(x) for x in (tmp_path / "after-ready.jsonl").read_text().splitlines()]
    assert (event["event"], event["kernel"], event["key"]) == ("generic variant run", use.kernel, use.key)
    assert s.monitor.after_seal.jit_misses in (0, None), "a finding is no compile"


def test_the_line_names_what_failed_to_build():
    line = built_line(CloseResult(seen=4, built=2, already=1, failed=[("_k", "CompilationError: x")],
                                    seconds=1.25), 3)
    assert line.startswith("rank 3: 2 generic Triton variants built or loaded in 1.2 s at close (0 of them "
                           "built ahead, in the background during the warmup) for the 4 variants")
    assert line.endswith("; 1 failed to build (_k: CompilationError: x)")


def test_the_line_says_how_many_were_built_ahead_once():
    line = built_line(CloseResult(seen=20, built=16, already=4, ahead=13, seconds=2.0), 0)
    assert "16 generic Triton variants built or loaded in 2.0 s at close (13 of them built ahead" in line
    assert line.count("13") == 1 and line.count("16") == 1, "one count per fact"
