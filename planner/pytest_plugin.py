"""pytest plugin: pin expanded warmup plans as golden files.

Installed with the package (entry point ``pytest11``), so a serving project can
write::

    def test_our_warmup(golden_plan):
        golden_plan("plans/ours.yaml", "engines/prod.yaml", "tests/golden/ours--prod.yaml")

A missing golden file fails, a mismatch fails with a unified diff (and leaves the
new output next to it as ``.obtained``), and ``pytest --update-golden`` rewrites
the files from the current planner.
"""

from __future__ import annotations

import difflib
import os

import pytest

from . import api
from .render import RENDERERS

MAX_DIFF_LINES = 80


def pytest_addoption(parser):
    group = parser.getgroup("warmup-planner")
    group.addoption("--update-golden", action="store_true", default=False,
                    help="rewrite golden warmup plans from the current planner instead of comparing")


def render_plan(plan: str, engine: str, fmt: str = "yaml") -> str:
    """The expanded plan text, exactly as `warmup plan PLAN --engine ENGINE -f FMT` writes it."""
    return RENDERERS[fmt](api.expand(api.load_plan(plan), api.load_engine(engine)))


def compare_golden(obtained: str, golden_path: str, update: bool) -> None:
    """Fail (pytest.fail) unless `obtained` equals the golden file; write it when `update`."""
    obtained_path = golden_path + ".obtained"
    if update:
        os.makedirs(os.path.dirname(os.path.abspath(golden_path)), exist_ok=True)
        with open(golden_path, "w", encoding="utf-8") as f:
            f.write(obtained)
        if os.path.exists(obtained_path):
            os.unlink(obtained_path)
        return
    if not os.path.exists(golden_path):
        pytest.fail(f"golden file {golden_path} is missing; run pytest --update-golden to create it",
                    pytrace=False)
    with open(golden_path, encoding="utf-8") as f:
        expected = f.read()
    if expected == obtained:
        if os.path.exists(obtained_path):
            os.unlink(obtained_path)
        return
    with open(obtained_path, "w", encoding="utf-8") as f:
        f.write(obtained)
    diff = list(difflib.unified_diff(expected.splitlines(), obtained.splitlines(), golden_path,
                                     obtained_path, lineterm="", n=2))
    shown = "\n".join(diff[:MAX_DIFF_LINES])
    more = f"\n... {len(diff) - MAX_DIFF_LINES} more diff lines" if len(diff) > MAX_DIFF_LINES else ""
    pytest.fail(f"expanded plan differs from {golden_path} (new output in {obtained_path}; "
                f"run pytest --update-golden if the change is intended):\n{shown}{more}", pytrace=False)


@pytest.fixture
def golden_plan(request):
    """Callable (plan, engine, golden_path, fmt='yaml') that checks a plan against its golden file."""
    update = request.config.getoption("--update-golden")

    def check(plan: str, engine: str, golden_path: str, fmt: str = "yaml") -> str:
        text = render_plan(plan, engine, fmt)
        compare_golden(text, golden_path, update)
        return text

    return check
