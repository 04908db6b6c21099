"""Expanded plans of format v1, as users have them committed (goldens, the base side of the
README's CI job), still load for `diff`, `check` and `execute`, converted on read: the same
plan in v1 and v2 is the same typed plan, and `warmup diff v1 v2` shows no change in steps.

The fixtures in tests/fixtures/v1/ are the v1 goldens of three plans as the last v1 planner
wrote them: DeepGEMM relax steps (each key with its first M), Triton exact GEMMs and attention
(max_m, max_tokens), and runner-kernel launches.
"""

from __future__ import annotations

import os

import pytest

from planner import api, cli
from planner.plan.expanded import FORMAT, FORMAT_V1
from planner.review import diff

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
V1 = os.path.join(HERE, "fixtures", "v1")
FIXTURES = sorted(f[:-5] for f in os.listdir(V1) if f.endswith(".yaml"))


def pair(name: str):
    plan, engine = name.split("--")
    return api.load_expanded(os.path.join(V1, name + ".yaml")), api.expand(api.load_plan(plan),
                                                                            api.load_engine(engine))


@pytest.mark.parametrize("name", FIXTURES)
def test_a_v1_file_reads_as_the_same_typed_plan(name):
    old, new = pair(name)
    assert old.digest == new.digest and old.steps == new.steps
    assert old.to_dict()["format"] == FORMAT and FORMAT_V1 != FORMAT


@pytest.mark.parametrize("name", FIXTURES)
def test_diff_v1_against_v2_reports_no_change_in_steps(name, tmp_path, capsys):
    old, new = pair(name)
    assert diff.diff_plans(old, new).equal
    plan, engine = name.split("--")
    v2 = tmp_path / "v2.yaml"
    assert cli.main(["plan", plan, "--engine", engine, "-o", str(v2)]) == 0
    assert cli.main(["diff", os.path.join(V1, name + ".yaml"), str(v2)]) == 0
    assert "No changes. The expanded steps are identical." in capsys.readouterr().out


@pytest.mark.parametrize("name", FIXTURES)
def test_check_and_validate_a_v1_file(name, capsys):
    _, engine = name.split("--")
    path = os.path.join(V1, name + ".yaml")
    assert cli.main(["check", path, "--engine", engine]) == 0  # fresh: the same inputs
    assert cli.main(["validate", path]) == 0
    assert f"{path}: ok (expanded plan)" in capsys.readouterr().out


def test_execute_a_v1_file_dry_run(tmp_path):
    pytest.importorskip("executor")
    from executor.cli import main

    report = tmp_path / "report.json"
    path = os.path.join(V1, "triton--qwen3-30b-a3b-fp8-h100.yaml")
    assert main(["execute", path, "--dry-run", "--no-progress", "--report", str(report)]) == 0
