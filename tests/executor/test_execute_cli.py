"""`warmup execute` end to end on CPU: the null backend, and the real triton backend under the
Triton interpreter (tiny engine); autotune tables, progress, the hot-path check, options."""

from __future__ import annotations

import io
import math
import os
import random

import pytest
from execlib import TINY, TINY_PLAN, by_id, load_report, run_cli, run_subprocess

from executor import autotune as at
from executor.progress import Progress
from executor.records import StepRecord
from executor.verify import draw, verify_keys
from planner.plan.steps import Cleanup, step_from_dict


def test_interpreter_run_tunes_then_loads_and_verifies(tmp_path):
    pytest.importorskip("triton")
    env = {"TRITON_INTERPRET": "1", "WARMUP_KERNEL_CONFIG_DIR": str(tmp_path / "tables")}
    first = tmp_path / "first.json"
    proc = run_subprocess([TINY_PLAN, "--engine", TINY, "--device", "cpu", "--verify", "12",
                           "--report", str(first), "--jit-log", str(tmp_path / "late.jsonl")], env)
    assert proc.returncode == 0, proc.stderr
    rep = load_report(first)
    steps = by_id(rep)
    tune = steps["autotune/autotune"]
    assert tune["status"] == "ok" and tune["details"]["tuned"] == 2 and tune["kernel_calls"] == 2 * 8
    tables = sorted(os.listdir(tmp_path / "tables"))
    # Tuned for the engine config's device (the tables its plans read), whatever runs it.
    assert tables == ["fp8_gemm,N=128,K=128,device=H100.json", "fp8_gemm,N=256,K=128,device=H100.json"]
    assert all(s["status"] == "ok" and s["backend"] == "triton" for s in rep["steps"])
    assert steps["triton_gemm/grouped_gemm-w13-e4-n256-k128"]["kernel_calls"] == 5
    assert rep["verify"]["calls"] == 12 and rep["verify"]["post_seal_compiles"] == 0
    assert {k["kind"] for k in rep["verify"]["keys"]} == {"gemm", "grouped_gemm", "attention"}
    # Non-TTY progress: one line per stage; then the summary table on stdout.
    assert [line.split(":")[0] for line in proc.stderr.splitlines() if line.startswith("stage ")] == [
        "stage autotune", "stage triton_gemm", "stage prefill_attention"]
    assert "compiled" in proc.stdout and "verify: 12 random calls" in proc.stdout

    second = tmp_path / "second.json"
    proc = run_subprocess([TINY_PLAN, "--engine", TINY, "--device", "cpu", "--report", str(second)], env)
    assert proc.returncode == 0, proc.stderr
    tune = by_id(load_report(second))["autotune/autotune"]
    assert tune["details"]["loaded"] == 2 and tune["details"]["tuned"] == 0 and tune["kernel_calls"] == 0


def test_dry_run_of_every_builtin_plan(capsys):
    from planner.resources import builtin_plans

    for plan in builtin_plans():
        code, out, _ = run_cli([plan, "--engine", "qwen3-30b-a3b-fp8-h100", "--dry-run", "--no-progress"], capsys)
        assert code == 0, plan
        assert out.splitlines()[0].split()[:3] == ["stage", "steps", "run"]


def test_warmup_execute_through_the_planner_cli(capsys):
    from planner.cli import build_parser, main

    parser = build_parser(with_plugins=True)
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    # `execute` reaches the planner's CLI through the `warmup.commands` entry point of the installed
    # package: its absence is a broken install, not a reason to skip.
    assert "execute" in sub.choices, "the warmup.commands entry point `execute` is not installed"
    assert main(["execute", "triton", "--engine", TINY, "--dry-run", "--no-progress"]) == 0


@pytest.mark.parametrize("args,message", [
    (["--backend", "gemm=cutlass"], "unknown backend"),
    (["--backend", "attention=deep_gemm"], "does not implement attention"),
    (["--backend", "matmul=triton"], "unknown family"),
    (["--backend", "gemn=triton"], "unknown family 'gemn' (did you mean 'gemm'?)"),
    (["--backend", "gemm=trition"], "unknown backend 'trition' (did you mean 'triton'?)"),
    (["--verify", "-1"], "--verify"),
])
def test_bad_options_are_invalid_input(capsys, args, message):
    code, _, err = run_cli(["triton", "--engine", TINY, "--dry-run", *args], capsys)
    assert code == 2 and message in err


def test_plan_without_engine_is_invalid(capsys):
    code, _, err = run_cli(["triton", "--dry-run"], capsys)
    assert code == 2 and "--engine is required" in err


def test_progress_on_a_terminal_shows_counts_and_eta():
    stream = io.StringIO()
    p = Progress(stream, tty=True)
    p.stage_start("triton_gemm", 2, 100)
    p.step_start(Cleanup("triton_gemm/gemm-n1-k128", "triton_gemm", finished_req_ids=()))
    p.tick(50)
    p._draw(force=True)
    text = stream.getvalue()
    assert "\r" in text and "step 1/2" in text and "calls 50/100 (50%)" in text and "ETA" in text
    p.stage_end({"stage": "triton_gemm", "steps": 2, "ok": 2, "failed": 0, "unavailable": 0, "skipped": 0,
                 "kernel_calls": 100, "compiled": 3, "disk_loads": 0, "wall_s": 1.25})
    assert stream.getvalue().endswith("3 compiled, 0 from disk cache, 1.2 s\n")


def test_progress_on_a_terminal_that_went_away_lets_the_run_go_on():
    class Gone(io.StringIO):
        def isatty(self):
            return True

        def write(self, text):
            raise OSError("terminal closed")

    p = Progress(Gone())  # a terminal, as planner.progress.on_terminal tells it
    assert p.tty
    p.stage_start("s", 1, 10)
    p.tick(10)
    p._draw(force=True)
    p.message("a line")  # nothing raised: the run goes on without its line


def test_progress_off_a_terminal_is_one_line_per_stage():
    stream = io.StringIO()
    p = Progress(stream, tty=False)
    p.stage_start("s", 1, 10)
    p.step_start(Cleanup("s/a", "s", finished_req_ids=()))
    p.tick(10)
    p.step_end(StepRecord(id="s/a", stage="s", kind="gemm", status="failed", error="boom"))
    p.stage_end({"stage": "s", "steps": 1, "ok": 0, "failed": 1, "unavailable": 0, "skipped": 0,
                 "kernel_calls": 10, "compiled": None, "disk_loads": None, "wall_s": 0.1})
    assert stream.getvalue().splitlines() == [
        "FAILED s/a: boom", "stage s: 1 steps (1 failed), 10 kernel calls, - compiled, - from disk cache, 0.1 s"]


# --- autotune -------------------------------------------------------------------------------------

def configs_module():
    return pytest.importorskip("executor.kernels.configs")


def test_tune_picks_the_fastest_candidate_and_skips_broken_ones():
    cands = [{"id": 0}, {"id": 1}, {"id": 2}]
    cost = {0: 3.0, 1: 1.0}

    def bench(m, config):
        if config["id"] == 2:
            raise RuntimeError("OutOfResources")
        return cost[config["id"]] * (2.0 if m > 8 and config["id"] == 1 else 1.0) + (0.5 if m > 8 else 0)

    table, timings = at.tune_shape([1, 16], cands, bench)
    assert table == {1: {"id": 1}, 16: {"id": 1}}
    assert timings[1]["2"] is None


def test_tune_keeps_the_earlier_of_equal_candidates_once_per_m():
    cands = [{"id": 0}, {"id": 1}, {"id": 2}]
    fake_times = {(1, 0): 1.0, (1, 1): 2.0, (1, 2): 3.0, (512, 0): 9.0, (512, 1): 4.0, (512, 2): 4.0}
    calls = []

    def bench(m, config):
        calls.append(m)
        return fake_times[(m, config["id"])]

    table, _ = at.tune_shape([512, 1, 1], cands, bench)
    assert table == {1: {"id": 0}, 512: {"id": 1}}  # equal times: the earlier candidate
    assert list(table) == [1, 512] and len(calls) == 6  # buckets sorted, each benchmarked once


def test_tune_step_writes_then_loads(tmp_path):
    cfg = configs_module()
    step = step_from_dict({"id": "t/a", "stage": "t", "kind": "autotune", "library": "triton", "num_tokens": 16,
                           "buckets": [1, 16], "shapes": [{"kernel": "fp8_gemm", "n": 256, "k": 128}]})
    cands = [dict(c) for c in cfg.CANDIDATE_CONFIGS[:3]]
    calls = []

    def bench_for(kernel, n, k, max_m):
        assert (kernel, n, k) == ("fp8_gemm", 256, 128) and max_m >= 16
        return lambda m, c: calls.append(m) or (1.0 if c == cands[m % 3] else 2.0)

    kw = dict(device_name="NVIDIA H100", root=tmp_path, candidates=lambda k: cands, bench_for=bench_for,
              configs_module=cfg)
    out = at.tune_step(step, retune=False, **kw)
    path = tmp_path / "fp8_gemm,N=256,K=128,device=H100.json"
    assert out["tuned"] == 1 and path.is_file() and len(calls) == 6
    assert cfg.load_table(path) == {1: cands[1], 16: cands[1]}
    again = at.tune_step(step, retune=False, **kw)
    assert again["loaded"] == 1 and len(calls) == 6  # the table covers every bucket: no tuning
    wider = at.tune_step(step.replace(buckets=(1, 16, 64)), retune=False, **kw)
    assert wider["tables"][0]["status"] == "retuned"
    assert at.tune_step(step, retune=True, **kw)["tuned"] == 1


def test_a_crash_while_writing_a_table_leaves_the_old_one(tmp_path, monkeypatch):
    cfg = configs_module()
    step = step_from_dict({"id": "t/a", "stage": "t", "kind": "autotune", "library": "triton", "num_tokens": 1,
                           "buckets": [1], "shapes": [{"kernel": "fp8_gemm", "n": 128, "k": 128}]})
    cands = [dict(c) for c in cfg.CANDIDATE_CONFIGS[:2]]
    kw = dict(device_name="gpu", root=tmp_path, candidates=lambda k: cands, configs_module=cfg)
    at.tune_step(step, retune=False, bench_for=lambda *a: (lambda m, c: 1.0 if c == cands[0] else 2.0), **kw)
    path = tmp_path / "fp8_gemm,N=128,K=128,device=gpu.json"
    before = path.read_text()

    def crash(*a, **k):
        raise KeyboardInterrupt  # killed after the new text is written, before it replaces the table

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        at.tune_step(step, retune=True, bench_for=lambda *a: (lambda m, c: 1.0 if c == cands[1] else 2.0), **kw)
    assert path.read_text() == before and os.listdir(tmp_path) == [path.name]


def test_tuning_refuses_cuda_graph_capture(capsys):
    from executor.handlers import autotune as handler
    from executor.jit_monitor import Monitor
    from executor.run import Context, Options

    ctx = Context(Options(backends={"all": "null"}), None, Progress(enabled=False), Monitor("off"))
    ctx.capturing = True
    with pytest.raises(at.CaptureError):
        handler.handle(step_from_dict({"id": "t/a", "stage": "t", "kind": "autotune", "library": "triton",
                                       "num_tokens": 1, "buckets": [1]}), ctx)


# --- hot-path check draws ------------------------------------------------------------------------------

def test_verify_draws_inside_the_plan_ranges():
    attention = {"kind": "attention", "kernel": "context_attention_fwd", "backend": "triton", "num_heads": 2,
                 "num_kv_heads": 1, "head_size": 64, "scale": 0.1, "logits_soft_cap": 0.0,
                 "sliding_window": [-1, -1], "dtype": "bfloat16"}
    steps = [step_from_dict({"id": f"s/{i}", "stage": "s", **data}) for i, data in enumerate((
        {"kind": "gemm", "backend": "triton", "kernel": "fp8_gemm", "n": 64, "k": 128, "m_values": [1, 2, 300]},
        {"kind": "grouped_gemm", "backend": "triton", "kernel": "g", "weight": "w13", "num_groups": 4, "n": 64,
         "k": 128, "top_k": 2, "alignment": 128, "m_values": [128, 1024]},
        {**attention, "num_tokens": 1},
        {**attention, "num_tokens": 500}))]
    keys = verify_keys(steps, lambda step: step.backend)
    assert [(k["kind"], k["max"]) for k in keys] == [("gemm", 300), ("grouped_gemm", 1024), ("attention", 500)]
    rng = random.Random(1)
    for _ in range(300):
        assert 1 <= draw(keys[0], rng) <= 300
        m = draw(keys[1], rng)
        assert m % 128 == 0 and 128 <= m <= 1024
        seqs = draw(keys[2], rng)
        assert 1 <= sum(seqs) <= 500 and all(s >= 1 for s in seqs) and 1 <= len(seqs) <= 8
    assert not math.isnan(0.0)
