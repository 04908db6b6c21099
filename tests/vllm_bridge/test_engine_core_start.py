"""vllm_bridge/engine_core_start.py: the engine core started by fork where vLLM's CLI, not the user, chose
spawn: by default once vLLM's config says the engine runs on one GPU, always where the user asked (issue 54)."""

from __future__ import annotations

import logging
import multiprocessing
import sys
import types

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
        assert ecs.choose_start(True, environ, proc_with(tmp_path, PATH="/bin"))
    assert environ[ecs.METHOD] == "fork"
    (line,) = [r.getMessage() for r in caplog.records]
    assert "starts by fork" in line and "WARMUP_ENGINE_CORE_FORK=1" in line


@pytest.mark.parametrize("setting, now, start, why", [
    (False, "spawn", {}, "turned off"),
    (True, "spawn", {ecs.METHOD: "spawn"}, "the user's own spawn"),
    (True, "fork", {}, "already fork"),
    (True, None, {}, "no CLI: vLLM's library default"),
])
def test_nothing_changes_unless_asked_and_the_cli_chose_spawn(tmp_path, setting, now, start, why):
    environ = {} if now is None else {ecs.METHOD: now}
    before = dict(environ)
    assert not ecs.choose_start(setting, environ, proc_with(tmp_path, **start)), why
    assert environ == before, why


def test_an_unreadable_start_environment_changes_nothing(tmp_path):
    environ = {ecs.METHOD: "spawn"}
    assert not ecs.fork_engine_core(ecs.ASKED, environ, str(tmp_path / "no-proc"))
    assert environ == {ecs.METHOD: "spawn"}


def test_not_in_a_process_multiprocessing_started(tmp_path, monkeypatch):
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())  # the engine core, a worker
    environ = {ecs.METHOD: "spawn"}
    assert not ecs.fork_engine_core(ecs.ASKED, environ, proc_with(tmp_path))
    assert environ[ecs.METHOD] == "spawn"


def test_not_where_cuda_is_initialised(tmp_path, monkeypatch):
    class Cuda:
        @staticmethod
        def is_initialized():
            return True

    monkeypatch.setitem(sys.modules, "torch", type("torch", (), {"cuda": Cuda}))
    environ = {ecs.METHOD: "spawn"}
    assert not ecs.fork_engine_core(ecs.ASKED, environ, proc_with(tmp_path))
    assert environ[ecs.METHOD] == "spawn"


def test_the_start_environment_is_read_from_proc(tmp_path):
    assert ecs.start_environment(proc_with(tmp_path, A="1", B="x=y")) == {"A": "1", "B": "x=y"}
    assert ecs.start_environment(str(tmp_path / "none")) is None
    assert isinstance(ecs.start_environment(), dict)  # this machine's own /proc


def test_the_setting_is_a_flag_whose_absence_is_the_default():
    assert Settings.from_env({"WARMUP_ENGINE_CORE_FORK": "1"}).engine_core_fork is True
    assert Settings.from_env({"WARMUP_ENGINE_CORE_FORK": "0"}).engine_core_fork is False
    assert Settings.from_env({}).engine_core_fork is None
    assert Settings.from_env({"WARMUP_ENGINE_CORE_FORK": " "}).engine_core_fork is None
    with pytest.raises(PluginError, match="WARMUP_ENGINE_CORE_FORK must be 1 or 0"):
        Settings.from_env({"WARMUP_ENGINE_CORE_FORK": "maybe"})


class EngineArgs:
    """vLLM's EngineArgs as far as the default reads it: create_engine_config gives a VllmConfig."""

    def __init__(self, tp=1, pp=1, dp=1):
        self.tp, self.pp, self.dp = tp, pp, dp

    def create_engine_config(self, usage_context=None):
        parallel = types.SimpleNamespace(world_size=self.tp * self.pp, data_parallel_size=self.dp)
        return types.SimpleNamespace(parallel_config=parallel, usage_context=usage_context)


@pytest.fixture
def engine_args(monkeypatch):
    """vllm.engine.arg_utils as the API server has it when the plugin registers; vLLM's function back after."""
    cls = type("EngineArgs", (EngineArgs,), {})
    monkeypatch.setitem(sys.modules, "vllm.engine.arg_utils", types.SimpleNamespace(EngineArgs=cls))
    yield cls
    ecs.patches.unwrap(cls, "create_engine_config", ecs.PATCHED)


@pytest.mark.parametrize("tp, pp, dp, forked", [(1, 1, 1, True), (2, 1, 1, False), (1, 2, 1, False), (1, 1, 2, False)])
def test_by_default_the_engine_core_forks_once_the_config_says_one_gpu(tmp_path, engine_args, caplog, tp, pp, dp,
                                                                        forked):
    """Unset: nothing at register; once vLLM made its config (before it starts the engine core), fork
    where the engine runs on one GPU (the case measured), spawn kept for more ranks or engines."""
    environ = {ecs.METHOD: "spawn"}
    proc = proc_with(tmp_path, PATH="/bin")
    assert not ecs.choose_start(None, environ, proc)
    assert environ[ecs.METHOD] == "spawn"
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        config = engine_args(tp, pp, dp).create_engine_config(usage_context="serve")
    assert config.usage_context == "serve" and config.parallel_config.world_size == tp * pp  # vLLM's own config
    assert environ[ecs.METHOD] == ("fork" if forked else "spawn")
    lines = [r.getMessage() for r in caplog.records]
    assert [ecs.ONE_GPU in line and "WARMUP_ENGINE_CORE_FORK=0 keeps spawn" in line for line in lines] == (
        [True] if forked else [])


def test_the_default_keeps_the_users_spawn_and_wraps_vllm_once(tmp_path, engine_args):
    environ = {ecs.METHOD: "spawn"}
    proc = proc_with(tmp_path, **{ecs.METHOD: "spawn"})
    ecs.choose_start(None, environ, proc)
    ecs.choose_start(None, environ, proc)  # vLLM loads plugins once per process; a test may register twice
    assert engine_args.create_engine_config.__wrapped__ is EngineArgs.create_engine_config
    engine_args().create_engine_config()
    assert environ[ecs.METHOD] == "spawn"


def test_a_failure_of_the_default_is_one_line_and_vllms_config_is_returned(tmp_path, engine_args, monkeypatch, caplog):
    monkeypatch.setattr(ecs, "fork_engine_core", lambda *a: 1 / 0)
    environ = {ecs.METHOD: "spawn"}
    ecs.choose_start(None, environ, proc_with(tmp_path))
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert engine_args().create_engine_config().parallel_config.world_size == 1
    assert environ[ecs.METHOD] == "spawn"
    assert [r.getMessage() for r in caplog.records] == [
        "warmup-planner: vLLM's engine core starts by spawn (ZeroDivisionError: division by zero)"]


def test_the_default_waits_for_vllm_to_be_imported_and_never_imports_it(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "vllm.engine.arg_utils", raising=False)
    assert not ecs.watch_engine_config({ecs.METHOD: "spawn"}, proc_with(tmp_path))
    assert "vllm.engine.arg_utils" not in sys.modules
