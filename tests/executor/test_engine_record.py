"""The engine record crosses the executor's boundary as the planner built it (issue 36 item 2):
`warmup execute` loads the engine once, and the model runner, the serving trace and the tables
read that one planner.engine.facts.EngineFacts; nothing in the run builds it again."""

from __future__ import annotations

import sys

import pytest
from execlib import TINY, load_report, run_cli

from planner.engine import facts as facts_module
from planner.engine.facts import EngineFacts
from test_runner_integration import TWO_STAGES, FakeRunner, start_as_model_runner


@pytest.fixture
def builds(monkeypatch) -> list:
    """The engine records built while the test runs: every module's name for the builder counts."""
    original, built = facts_module.engine_facts, []

    def counting(data: dict) -> EngineFacts:
        record = original(data)
        built.append(record)
        return record

    for module in list(sys.modules.values()):
        if getattr(module, "engine_facts", None) is original:
            monkeypatch.setattr(module, "engine_facts", counting)
    return built


@pytest.fixture
def runner_engines(monkeypatch) -> list:
    """The engine each model runner the run starts is given (a fake runner: no torch needed)."""
    given: list = []

    class Runner(FakeRunner):
        log: list = []
        fail_on: set = set()
        compile_on: dict = {}

        def __init__(self, engine, device="cuda"):
            given.append(engine)
            super().__init__(engine, device)

    start_as_model_runner(monkeypatch, Runner)
    return given


def test_a_run_builds_the_engine_record_once_and_the_runner_and_trace_read_it(tmp_path, capsys, builds,
                                                                               runner_engines):
    pytest.importorskip("triton")  # the JIT monitor of a run with a runner
    out = tmp_path / "r.json"
    code, _, err = run_cli([TWO_STAGES, "--engine", TINY, "--backend", "all=null", "--no-progress",
                            "--verify-trace", "3", "--report", str(out)], capsys)
    assert code == 0, err
    assert load_report(out)["verify_trace"]["steps"] == 3, "the trace ran on the record"
    assert len(builds) == 1, f"the engine record was built {len(builds)} times in one run"
    assert len(runner_engines) == 1 and runner_engines[0] is builds[0], "the runner got the planner's record"


def test_a_dry_run_builds_the_engine_record_once(tmp_path, capsys, builds):
    code, _, err = run_cli([TWO_STAGES, "--engine", TINY, "--dry-run", "--no-progress",
                            "--report", str(tmp_path / "r.json")], capsys)
    assert code == 0, err
    assert len(builds) == 1
