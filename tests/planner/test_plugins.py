"""One entry-point loader (planner/plugins.py, vLLM's load_plugins_by_group), used by the command
plugins, the engine sources and the executor's backends (issue 36 item 5)."""

from __future__ import annotations

import argparse
import ast
import glob
import importlib.metadata
import os

import pytest

from planner.plugins import load_plugins_by_group

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUP = "warmup.test_group"


@pytest.fixture
def registered(monkeypatch):
    """Replace the installed entry points of GROUP (and of any group a test names) with `eps`."""
    def register(group: str, **values: str):
        eps = [importlib.metadata.EntryPoint(name, value, group) for name, value in values.items()]
        real = importlib.metadata.entry_points
        monkeypatch.setattr(importlib.metadata, "entry_points",
                            lambda group=None, **kw: eps if group == eps[0].group else real(group=group, **kw))
    return register


def test_loads_each_plugin_by_name_and_names_a_broken_one(registered, capsys):
    registered(GROUP, join="os.path:join", broken="no_such_module_of_the_test:f", basename="os.path:basename")
    plugins = load_plugins_by_group(GROUP)
    assert plugins == {"basename": os.path.basename, "join": os.path.join}
    assert list(plugins) == ["basename", "join"]  # sorted: the order does not depend on the install
    assert capsys.readouterr().err == (f"warmup: warning: {GROUP} plugin 'broken' failed to load: "
                                       "No module named 'no_such_module_of_the_test'\n")


def test_names_load_only_those(registered, capsys):
    registered(GROUP, join="os.path:join", broken="no_such_module_of_the_test:f")
    assert load_plugins_by_group(GROUP, names=("join",)) == {"join": os.path.join}
    assert load_plugins_by_group(GROUP, names=("other",)) == {}
    assert capsys.readouterr().err == ""  # the broken one was never imported


def test_a_group_with_no_plugins_is_empty():
    assert load_plugins_by_group("warmup.no_such_group") == {}


def test_the_executor_finds_another_packages_backend_through_it(registered, monkeypatch):
    from executor import registry

    monkeypatch.setattr(registry, "_external", None)
    registered(registry.ENTRY_POINTS, ext_null="executor.backends.null:NullBackend", broken="no_such_module_x:B")
    assert registry.backend_spec("ext_null") == ("executor.backends.null", "NullBackend")
    assert "ext_null" in registry.known_backends() and "broken" not in registry.known_backends()
    monkeypatch.setattr(registry, "_external", None)


def test_the_engine_source_is_loaded_through_it(registered):
    from planner.commands.engine import ENGINE_SOURCES, engine_source
    from planner.errors import PlanError

    registered(ENGINE_SOURCES, vllm="os.path:join")
    assert engine_source("vllm") is os.path.join
    with pytest.raises(PlanError, match="--from-hf needs the vLLM bridge"):
        engine_source("hf")


def test_a_command_plugin_that_fails_is_named_and_the_others_stay(registered, capsys):
    from planner import cli

    registered(cli.PLUGIN_GROUP, broken="no_such_module_y:add", fine="tests.planner.test_plugins:add_hello")
    sub = argparse.ArgumentParser().add_subparsers()
    cli.add_plugin_commands(sub)
    assert list(sub.choices) == ["hello"]
    assert "warmup.commands plugin 'broken' failed to load" in capsys.readouterr().err


def add_hello(sub) -> None:
    sub.add_parser("hello")


def test_no_other_module_scans_entry_points():
    calls = [os.path.relpath(path, ROOT)
             for floor in ("kernel_model", "planner", "executor", "vllm_bridge")
             for path in glob.glob(os.path.join(ROOT, floor, "**", "*.py"), recursive=True)
             for node in ast.walk(ast.parse(open(path, encoding="utf-8").read()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "entry_points"]
    assert calls == [os.path.join("planner", "plugins.py")]
