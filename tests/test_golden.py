"""Golden expanded plans: one per (built-in plan x shipped engine).

Regenerate with `pytest tests/test_golden.py --update-golden` and review the diff.
"""

import os

import pytest

from planner.resources import builtin_engines, builtin_plans

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
CASES = [(p, e) for p in builtin_plans() for e in builtin_engines()]


@pytest.fixture(autouse=True)
def _made_up_moe_tables(moe_tables):
    """The fused_moe steps of the goldens come from made-up tables (tests/factories.py), the same
    on every machine, vLLM installed or not."""


@pytest.mark.parametrize("plan,engine", CASES, ids=[f"{p}--{e}" for p, e in CASES])
def test_golden_plan(golden_plan, plan, engine):
    golden_plan(plan, engine, os.path.join(GOLDEN, f"{plan}--{engine}.yaml"))


def test_no_unused_golden_files():
    """A golden file nobody checks is a stale promise: every file must match a case."""
    expected = {f"{p}--{e}.yaml" for p, e in CASES}
    present = {f for f in os.listdir(GOLDEN) if f.endswith(".yaml")}
    assert present <= expected, f"unused golden files: {sorted(present - expected)}"
