"""A run resolves its cache roots once and hands them down (issue 56 item 1): executor.run resolves
the environment (executor/caches/roots.py's Env) inside its DeepGEMM scope, and its JIT monitor,
its precompile pool's manifest and its claims read the roots there (tests/executor/test_jit_monitor_families.py
and test_precompile_roots.py), not this process's environment as it is when each looks."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from executor import run


def test_execute_resolves_the_environment_once_inside_its_deep_gemm_scope(tmp_path, monkeypatch):
    monkeypatch.delenv("DG_JIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)  # an earlier test's pin (the plugin's) is not this run's
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm"))
    handed = []
    monkeypatch.setattr(run, "_execute", lambda *args: handed.append(args[-1]))
    run.execute(None)
    [env] = handed
    assert env.environ["DG_JIT_CACHE_DIR"] == str(tmp_path / "vllm" / "deep_gemm")  # vLLM's, for the run
    assert env.environ is not os.environ and "DG_JIT_CACHE_DIR" not in os.environ  # a copy; the scope is over
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "later"))
    assert "TRITON_CACHE_DIR" not in env.environ  # what changes after the start is not a root of the run


def test_the_run_s_monitor_and_pool_are_handed_that_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "dg"))
    got = {}

    class Started(Exception):
        """Stops the run once the pool would start: the monitor is made by then."""

    def start_precompile(steps, options, progress, monitor, note=None, env=None):
        got.update(monitor=monitor.env, pool=env)
        raise Started

    monkeypatch.setattr(run, "_start_precompile", start_precompile)
    with pytest.raises(Started):
        run.execute(SimpleNamespace(steps=[]), None, run.Options(), report=SimpleNamespace(options={}))
    assert got["monitor"] is got["pool"] and got["pool"].environ["DG_JIT_CACHE_DIR"] == str(tmp_path / "dg")
