"""`warmup execute --jobs N` on a CUDA GPU (skipped elsewhere): a cold run compiles every variant
in the workers and the main process only loads; a warm run starts no pool and compiles nothing;
two runs warming one cold Triton cache at once leave every entry complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from execlib import ROOT, TINY, load_report, run_subprocess

pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.gpu  # skipped without CUDA by tests/conftest.py


def _env(tmp_path) -> dict:
    return {"TRITON_CACHE_DIR": str(tmp_path / "triton"), "WARMUP_KERNEL_CONFIG_DIR": str(tmp_path / "tables"),
            "TRITON_INTERPRET": "0"}


def _keyed(rep: dict) -> None:
    kernels = [s for s in rep["steps"] if s["kind"] in ("gemm", "grouped_gemm", "attention")]
    if not kernels or not all(s.get("precompile") for s in kernels):
        pytest.skip("the plan's kernel steps carry no compile_keys (planner without exact mode)")


def _totals(rep: dict) -> dict:
    out = {}
    for name in ("compiled", "compiled_main", "compiled_pool", "disk_loads"):
        out[name] = sum(s.get(name) or 0 for s in rep["stages"])
    return out


def _warmup_s(rep: dict) -> float:
    return sum(s["wall_s"] for s in rep["stages"])


def test_cold_run_compiles_in_workers_then_a_warm_run_skips_the_pool(tmp_path):
    env = _env(tmp_path)
    cold, warm = tmp_path / "cold.json", tmp_path / "warm.json"
    proc = run_subprocess(["triton", "--engine", TINY, "--jobs", "4", "--verify", "200", "--report", str(cold)], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = load_report(cold)
    pre = rep["precompile"]
    assert pre["status"] == "ran", pre
    _keyed(rep)
    assert pre["failed"] == 0 and pre["unavailable"] == 0 and pre["ok"] == pre["jobs"] > 0, pre["records"]
    assert pre["compiled"] > 0 and pre["workers"] == min(4, pre["jobs"])
    totals = _totals(rep)
    # Every variant the main process launched was compiled by a worker: the main process only loads.
    assert totals["compiled_main"] == 0, [s["id"] for s in rep["steps"] if (s.get("jit") or {}).get("compiled")]
    assert totals["compiled_pool"] == pre["compiled"] and totals["disk_loads"] > 0
    assert rep["verify"]["post_seal_compiles"] == 0
    manifest = json.loads((tmp_path / "triton" / "warmup-precompiled.json").read_text())
    assert len(manifest["keys"]["triton"]) == pre["keys_planned"]
    assert "precompile:" in proc.stdout and " pool " in proc.stdout.splitlines()[0] + " "

    proc = run_subprocess(["triton", "--engine", TINY, "--jobs", "4", "--verify", "200", "--report", str(warm)], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep_warm = load_report(warm)
    assert rep_warm["precompile"]["status"] == "skipped", rep_warm["precompile"]
    totals = _totals(rep_warm)
    assert totals["compiled"] == 0 and totals["disk_loads"] > 0
    assert rep_warm["verify"]["post_seal_compiles"] == 0
    print(f"\ncold: warmup {_warmup_s(rep):.2f} s, run {rep['wall_s']:.2f} s, precompile "
          f"{pre['jobs']} jobs in {pre['wall_s']:.2f} s (busy {pre['busy_s']:.2f} s, speed-up {pre['speedup']}x, "
          f"first worker ready {pre.get('first_worker_ready_s')} s, init {pre.get('worker_init_s')}); "
          f"warm: warmup {_warmup_s(rep_warm):.2f} s, run {rep_warm['wall_s']:.2f} s")


def test_two_runs_warming_one_cold_cache_leave_complete_entries(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **_env(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-m", "executor.cli", "execute", "triton", "--engine", TINY,
                               "--jobs", "3", "--no-progress", "--report", str(tmp_path / f"r{i}.json")],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    cache = tmp_path / "triton"
    groups = 0
    for root, dirs, files in os.walk(cache):
        assert not any(d.startswith("tmp.") for d in dirs), f"left-over temporary directory in {root}: {dirs}"
        for name in files:
            path = os.path.join(root, name)
            assert os.path.getsize(path) > 0, path
            if name.startswith("__grp__"):
                with open(path) as f:
                    group = json.load(f)
                assert all(os.path.isfile(p) for p in group["child_paths"].values()), path
                groups += 1
            elif name.endswith(".json"):
                with open(path) as f:
                    json.load(f)
    assert groups > 0
    # Everything the two runs wrote loads: a third run (no pool, no manifest) compiles nothing.
    os.unlink(cache / "warmup-precompiled.json")
    third = tmp_path / "third.json"
    proc = run_subprocess(["triton", "--engine", TINY, "--jobs", "0", "--report", str(third)], _env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = load_report(third)
    assert rep["precompile"]["status"] == "off" and _totals(rep)["compiled"] == 0 and _totals(rep)["disk_loads"] > 0
