"""Issue 54: vLLM's mega AOT artifact, asked for (WARMUP_TORCH_MEGA_AOT=1) where vLLM's code takes it on
this torch and vLLM's default leaves it off; never over the user's value or what it needs."""

from __future__ import annotations

import logging
from types import SimpleNamespace as NS

import pytest

from vllm_bridge import mega_aot
from vllm_bridge.settings import PluginError, Settings


def envs(default: bool = False, aot: bool = True, standalone: bool = True) -> NS:
    """vLLM's envs module as 0.25 and 0.33 answer: the mega artifact's default, AOT compile, standalone."""
    return NS(use_mega_aot_artifact=lambda: default, use_aot_compile=lambda: aot, VLLM_USE_STANDALONE_COMPILE=standalone)


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_vllm_025_on_torch_211_gets_it_in_one_line(caplog):
    environ: dict = {}
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert mega_aot.choose(environ, envs(), "2.11.0+cu130") is True
    assert environ == {"VLLM_USE_MEGA_AOT_ARTIFACT": "1"}
    assert messages(caplog) == [
        "warmup-planner: vLLM's torch.compile artifacts are one mega AOT artifact (VLLM_USE_MEGA_AOT_ARTIFACT=1; "
        "WARMUP_TORCH_MEGA_AOT=1): a warm start loads it without splitting the graph again; a compile cache filled "
        "without it compiles once more"]


@pytest.mark.parametrize("value", ["0", "1", " 0 "])
def test_the_users_value_is_kept_silently(caplog, value):
    environ = {"VLLM_USE_MEGA_AOT_ARTIFACT": value}
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert mega_aot.choose(environ, envs(), "2.11.0") is False
    assert environ == {"VLLM_USE_MEGA_AOT_ARTIFACT": value} and messages(caplog) == []


def test_vllms_own_default_on_leaves_nothing_to_ask(caplog):
    """torch 2.12 and later: vLLM turns it on itself (vLLM 0.33's torch 2.14)."""
    environ: dict = {}
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert mega_aot.choose(environ, envs(default=True), "2.14.0") is False
    assert environ == {} and messages(caplog) == []


@pytest.mark.parametrize("vllm_envs, torch, why", [
    (envs(aot=False), "2.11.0", "vLLM's AOT compile is off"),
    (envs(standalone=False), "2.11.0", "VLLM_USE_STANDALONE_COMPILE=0"),
    (envs(), "2.9.1+cu128", "torch 2.9.1+cu128 is older than 2.10"),
    (envs(), "", "torch (unknown) is older than 2.10"),
])
def test_what_it_needs_off_keeps_it_off_in_one_line(caplog, vllm_envs, torch, why):
    environ: dict = {}
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert mega_aot.choose(environ, vllm_envs, torch) is False
    assert environ == {}
    assert messages(caplog) == [f"warmup-planner: vLLM's mega AOT artifact not asked for ({why}); "
                                "WARMUP_TORCH_MEGA_AOT is ignored"]


def test_torch_210_is_the_first_that_takes_it():
    assert mega_aot.choose({}, envs(), "2.10.0") is True
    assert mega_aot.choose({}, envs(), "2.10.0a0+git1234") is True
    assert mega_aot.choose({}, envs(), "1.13.1") is False


def test_it_is_off_unless_asked_and_a_bad_value_is_one_line():
    assert Settings.from_env({}).torch_mega_aot is False
    assert Settings.from_env({"WARMUP_TORCH_MEGA_AOT": "1"}).torch_mega_aot is True
    assert Settings.from_env({"WARMUP_TORCH_MEGA_AOT": "0"}).torch_mega_aot is False
    with pytest.raises(PluginError, match=r"^warmup-planner: WARMUP_TORCH_MEGA_AOT must be 1 or 0, got 'lots'$"):
        Settings.from_env({"WARMUP_TORCH_MEGA_AOT": "lots"})
