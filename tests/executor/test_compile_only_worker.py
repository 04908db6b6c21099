"""Precompile workers compile every planned variant from sizes alone: no torch, no CUDA.

compile_only_worker.py runs a plan's jobs as a pool worker does (offline target sm_90) in
a fresh process with an empty Triton cache: each job must compile exactly one new variant
(distinct compile keys are distinct Triton variants, and a key's variant is not built
twice) and build its launcher, and torch must never be imported."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
if importlib.util.find_spec("triton.backends.nvidia") is None:
    pytest.skip("this triton has no NVIDIA backend", allow_module_level=True)

from executor import precompile  # noqa: E402
from planner.engine.config import load_engine  # noqa: E402
from planner.plan.authored import load_plan  # noqa: E402
from planner.plan.expand import expand  # noqa: E402

SCRIPT = Path(__file__).with_name("compile_only_worker.py")
ENGINES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"


@pytest.mark.parametrize("plan, engine, kinds", [
    ("triton", "llama-3.1-8b-fp8-h100", {"gemm", "attention"}),
    ("triton", "qwen3-30b-a3b-fp8-h100", {"gemm", "grouped_gemm", "attention"}),
    ("reference", str(ENGINES / "runner-qwen3-30b-a3b-fp8-ngram2.yaml"), {"gemm", "grouped_gemm", "kernel"}),
])
def test_worker_compiles_each_planned_key_once_without_torch(tmp_path, plan, engine, kinds):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    run = subprocess.run([sys.executable, str(SCRIPT), plan, engine], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["torch"] is False and out["target"] == "cuda:90" and out["errors"] == {}
    jobs = out["jobs"]
    assert {j["kind"] for j in jobs} == kinds
    assert [j for j in jobs if (j["status"], j["compiled"], j["launchers"]) != ("ok", 1, 1)] == []
    steps = expand(load_plan(plan), load_engine(engine)).steps
    assert len(jobs) == len(precompile.compile_jobs(steps)) == len({j["key"] for j in jobs})
