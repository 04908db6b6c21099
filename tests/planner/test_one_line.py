"""planner.errors.one_line: the one way any text becomes one line (errors, job failures, logs)."""

from planner.errors import PlanError, one_line


def test_one_line_joins_lines_and_cuts_with_an_ellipsis():
    assert one_line("Traceback\n  File x\n\tValueError: bad") == "Traceback File x ValueError: bad"
    assert one_line("x" * 10, 6) == "xxx..." and one_line("short", 6) == "short"
    assert one_line(ValueError("a\nb")) == "a b"
    assert str(PlanError("first\nsecond", file="f.yaml", line=3)) == "f.yaml:3: first second"


def test_one_pluraliser():
    """Issue 26 item 6: planner.words.count is the pluraliser; nothing writes its own."""
    import pathlib
    import re

    from planner.words import count

    assert (count(1, "step"), count(3, "step"), count(2, "entry", "entries")) == ("1 step", "3 steps", "2 entries")
    root = pathlib.Path(__file__).resolve().parents[2]
    ad_hoc = re.compile(r"""'s' if \S+ != 1|if len\(\w+\) == 1 else '\w+ies'|def plural\(""")
    found = [f"{p.relative_to(root)}:{i}" for folder in ("planner", "executor", "vllm_bridge", "kernel_model")
             for p in (root / folder).rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if ad_hoc.search(line)]
    assert found == []
