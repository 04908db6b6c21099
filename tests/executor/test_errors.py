"""Error paths: a failing step is reported with its id; `continue` runs the rest; a missing
backend or runner is `unavailable`; Ctrl-C writes the report and exits 130; stale plans are refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from execlib import ROOT, TINY, TINY_PLAN, TUNED_PLAN, by_id, load_report, run_cli

GEMM = "triton_gemm/gemm-n256-k128"
LAST = "prefill_attention/attention-h2-kv1-d64-t64"


def dry(tmp_path, *extra, capsys=None):
    out = tmp_path / "r.json"
    code, stdout, err = run_cli([TUNED_PLAN, "--engine", TINY, "--dry-run", "--report", str(out), *extra], capsys)
    return code, load_report(out), stdout, err


def test_injected_failure_stops_the_run(tmp_path, capsys):
    code, rep, stdout, err = dry(tmp_path, "--inject-failure", GEMM, capsys=capsys)
    steps = by_id(rep)
    assert code == 1 and rep["status"] == "failed"
    assert steps[GEMM]["status"] == "failed" and f"injected failure in step {GEMM}" in steps[GEMM]["error"]
    assert "Traceback" in steps[GEMM]["traceback"]
    assert steps["autotune/autotune"]["status"] == "ok"
    assert steps[LAST]["status"] == "skipped" and GEMM in steps[LAST]["error"]
    assert f"FAILED {GEMM}" in err and f"failed: {GEMM}" in stdout


def test_continue_runs_the_rest(tmp_path, capsys):
    code, rep, _, _ = dry(tmp_path, "--inject-failure", GEMM, "--inject-failure", f"{LAST}=oom",
                          "--on-error", "continue", capsys=capsys)
    steps = by_id(rep)
    assert code == 1
    assert steps[GEMM]["status"] == "failed"
    assert steps[LAST]["status"] == "failed" and "out-of-memory" in steps[LAST]["error"]
    assert steps[LAST].get("oom") is True
    others = [s for s in rep["steps"] if s["id"] not in (GEMM, LAST)]
    assert others and all(s["status"] == "ok" for s in others)
    assert rep["counts"] == {"ok": len(others), "failed": 2, "unavailable": 0, "skipped": 0}


def test_injected_interrupt_writes_the_report_and_exits_130(tmp_path, capsys):
    code, rep, _, _ = dry(tmp_path, "--inject-failure", f"{GEMM}=interrupt", capsys=capsys)
    steps = by_id(rep)
    assert code == 130 and rep["status"] == "interrupted" and rep["interrupted"] is True
    assert steps[GEMM]["status"] == "failed" and "interrupted" in steps[GEMM]["error"]
    assert steps[LAST]["status"] == "skipped" and "interrupted" in steps[LAST]["error"]
    assert len(rep["steps"]) == 9  # every planned step is in the report


def test_unknown_injected_step_is_invalid_input(tmp_path, capsys):
    code, rep, _, err = dry(tmp_path, "--inject-failure", "nope/nope", capsys=capsys)
    assert code == 2 and "no step 'nope/nope'" in err and rep["status"] == "invalid input"
    assert rep["plan"] is None and rep["options"] == {"argv": rep["options"]["argv"]}  # refused before a plan


def test_a_crash_after_the_plan_is_loaded_is_written_in_the_plans_report(tmp_path, capsys, monkeypatch):
    import executor.cli

    def crash(expanded, engine, options, progress, report):
        raise RuntimeError("boom")
    monkeypatch.setattr(executor.cli, "execute", crash)
    code, rep, _, err = dry(tmp_path, capsys=capsys)
    assert code == 3 and "internal error: RuntimeError: boom" in err
    assert rep["error"] == "RuntimeError: boom" and rep["plan"] and rep["options"]["jobs"] is not None
    assert rep["source"]["kind"] == "plan"


def test_vllm_plan_without_deep_gemm_or_flashinfer_is_unavailable(tmp_path, capsys):
    """Real backends on a machine without DeepGEMM, FlashInfer (or a GPU): nothing crashes."""
    pytest.importorskip("torch")
    out = tmp_path / "r.json"
    code, stdout, err = run_cli(["vllm", "--engine", "qwen3-30b-a3b-fp8-h100", "--report", str(out),
                                 "--on-error", "continue", "--no-progress", "--runner", "none"], capsys)
    rep = load_report(out)
    assert code == 1
    statuses = {s["kind"]: s for s in rep["steps"]}
    for kind in ("gemm", "grouped_gemm", "autotune"):
        assert statuses[kind]["status"] == "unavailable", statuses[kind]
    dg = [s for s in rep["steps"] if s["backend"] == "deep_gemm"]
    assert dg and all("deep_gemm" in s["error"] for s in dg)
    runner_steps = [s for s in rep["steps"] if s["kind"] in ("prefill", "decode", "sample", "cleanup", "cudagraph")]
    assert runner_steps and all(s["status"] == "skipped" for s in runner_steps)
    assert "unavailable:" in stdout
    code2, _, _ = run_cli(["vllm", "--engine", "qwen3-30b-a3b-fp8-h100", "--allow-missing", "--runner", "none",
                           "--no-progress"], capsys)
    assert code2 == 0


def test_runner_none_skips_batch_steps(tmp_path, capsys):
    out = tmp_path / "r.json"
    code, _, _ = run_cli(["vllm", "--engine", "llama-3.1-8b-fp8-h100", "--backend", "all=null", "--runner", "none",
                          "--report", str(out)], capsys)
    rep = load_report(out)
    assert code == 0
    batch = [s for s in rep["steps"] if s["kind"] in ("prefill", "decode", "sample", "cleanup", "cudagraph")]
    assert batch and all(s["status"] == "skipped" and "--runner none" in s["error"] for s in batch)


def test_no_runner_module_is_unavailable(tmp_path, capsys, monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *a, **kw):
        if name == "executor.runner.reference":
            raise ModuleNotFoundError("no module", name=name)
        return real(name, *a, **kw)

    monkeypatch.setattr(importlib, "import_module", fake)
    out = tmp_path / "r.json"
    code, _, _ = run_cli(["vllm", "--engine", "llama-3.1-8b-fp8-h100", "--backend", "all=null",
                          "--report", str(out)], capsys)
    rep = load_report(out)
    batch = [s for s in rep["steps"] if s["kind"] in ("prefill", "cudagraph")]
    assert code == 1 and all(s["status"] == "unavailable" and s["error"].startswith("no model runner") for s in batch)


def test_stale_expanded_plan_is_refused(tmp_path, capsys):
    from planner.cli import main as planner_main

    engine = tmp_path / "engine.yaml"
    engine.write_text(open(TINY).read())
    expanded = tmp_path / "expanded.yaml"
    assert planner_main(["plan", "triton", "--engine", str(engine), "-o", str(expanded)]) == 0
    code, _, _ = run_cli([str(expanded), "--engine", str(engine), "--dry-run"], capsys)
    assert code == 0
    engine.write_text(open(TINY).read().replace("max_num_batched_tokens: 4", "max_num_batched_tokens: 8"))
    out = tmp_path / "r.json"
    code, _, err = run_cli([str(expanded), "--engine", str(engine), "--dry-run", "--report", str(out)], capsys)
    assert code == 2 and "stale" in err
    assert load_report(out)["status"] == "invalid input"


def test_expanded_plan_of_a_custom_engine_needs_the_engine(tmp_path, capsys):
    from planner.cli import main as planner_main

    expanded = tmp_path / "expanded.yaml"
    assert planner_main(["plan", "triton", "--engine", TINY, "-o", str(expanded)]) == 0
    code, _, err = run_cli([str(expanded), "--dry-run"], capsys)
    assert code == 2 and "--engine" in err


def test_sigint_during_a_real_run_writes_the_report(tmp_path):
    """A real Ctrl-C (SIGINT) in the middle of the interpreter run: exit 130, report written."""
    pytest.importorskip("triton")
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": ROOT, "TRITON_INTERPRET": "1",
           "WARMUP_KERNEL_CONFIG_DIR": str(tmp_path / "kc")}
    # The tuned plan (11 buckets x 8 candidates in the interpreter) runs for seconds: the
    # signal lands inside it (the one-bucket tiny plan could finish first).
    proc = subprocess.Popen([sys.executable, "-m", "executor.cli", "execute", TUNED_PLAN, "--engine", TINY,
                             "--device", "cpu", "--report", str(out), "--retune"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a test run started as `cmd &` inherits SIGINT ignored: the child must not
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while time.time() < deadline and not (tmp_path / "kc").exists() and proc.poll() is None:
        time.sleep(0.05)  # the autotune stage has started once it created the table directory
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    rep = load_report(out)
    assert rep["status"] == "interrupted" and rep["exit_code"] == 130
    assert any("interrupted" in (s["error"] or "") for s in rep["steps"])
