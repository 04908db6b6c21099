"""The executor and the model runner: each stage of batch steps runs inside the runner's
warmup_scope() (exited at the stage's end, also after a failure or Ctrl-C), and
`--verify-trace N` runs the seeded serving trace on the same runner after the seal, then
closes it. A fake runner records the calls; the last test runs the reference runner on the
tiny engine (Triton interpreter on CPU)."""

from __future__ import annotations

import contextlib
import importlib
import os
import types

import pytest
from execlib import TINY, by_id, load_report, run_cli

HERE = os.path.dirname(os.path.abspath(__file__))
TINY_REFERENCE = os.path.join(HERE, "data", "tiny-reference.yaml")
RUNNER_TINY = os.path.join(os.path.dirname(HERE), "fixtures", "engines", "runner-tiny.yaml")
TWO_STAGES = os.path.join(HERE, "data", "two-batch-stages.yaml")
BATCH_STAGES = ["warmup_kernels", "warmup_one_request"]


class FakeRunner:
    """The runner protocol, recording every call and whether it ran inside warmup_scope()."""

    log: list = []
    fail_on: set = set()
    compile_on: dict = {}  # step id -> kernel name: a Triton JIT miss during that step

    def __init__(self, engine, device="cuda"):
        self.in_scope = False
        self.stats = {"samples": 0}
        self.log.append(("init",))

    def execute_model(self, step):
        self.log.append(("execute", step.id, self.in_scope))
        if step.id in self.fail_on:
            raise RuntimeError(f"fake failure in {step.id}")
        if step.id in self.compile_on:
            from triton import knobs

            fn = types.SimpleNamespace(name=self.compile_on[step.id], module="fake")
            knobs.runtime.jit_cache_hook(key="k", repr="fake[i32]", fn=fn, compile={}, is_manual_warmup=False,
                                         already_compiled=False)

    def sample_tokens(self, step):
        self.log.append(("sample", step.id, self.in_scope))
        self.stats["samples"] += 1

    def capture_cudagraphs(self, step):
        self.log.append(("capture",))

    def close(self):
        self.log.append(("close",))

    @contextlib.contextmanager
    def warmup_scope(self):
        self.log.append(("enter",))
        self.in_scope = True
        try:
            yield self
        finally:
            self.in_scope = False
            self.log.append(("exit",))


def start_as_model_runner(monkeypatch, runner: type) -> None:
    """executor.run imports its model runner by name: hand it `runner` instead (no torch needed)."""
    real = importlib.import_module

    def fake_import(name, *a, **kw):
        if name == "executor.runner.reference":
            return types.SimpleNamespace(ReferenceRunner=runner)
        return real(name, *a, **kw)

    monkeypatch.setattr(importlib, "import_module", fake_import)


@pytest.fixture
def fake_runner(monkeypatch):
    """executor.run starts this class as the model runner (a fresh log per test)."""
    runner = type("Runner", (FakeRunner,), {"log": [], "fail_on": set(), "compile_on": {}})
    start_as_model_runner(monkeypatch, runner)
    return runner


def execute(tmp_path, capsys, *extra, plan=TWO_STAGES, engine=TINY):
    out = tmp_path / "r.json"
    code, stdout, err = run_cli([plan, "--engine", engine, "--backend", "all=null", "--no-progress",
                                 "--report", str(out), *extra], capsys)
    return code, load_report(out), stdout, err


def trail(log) -> list:
    """The calls in order, batch calls by stage, repeats collapsed."""
    out = []
    for entry in log:
        item = entry[1].split("/")[0] if entry[0] in ("execute", "sample") else entry[0]
        if not out or out[-1] != item:
            out.append(item)
    return out


def test_each_batch_stage_runs_inside_the_scope_and_a_failure_does_not_leak_it(tmp_path, capsys, fake_runner):
    failing = "warmup_kernels/decode-1"
    code, rep, stdout, _ = execute(tmp_path, capsys, "--inject-failure", failing, "--on-error", "continue")
    assert code == 1 and by_id(rep)[failing]["status"] == "failed"
    assert all(s["status"] == "ok" for s in rep["steps"] if s["id"] != failing), "the next stages ran"
    calls = [e for e in fake_runner.log if e[0] in ("execute", "sample")]
    assert calls and all(in_scope for _, _, in_scope in calls)
    # One scope per batch stage, exited before the next stage starts; none around the capture.
    expected = ["init", "capture"]
    for stage in BATCH_STAGES:
        expected += ["enter", stage, "exit"]
    assert trail(fake_runner.log) == expected + ["close"]


def test_a_runner_failure_exits_the_scope_and_stops(tmp_path, capsys, fake_runner):
    fake_runner.fail_on = {"warmup_kernels/prefill"}
    code, rep, _, _ = execute(tmp_path, capsys)
    steps = by_id(rep)
    assert code == 1 and "fake failure" in steps["warmup_kernels/prefill"]["error"]
    assert steps["warmup_one_request/cleanup"]["status"] == "skipped"
    assert trail(fake_runner.log) == ["init", "capture", "enter", "warmup_kernels", "exit", "close"]


def test_ctrl_c_in_a_batch_stage_exits_the_scope(tmp_path, capsys, fake_runner):
    code, rep, _, _ = execute(tmp_path, capsys, "--inject-failure", "warmup_kernels/decode-1=interrupt")
    assert code == 130 and rep["interrupted"]
    assert trail(fake_runner.log) == ["init", "capture", "enter", "warmup_kernels", "exit", "close"]


def test_a_runner_without_warmup_scope_runs_as_before(tmp_path, capsys, fake_runner):
    fake_runner.warmup_scope = None  # an adapter for another engine may not have one
    code, rep, _, _ = execute(tmp_path, capsys)
    assert code == 0 and rep["counts"]["ok"] == len(rep["steps"])
    assert "enter" not in trail(fake_runner.log)


@pytest.mark.parametrize("flag", ["--dry-run", "--runner=none"])
def test_verify_trace_needs_the_runner(tmp_path, capsys, flag):
    code, rep, _, err = execute(tmp_path, capsys, "--verify-trace", "3", flag)
    assert code == 2 and rep["status"] == "invalid input"
    assert "--verify-trace" in err and "--runner none" in rep["error"]


def test_verify_trace_runs_on_the_same_runner_after_the_seal_then_closes_it(tmp_path, capsys, fake_runner):
    pytest.importorskip("triton")
    fake_runner.compile_on = {"trace/step-1": "_paged_decode_attention_kernel"}
    code, rep, stdout, _ = execute(tmp_path, capsys, "--verify-trace", "4", "--verify-seed", "3")
    trace = rep["verify_trace"]
    assert code == 1 and rep["status"] == "failed", "a compile during the trace fails the run"
    assert trace["steps"] == 4 and trace["seed"] == 3 and trace["config"]["num_steps"] == 4
    assert trace["compiles"] == 1 and trace["compiles_by_family"] == {"attention": 1}
    assert [e["step"] for e in trace["post_seal_events"]] == ["trace/step-1"]
    assert [s["step"] for s in trace["steps_with_compiles"]] == [1]
    assert len(trace["latency_ms"]) == 4 and trace["p50_ms"] <= trace["p99_ms"] <= trace["max_ms"]
    assert trace["runner_stats"] == {"samples": 4} and trace["error"] is None
    assert "verify-trace: 4 serving-trace steps (seed 3): 1 post-seal compiles (attention 1)" in stdout
    assert "post-seal: trace/step-1: _paged_decode_attention_kernel" in stdout
    log = fake_runner.log
    assert [e for e in log if e[0] == "init"] == [("init",)], "one runner for the plan and the trace"
    trace_calls = [i for i, e in enumerate(log) if e[0] in ("execute", "sample") and e[1].startswith("trace/")]
    assert len(trace_calls) == 8 and not any(log[i][2] for i in trace_calls), "the trace runs outside the scope"
    assert log.index(("exit",)) < trace_calls[0] and trace_calls[-1] < log.index(("close",)) == len(log) - 1


def test_verify_trace_on_the_reference_runner(tmp_path, capsys, kernel_device, monkeypatch):
    """The tiny engine: the plan's batch steps and then 4 trace steps on the reference runner."""
    monkeypatch.setenv("WARMUP_KERNEL_CONFIG_DIR", str(tmp_path / "tables"))
    out = tmp_path / "r.json"
    code, stdout, _ = run_cli([TINY_REFERENCE, "--engine", RUNNER_TINY, "--device", kernel_device,
                               "--verify-trace", "4", "--no-progress", "--report", str(out)], capsys)
    rep = load_report(out)
    trace = rep["verify_trace"]
    assert all(s["status"] == "ok" for s in rep["steps"])
    assert trace["steps"] == 4 and trace["error"] is None and len(trace["latency_ms"]) == 4
    assert 0 < trace["first_step_ms"] and 0 < trace["p50_ms"] <= trace["p99_ms"] <= trace["max_ms"]
    assert sum(trace["kinds"].values()) == 4 and trace["runner_stats"]["samples"] == 4
    assert "verify-trace: 4 serving-trace steps" in stdout
    if kernel_device == "cpu":  # the interpreter compiles nothing
        assert code == 0 and trace["compiles"] == 0
    else:
        assert code == (1 if trace["compiles"] else 0)
