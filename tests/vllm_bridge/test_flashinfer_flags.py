"""Issue 54: FlashInfer's nvcc spreads each compile unit over the cores (--split-compile=0), chosen in the
plugin's first process where the user set no flags and the JIT workspace holds no module built otherwise."""

from __future__ import annotations

import logging
import os

import pytest

from executor.caches import flashinfer_jit
from vllm_bridge import flashinfer_flags
from vllm_bridge.settings import Settings

VERSION = "0.6.13"


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """FlashInfer's JIT workspace base of this test, FlashInfer 0.6.13 'installed'."""
    monkeypatch.setattr(flashinfer_jit, "flashinfer_version", lambda: VERSION)
    return tmp_path


def built(base, name: str, cuda_flags: str, arch: str = "90a") -> None:
    """A module FlashInfer built into the workspace, its ninja file with these nvcc flags."""
    folder = os.path.join(base, ".cache", "flashinfer", VERSION, arch, "cached_ops", name)
    os.makedirs(folder)
    with open(os.path.join(folder, "build.ninja"), "w", encoding="utf-8") as f:
        f.write(f"ninja_required_version = 1.3\ncuda_cflags = -O3 -std=c++17 {cuda_flags}\n")
    open(os.path.join(folder, f"{name}.so"), "wb").close()


def test_an_empty_workspace_gets_split_compilation(workspace, caplog):
    environ = {"FLASHINFER_WORKSPACE_BASE": str(workspace)}
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert flashinfer_flags.choose_flags(environ) is True
    assert environ["FLASHINFER_EXTRA_CUDAFLAGS"] == "--split-compile=0"
    assert [r.getMessage() for r in caplog.records] == [
        "warmup-planner: FlashInfer's nvcc spreads each compile unit over the cores "
        "(FLASHINFER_EXTRA_CUDAFLAGS=--split-compile=0; WARMUP_FLASHINFER_SPLIT_COMPILE=0: FlashInfer's own flags)"]


def test_a_workspace_built_with_the_flag_keeps_getting_it(workspace):
    """A warm node the plugin built: the same flags, so ninja has nothing to do."""
    built(workspace, "sampling", "--split-compile=0")
    environ = {"FLASHINFER_WORKSPACE_BASE": str(workspace)}
    assert flashinfer_flags.choose_flags(environ) is True
    assert environ["FLASHINFER_EXTRA_CUDAFLAGS"] == "--split-compile=0"


def test_a_module_built_with_flashinfers_own_flags_keeps_them_for_every_module(workspace, caplog):
    """Stock vLLM (or an older plugin) built `sampling` here: a flag added now would build it again."""
    built(workspace, "sampling", "")
    built(workspace, "fp8_blockscale_gemm_90", "--split-compile=0", arch="100a")
    environ = {"FLASHINFER_WORKSPACE_BASE": str(workspace)}
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert flashinfer_flags.choose_flags(environ) is False
    assert "FLASHINFER_EXTRA_CUDAFLAGS" not in environ
    assert [r.getMessage() for r in caplog.records] == [
        "warmup-planner: FlashInfer's modules sampling were built with FlashInfer's own nvcc flags: kept "
        "(a changed flag would build them again)"]


def test_the_workspace_of_another_flashinfer_version_is_not_this_ones(workspace):
    folder = os.path.join(workspace, ".cache", "flashinfer", "0.6.1", "90a", "cached_ops", "sampling")
    os.makedirs(folder)
    open(os.path.join(folder, "build.ninja"), "w").close()
    environ = {"FLASHINFER_WORKSPACE_BASE": str(workspace)}
    assert flashinfer_flags.choose_flags(environ) is True


def test_the_users_own_flags_are_never_changed(workspace, caplog):
    environ = {"FLASHINFER_WORKSPACE_BASE": str(workspace), "FLASHINFER_EXTRA_CUDAFLAGS": "-lineinfo"}
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert flashinfer_flags.choose_flags(environ) is False
    assert environ["FLASHINFER_EXTRA_CUDAFLAGS"] == "-lineinfo" and caplog.records == []


def test_the_home_directory_is_the_workspace_base_where_none_is_set(workspace, monkeypatch):
    monkeypatch.setenv("HOME", str(workspace))
    built(workspace, "sampling", "")
    assert flashinfer_flags.choose_flags({}) is False


def test_a_workspace_that_cannot_be_read_keeps_flashinfers_flags_in_one_line(workspace, monkeypatch, caplog):
    def unreadable(flag, environ):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(flashinfer_jit, "modules_built_without", unreadable)
    environ = {"FLASHINFER_WORKSPACE_BASE": str(workspace)}
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert flashinfer_flags.choose_flags(environ) is False
    assert "FLASHINFER_EXTRA_CUDAFLAGS" not in environ
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("warmup-planner: FlashInfer's nvcc flags kept (its workspace not read: PermissionError")


def test_an_unreadable_ninja_file_counts_as_built_otherwise(workspace, monkeypatch):
    built(workspace, "sampling", "--split-compile=0")
    real_open = open

    def no_read(path, *args, **kwargs):
        if str(path).endswith("build.ninja"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_read)
    assert flashinfer_jit.modules_built_without("--split-compile=0", {"FLASHINFER_WORKSPACE_BASE": str(workspace)}) \
        == ["sampling"]


def test_no_flashinfer_installed_no_workspace_to_read(monkeypatch, tmp_path):
    monkeypatch.setattr(flashinfer_jit, "flashinfer_version", lambda: None)
    assert flashinfer_jit.modules_built_without("--split-compile=0", {"FLASHINFER_WORKSPACE_BASE": str(tmp_path)}) == []


def test_the_setting_is_on_unless_turned_off():
    assert Settings.from_env({}).flashinfer_split_compile is True
    assert Settings.from_env({"WARMUP_FLASHINFER_SPLIT_COMPILE": "0"}).flashinfer_split_compile is False
    assert Settings.from_env({"WARMUP_FLASHINFER_SPLIT_COMPILE": "1"}).flashinfer_split_compile is True


def test_without_flashinfer_nothing_is_set_or_said(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(flashinfer_jit, "flashinfer_version", lambda: None)
    environ = {"FLASHINFER_WORKSPACE_BASE": str(tmp_path)}
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert flashinfer_flags.choose_flags(environ) is False
    assert environ == {"FLASHINFER_WORKSPACE_BASE": str(tmp_path)} and caplog.records == []
