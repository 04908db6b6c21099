"""planner.errors.one_line: the one way any text becomes one line (errors, job failures, logs)."""

from planner.errors import PlanError, one_line


def test_one_line_joins_lines_and_cuts_with_an_ellipsis():
    assert one_line("Traceback\n  File x\n\tValueError: bad") == "Traceback File x ValueError: bad"
    assert one_line("x" * 10, 6) == "xxx..." and one_line("short", 6) == "short"
    assert one_line(ValueError("a\nb")) == "a b"
    assert str(PlanError("first\nsecond", file="f.yaml", line=3)) == "f.yaml:3: first second"
