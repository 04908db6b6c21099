"""vllm_bridge/model_inspection.py on CPU: vLLM's registry's _run_in_subprocess, stood in for by a module
with the same function (its name and call are checked against vLLM 0.25's and 0.33's own code in
tests/integration/vllm_plugin/test_model_inspection_vllm.py)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import types

import pytest

from vllm_bridge import model_inspection
from vllm_bridge.settings import Settings


@pytest.fixture
def registry(monkeypatch):
    """A stand-in for vllm.model_executor.models.registry: its _run_in_subprocess records that vLLM's own
    subprocess ran."""
    module = types.ModuleType(model_inspection.REGISTRY)
    module.ran = []
    module._run_in_subprocess = lambda fn: module.ran.append("vLLM's subprocess") or ("vLLM's", fn())
    monkeypatch.setitem(sys.modules, model_inspection.REGISTRY, module)
    yield module
    model_inspection.uninstall(module)


def inspect_class():
    """What vLLM runs there (_ModelInfo.from_model_cls of the imported class): here, this process's pid."""
    return {"pid": os.getpid(), "supports_pp": True}


def test_the_inspection_runs_in_a_forked_child_and_its_result_comes_back(registry, caplog):
    assert model_inspection.install() is True
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        info = registry._run_in_subprocess(inspect_class)
    assert info["supports_pp"] is True and info["pid"] != os.getpid()  # run in another process
    assert registry.ran == []  # vLLM's fresh interpreter did not run
    [line] = [r.getMessage() for r in caplog.records]
    assert "model class inspected in a forked child" in line and "not a fresh interpreter" in line


def fail():
    raise ImportError("No module named 'vllm.model_executor.models.nemo'")


def test_a_failure_in_the_child_falls_back_to_vllms_own_subprocess_in_one_line(registry, caplog):
    model_inspection.install()
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"), pytest.raises(ImportError):
        registry._run_in_subprocess(fail)  # vLLM's own then raises as it would (here: the stand-in runs fn)
    assert registry.ran == ["vLLM's subprocess"]
    [line] = [r.getMessage() for r in caplog.records]
    assert "failed (ImportError: No module named 'vllm.model_executor.models.nemo')" in line


def hang():
    time.sleep(60)


def test_a_child_past_the_deadline_is_killed_and_vllms_subprocess_runs(registry):
    started = time.monotonic()
    assert model_inspection.in_fork(hang, deadline_s=0.5) is model_inspection._NONE
    assert time.monotonic() - started < 10


def test_a_fork_while_another_thread_imports_is_bounded_by_the_deadline(tmp_path, monkeypatch):
    """The one way a forked child hangs: another thread of the server inside an import at the fork (the plan
    ahead) leaves that module's import lock held for ever in the child; the deadline bounds it, vLLM's own
    subprocess then runs. The deadline is seconds, not minutes: a forked child answers in seconds (part AK)."""
    (tmp_path / "slow_to_import_for_fork.py").write_text("import time\ntime.sleep(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importing = threading.Thread(target=__import__, args=("slow_to_import_for_fork",))
    importing.start()
    time.sleep(0.5)  # the thread is inside the module's import

    def needs_that_module():
        import slow_to_import_for_fork  # noqa: F401 - the child waits on the lock its parent's thread held
        return "answered"

    started = time.monotonic()
    try:
        assert model_inspection.in_fork(needs_that_module, deadline_s=1.5) is model_inspection._NONE
        assert time.monotonic() - started < 10
    finally:
        importing.join()
        sys.modules.pop("slow_to_import_for_fork", None)
    assert model_inspection.DEADLINE_S <= 30


def test_a_thread_of_ours_that_imports_holds_the_fork_until_its_imports_are_done(tmp_path, monkeypatch):
    """The plan ahead (vllm_bridge/ahead.py) imports while vLLM resolves the model: it holds IMPORTING, so the
    fork waits for it and the child finds the module imported, not its lock held for ever."""
    (tmp_path / "slow_to_import_gated.py").write_text("import time\ntime.sleep(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def plan_ahead():
        with model_inspection.IMPORTING:
            __import__("slow_to_import_gated")

    importing = threading.Thread(target=plan_ahead)
    importing.start()
    time.sleep(0.3)

    def needs_that_module():
        import slow_to_import_gated  # noqa: F401
        return "answered"

    try:
        assert model_inspection.in_fork(needs_that_module, deadline_s=10) == "answered"
    finally:
        importing.join()
        sys.modules.pop("slow_to_import_gated", None)


def test_the_plan_ahead_holds_the_gate(monkeypatch):
    """ahead.start's thread plans inside IMPORTING (what the test above relies on)."""
    from vllm_bridge import ahead

    held = []
    monkeypatch.setattr(ahead, "_started", threading.Event())
    monkeypatch.setattr(ahead, "_plan_and_build", lambda *a: held.append(model_inspection.IMPORTING.locked()))
    ahead.start(types.SimpleNamespace(model="m"), Settings("vllm-0.25-plugin")).join(10)
    assert held == [True] and not model_inspection.IMPORTING.locked()


def die():
    os._exit(3)


def test_a_child_that_dies_without_a_result_is_no_result():
    assert model_inspection.in_fork(die) is model_inspection._NONE


def test_a_cuda_context_in_the_server_keeps_vllms_subprocess(registry, monkeypatch):
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", torch)
    model_inspection.install()
    assert registry._run_in_subprocess(inspect_class)[0] == "vLLM's"
    assert registry.ran == ["vLLM's subprocess"]


def test_installed_once_now_or_when_vllm_imports_its_registry(registry, monkeypatch):
    original = registry._run_in_subprocess
    assert model_inspection.install() is True and model_inspection.install() is False
    model_inspection.uninstall(registry)
    assert registry._run_in_subprocess is original
    hooks = []
    monkeypatch.delitem(sys.modules, model_inspection.REGISTRY)
    model_inspection.watch(lambda name, callback: hooks.append((name, callback)))
    assert hooks == [(model_inspection.REGISTRY, model_inspection.install)]
    assert model_inspection.install(registry) is True  # what the hook does with the module once imported


def test_the_setting_is_on_unless_turned_off():
    """On by default since bench/RESULTS.md part AK (a cold start's engine config 23.5 s -> 2.2 s, the same tokens and
    KV cache); 0 gives vLLM's own fresh interpreter."""
    assert Settings.from_env({}).model_inspection_fork is True
    assert Settings.from_env({"WARMUP_MODEL_INSPECTION_FORK": "0"}).model_inspection_fork is False
    assert Settings.from_env({"WARMUP_MODEL_INSPECTION_FORK": "1"}).model_inspection_fork is True
