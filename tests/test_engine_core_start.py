"""vllm_bridge/engine_core_start.py: the engine core started by fork where the user asked for it and
vLLM's CLI, not the user, chose spawn (issue 54)."""

from __future__ import annotations

import logging
import multiprocessing
import sys

import pytest

from vllm_bridge import engine_core_start as ecs
from vllm_bridge.settings import PluginError, Settings


def proc_with(tmp_path, **start) -> str:
    """A /proc whose self/environ is the environment the process started with."""
    (tmp_path / "self").mkdir(exist_ok=True)
    (tmp_path / "self" / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in start.items()))
    return str(tmp_path)


def test_the_clis_spawn_becomes_fork_with_one_line(tmp_path, caplog):
    environ = {ecs.METHOD: "spawn"}  # set by vLLM's cli_env_setup, not in the start environment
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert ecs.fork_engine_core(True, environ, proc_with(tmp_path, PATH="/bin"))
    assert environ[ecs.METHOD] == "fork"
    (line,) = [r.getMessage() for r in caplog.records]
    assert "starts by fork" in line and "WARMUP_ENGINE_CORE_FORK=1" in line


@pytest.mark.parametrize("asked, now, start, why", [
    (False, "spawn", {}, "not asked for"),
    (True, "spawn", {ecs.METHOD: "spawn"}, "the user's own spawn"),
    (True, "fork", {}, "already fork"),
    (True, None, {}, "no CLI: vLLM's library default"),
])
def test_nothing_changes_unless_asked_and_the_cli_chose_spawn(tmp_path, asked, now, start, why):
    environ = {} if now is None else {ecs.METHOD: now}
    before = dict(environ)
    assert not ecs.fork_engine_core(asked, environ, proc_with(tmp_path, **start)), why
    assert environ == before, why


def test_an_unreadable_start_environment_changes_nothing(tmp_path):
    environ = {ecs.METHOD: "spawn"}
    assert not ecs.fork_engine_core(True, environ, str(tmp_path / "no-proc"))
    assert environ == {ecs.METHOD: "spawn"}


def test_not_in_a_process_multiprocessing_started(tmp_path, monkeypatch):
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())  # the engine core, a worker
    environ = {ecs.METHOD: "spawn"}
    assert not ecs.fork_engine_core(True, environ, proc_with(tmp_path))
    assert environ[ecs.METHOD] == "spawn"


def test_not_where_cuda_is_initialised(tmp_path, monkeypatch):
    class Cuda:
        @staticmethod
        def is_initialized():
            return True

    monkeypatch.setitem(sys.modules, "torch", type("torch", (), {"cuda": Cuda}))
    environ = {ecs.METHOD: "spawn"}
    assert not ecs.fork_engine_core(True, environ, proc_with(tmp_path))
    assert environ[ecs.METHOD] == "spawn"


def test_the_start_environment_is_read_from_proc(tmp_path):
    assert ecs.start_environment(proc_with(tmp_path, A="1", B="x=y")) == {"A": "1", "B": "x=y"}
    assert ecs.start_environment(str(tmp_path / "none")) is None
    assert isinstance(ecs.start_environment(), dict)  # this machine's own /proc


def test_the_setting_is_a_flag():
    assert Settings.from_env({"WARMUP_ENGINE_CORE_FORK": "1"}).engine_core_fork
    assert not Settings.from_env({}).engine_core_fork
    with pytest.raises(PluginError, match="WARMUP_ENGINE_CORE_FORK must be 1 or 0"):
        Settings.from_env({"WARMUP_ENGINE_CORE_FORK": "maybe"})
