"""Issue 54: vLLM's mega AOT artifact, asked for by default (WARMUP_TORCH_MEGA_AOT=0: vLLM's default) where
vLLM's code takes it on this torch and vLLM's default leaves it off; never over the user's value or what it
needs, and only where the torch.compile cache was not filled without it (its key changes with it)."""

from __future__ import annotations

import logging
import os
from types import SimpleNamespace as NS

import pytest

from vllm_bridge import mega_aot
from vllm_bridge.settings import PluginError, Settings

ON_LINE = ("warmup-planner: vLLM's torch.compile artifacts are one mega AOT artifact (VLLM_USE_MEGA_AOT_ARTIFACT=1; "
           "WARMUP_TORCH_MEGA_AOT=0: vLLM's default): a warm start loads it without splitting the graph again")


def envs(root, default: bool = False, aot: bool = True, standalone: bool = True, cache_off: bool = False) -> NS:
    """vLLM's envs module as 0.25 and 0.33 answer: the mega artifact's default, AOT compile, standalone
    compile, the cache's root and switch."""
    return NS(use_mega_aot_artifact=lambda: default, use_aot_compile=lambda: aot, VLLM_USE_STANDALONE_COMPILE=standalone,
              VLLM_CACHE_ROOT=str(root), VLLM_DISABLE_COMPILE_CACHE=cache_off)


def aot_artifact(root, digest: str = "0f" * 32) -> str:
    """A model vLLM 0.25 saved (decorators.py: torch_aot_compile/<hash>/rank_<r>_<dp>/model)."""
    path = os.path.join(root, "torch_compile_cache", "torch_aot_compile", digest, "rank_0_0", "model")
    os.makedirs(os.path.dirname(path))
    open(path, "wb").close()
    return path


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def chosen(caplog, environ: dict, vllm_envs, torch: str = "2.11.0+cu130", **kw) -> bool:
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        return mega_aot.choose(environ, vllm_envs, torch, **kw)


def test_vllm_025_on_torch_211_and_an_empty_cache_gets_it_in_one_line_and_marks_the_cache(caplog, tmp_path):
    environ: dict = {}
    assert chosen(caplog, environ, envs(tmp_path)) is True
    assert environ == {"VLLM_USE_MEGA_AOT_ARTIFACT": "1"}
    assert messages(caplog) == [ON_LINE]
    assert os.listdir(tmp_path) == [mega_aot.MARKER], "the marker alone, written whole (no temporary left)"


def test_a_cache_the_plugin_marked_gets_it_again_over_its_artifacts(caplog, tmp_path):
    """The next start on a node the plugin filled: the artifacts there are the mega ones."""
    assert mega_aot.choose({}, envs(tmp_path), "2.11.0") is True
    aot_artifact(tmp_path)
    environ: dict = {}
    assert chosen(caplog, environ, envs(tmp_path)) is True
    assert environ == {"VLLM_USE_MEGA_AOT_ARTIFACT": "1"} and messages(caplog)[-1] == ON_LINE


def test_a_cache_filled_without_it_keeps_vllms_default_in_one_line(caplog, tmp_path):
    """Filled by stock vLLM or by the plugin before this setting: a changed key would compile cold."""
    aot_artifact(tmp_path)
    environ: dict = {}
    assert chosen(caplog, environ, envs(tmp_path)) is False
    assert environ == {} and not os.path.exists(tmp_path / mega_aot.MARKER)
    assert messages(caplog) == [f"warmup-planner: vLLM's mega AOT artifact not asked for (vLLM's torch.compile cache "
                                f"in {tmp_path} was filled without it: kept, not compiled again)"]


def test_a_start_that_installs_or_writes_a_bundle_keeps_vllms_default(caplog, tmp_path):
    environ: dict = {}
    assert chosen(caplog, environ, envs(tmp_path), bundle_named=True) is False
    assert environ == {} and os.listdir(tmp_path) == []
    assert messages(caplog) == ["warmup-planner: vLLM's mega AOT artifact not asked for (a bundle is installed or "
                                "written: bundles carry vLLM's artifacts without it)"]


def test_a_cache_it_cannot_mark_keeps_vllms_default(caplog, tmp_path):
    """Without the marker the next start would take the artifacts for ones built without it (here the
    cache's root is a file: nothing can be written under it)."""
    root = tmp_path / "a-file"
    root.write_text("")
    environ: dict = {}
    assert chosen(caplog, environ, envs(root)) is False
    assert environ == {} and os.listdir(tmp_path) == ["a-file"]
    [line] = messages(caplog)
    assert line.startswith(f"warmup-planner: vLLM's mega AOT artifact not asked for ({root}/{mega_aot.MARKER} "
                           "not written: ") and line.endswith(")")


def test_a_marker_that_cannot_take_its_place_leaves_no_temporary(caplog, tmp_path):
    (tmp_path / mega_aot.MARKER).mkdir()  # its name taken by a directory: the rename fails
    assert chosen(caplog, {}, envs(tmp_path)) is False
    assert os.listdir(tmp_path) == [mega_aot.MARKER] and os.listdir(tmp_path / mega_aot.MARKER) == []
    assert "not written: " in messages(caplog)[0]


@pytest.mark.parametrize("value", ["0", "1", " 0 "])
def test_the_users_value_is_kept_silently(caplog, tmp_path, value):
    environ = {"VLLM_USE_MEGA_AOT_ARTIFACT": value}
    assert chosen(caplog, environ, envs(tmp_path)) is False
    assert environ == {"VLLM_USE_MEGA_AOT_ARTIFACT": value} and messages(caplog) == []
    assert os.listdir(tmp_path) == []


def test_vllms_own_default_on_leaves_nothing_to_ask(caplog, tmp_path):
    """torch 2.12 and later: vLLM turns it on itself (vLLM 0.33's torch 2.14)."""
    environ: dict = {}
    assert chosen(caplog, environ, envs(tmp_path, default=True), "2.14.0") is False
    assert environ == {} and messages(caplog) == [] and os.listdir(tmp_path) == []


@pytest.mark.parametrize("kw, torch, why", [
    ({"aot": False}, "2.11.0", "vLLM's AOT compile is off"),
    ({"standalone": False}, "2.11.0", "VLLM_USE_STANDALONE_COMPILE=0"),
    ({"cache_off": True}, "2.11.0", "vLLM's compile cache is off"),
    ({}, "2.9.1+cu128", "torch 2.9.1+cu128 is older than 2.10"),
    ({}, "", "torch (unknown) is older than 2.10"),
])
def test_what_it_needs_off_keeps_it_off_in_one_line(caplog, tmp_path, kw, torch, why):
    environ: dict = {}
    assert chosen(caplog, environ, envs(tmp_path, **kw), torch) is False
    assert environ == {} and os.listdir(tmp_path) == []
    assert messages(caplog) == [f"warmup-planner: vLLM's mega AOT artifact not asked for ({why})"]


def test_torch_210_is_the_first_that_takes_it(tmp_path):
    assert mega_aot.choose({}, envs(tmp_path), "2.10.0") is True
    assert mega_aot.choose({}, envs(tmp_path), "2.10.0a0+git1234") is True
    assert mega_aot.choose({}, envs(tmp_path), "1.13.1") is False


def test_it_is_on_unless_turned_off_and_a_bad_value_is_one_line():
    assert Settings.from_env({}).torch_mega_aot is True
    assert Settings.from_env({"WARMUP_TORCH_MEGA_AOT": "1"}).torch_mega_aot is True
    assert Settings.from_env({"WARMUP_TORCH_MEGA_AOT": "0"}).torch_mega_aot is False
    with pytest.raises(PluginError, match=r"^warmup-planner: WARMUP_TORCH_MEGA_AOT must be 1 or 0, got 'lots'$"):
        Settings.from_env({"WARMUP_TORCH_MEGA_AOT": "lots"})


def test_a_vllm_without_what_it_reads_keeps_its_default_in_one_line(caplog, tmp_path):
    """Never a failed register: vLLM's envs without a name this reads (another release) is one line."""
    environ: dict = {}
    assert chosen(caplog, environ, NS(use_mega_aot_artifact=lambda: False)) is False
    assert environ == {} and os.listdir(tmp_path) == []
    assert messages(caplog) == ["warmup-planner: vLLM's mega AOT artifact not asked for (vLLM's settings not read: "
                                "AttributeError: 'types.SimpleNamespace' object has no attribute 'use_aot_compile')"]
