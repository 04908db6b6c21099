"""The start-up fixes the plugin brings to a vLLM release that lacks them (vllm_bridge/fixes.py):
what each changes, its switch, its one line, and that the release rows say what the releases'
sources show (the sources' side: tests/integration/vllm_parity/test_fixes_rows.py)."""

from __future__ import annotations

import gc
import logging
import os
import sys
import types

import pytest

from vllm_bridge import fixes
from planner.engine.releases import VLLM_RELEASES
from vllm_bridge.releases import RELEASES
from vllm_bridge.settings import PluginError, Settings, fix_switch

MODULE = "fake_vllm_model_runner"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def runner_module(monkeypatch):
    """A stand-in for vLLM's model runner module: capture_model records the collector's state."""
    module = types.ModuleType(MODULE)

    class GPUModelRunner:
        def capture_model(self):
            self.seen = (gc.isenabled(), gc.get_freeze_count() > 0)
            return 7

    module.GPUModelRunner = GPUModelRunner
    monkeypatch.setitem(sys.modules, MODULE, module)
    target = (MODULE, "GPUModelRunner", "capture_model")
    monkeypatch.setitem(fixes.FIXES, "gc_freeze_capture", fixes.FIXES["gc_freeze_capture"]._replace(targets=(target,)))
    yield GPUModelRunner
    fixes.unpatch(MODULE, "GPUModelRunner")


def test_capture_runs_with_the_collector_frozen_and_off_and_it_comes_back(runner_module, caplog):
    assert gc.isenabled()
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert fixes.apply_fixes(("gc_freeze_capture",), on_import=None) == ["gc_freeze_capture"]
    runner = runner_module()
    assert runner.capture_model() == 7
    assert runner.seen == (False, True)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "start-up fix gc_freeze_capture" in lines[0] and "WARMUP_FIX_GC_FREEZE_CAPTURE=0" in lines[0]


def test_a_capture_that_raises_gives_the_collector_back(runner_module):
    def fail(self):
        raise RuntimeError("capture failed")

    runner_module.capture_model = fail
    fixes.apply_fixes(("gc_freeze_capture",), on_import=None)
    with pytest.raises(RuntimeError):
        runner_module().capture_model()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_the_switch_turns_the_fix_off(runner_module):
    off = Settings.from_env({"WARMUP_FIX_GC_FREEZE_CAPTURE": "0"}).fixes_off
    assert fixes.apply_fixes(("gc_freeze_capture",), None, off) == []
    runner = runner_module()
    runner.capture_model()
    assert runner.seen == (True, False)


@pytest.mark.parametrize("value, off", [(None, ()), ("", ()), ("1", ()), (" On ", ()), ("yes", ()),
                                        ("0", ("gc_freeze_capture",)), ("false", ("gc_freeze_capture",)),
                                        (" OFF ", ("gc_freeze_capture",)), ("no", ("gc_freeze_capture",))])
def test_settings_read_each_fixs_switch_with_the_one_truth_table(value, off):
    """Unset: on; the switches' truth table (vllm_bridge/settings.py: TRUE, FALSE) is every setting's."""
    environ = {} if value is None else {"WARMUP_FIX_GC_FREEZE_CAPTURE": value}
    assert Settings.from_env(environ).fixes_off == off


@pytest.mark.parametrize("value", ["maybe", "2", "disabled"])
def test_a_switch_neither_on_nor_off_is_one_line_naming_it(value):
    with pytest.raises(PluginError) as e:
        Settings.from_env({"WARMUP_FIX_GC_FREEZE_CAPTURE": value})
    assert str(e.value) == f"warmup-planner: WARMUP_FIX_GC_FREEZE_CAPTURE must be 1 or 0, got {value!r}"


def test_every_fix_has_a_switch_of_its_own_that_settings_read():
    """Settings read WARMUP_FIX_<NAME> without importing the fixes: each fix's switch is that name's."""
    assert all(fix.switch == fix_switch(name) for name, fix in fixes.FIXES.items())
    everything_off = Settings.from_env({fix.switch: "0" for fix in fixes.FIXES.values()}).fixes_off
    assert everything_off == tuple(sorted(fixes.FIXES))
    assert Settings.from_env({"WARMUP_FIX_NO_SUCH_FIX": "0"}).fixes_off == ("no_such_fix",)  # turns nothing off
    with pytest.raises(PluginError, match="WARMUP_FIX_NO_SUCH_FIX must be 1 or 0, got 'x'"):
        Settings.from_env({"WARMUP_FIX_NO_SUCH_FIX": "x"})


def test_vllms_own_opt_out_keeps_the_collector_running(runner_module, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_CUDAGRAPH_GC", "1")
    fixes.apply_fixes(("gc_freeze_capture",), None)
    runner = runner_module()
    runner.capture_model()
    assert runner.seen == (True, False)


def test_a_module_not_yet_imported_is_patched_when_it_is(runner_module, monkeypatch):
    monkeypatch.delitem(sys.modules, MODULE)
    later = []
    fixes.apply_fixes(("gc_freeze_capture",), lambda module, callback: later.append((module, callback)))
    assert [m for m, _ in later] == [MODULE]
    monkeypatch.setitem(sys.modules, MODULE, types.ModuleType(MODULE))
    sys.modules[MODULE].GPUModelRunner = runner_module
    later[0][1](sys.modules[MODULE])
    runner = runner_module()
    runner.capture_model()
    assert runner.seen == (False, True)


def test_patching_twice_wraps_once(runner_module):
    fixes.apply_fixes(("gc_freeze_capture",), None)
    fixes.apply_fixes(("gc_freeze_capture",), None)
    assert fixes.patch("gc_freeze_capture", MODULE, "GPUModelRunner", "capture_model")
    assert vars(runner_module)[fixes.PATCHED]["capture_model"].__name__ == "capture_model"
    assert not hasattr(vars(runner_module)[fixes.PATCHED]["capture_model"], "__wrapped__")


def test_a_class_without_the_method_is_one_warning_and_no_fix(monkeypatch, caplog):
    module = types.ModuleType(MODULE)
    module.GPUModelRunner = type("GPUModelRunner", (), {})
    monkeypatch.setitem(sys.modules, MODULE, module)
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert not fixes.patch("gc_freeze_capture", MODULE, "GPUModelRunner", "capture_model")
    [line] = [r for r in caplog.records]
    assert line.levelno == logging.WARNING and "not applied" in line.getMessage()


def test_every_missing_fix_is_declared_and_belongs_to_a_supported_release():
    for version in RELEASES:
        assert set(RELEASES[version].missing_fixes) <= set(fixes.FIXES)
        assert RELEASES[version].missing_fixes == VLLM_RELEASES[version].missing_start_up_fixes


def undocumented_switches() -> list[str]:
    """The fixes' switches docs/reference/settings.md does not name (its table of WARMUP_* settings)."""
    with open(os.path.join(ROOT, "docs", "reference", "settings.md"), encoding="utf-8") as f:
        documented = f.read()
    return sorted(fix.switch for fix in fixes.FIXES.values() if f"`{fix.switch}`" not in documented)


def test_every_fixs_switch_is_in_the_settings_reference():
    """Settings read WARMUP_FIX_<NAME> by prefix (no literal for the settings reference's own check,
    tests/vllm_bridge/test_vllm_plugin_cpu.py), so each fix's switch is held to the table here."""
    assert fixes.FIXES and undocumented_switches() == []


# --- a new start-up fix is one row (issue 56): a made-up one, added for one test --------------------

FICTITIOUS_MODULE = "fictitious_vllm_loader"


def with_a_mark(method):
    def marked(*args, **kwargs):
        return ("fixed", method(*args, **kwargs))

    return marked


def test_a_fictitious_fix_is_one_row(monkeypatch, caplog):
    """A fix row alone, for a stand-in class: apply_fixes wraps its method (one line naming the switch),
    its switch WARMUP_FIX_FICTITIOUS_LOAD=0 read by Settings turns it off, and the checks over FIXES
    (switch per name, everything off, the settings reference) each see it. Which release lacks it is
    the release row's missing_start_up_fixes (planner/engine/releases.py), the one other edit."""
    module = types.ModuleType(FICTITIOUS_MODULE)
    module.Loader = type("Loader", (), {"load": lambda self: 7})
    monkeypatch.setitem(sys.modules, FICTITIOUS_MODULE, module)
    row = fixes.StartUpFix(fix_switch("fictitious_load"), "a made-up vLLM change (#0)",
                           ((FICTITIOUS_MODULE, "Loader", "load"),), with_a_mark)
    monkeypatch.setitem(fixes.FIXES, "fictitious_load", row)

    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert fixes.apply_fixes(("fictitious_load",), on_import=None) == ["fictitious_load"]
    assert module.Loader().load() == ("fixed", 7)
    [line] = [r.getMessage() for r in caplog.records]
    assert "start-up fix fictitious_load" in line and "a made-up vLLM change (#0) (WARMUP_FIX_FICTITIOUS_LOAD=0" in line
    fixes.unpatch(FICTITIOUS_MODULE, "Loader")
    assert module.Loader().load() == 7

    off = Settings.from_env({"WARMUP_FIX_FICTITIOUS_LOAD": "0"}).fixes_off
    assert off == ("fictitious_load",)
    assert fixes.apply_fixes(("fictitious_load",), on_import=None, off=off) == []
    assert module.Loader().load() == 7

    assert all(fix.switch == fix_switch(name) for name, fix in fixes.FIXES.items())
    everything_off = Settings.from_env({fix.switch: "0" for fix in fixes.FIXES.values()}).fixes_off
    assert everything_off == tuple(sorted(fixes.FIXES)) == ("fictitious_load", "gc_freeze_capture")
    assert undocumented_switches() == ["WARMUP_FIX_FICTITIOUS_LOAD"]  # its line in the settings table is due
