"""The golden-plan pytest plugin as a downstream project sees it: installed, loaded by entry point."""

import os

pytest_plugins = ["pytester"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST = """
def test_pinned(golden_plan):
    golden_plan("vllm", "{engine}", "golden/pinned.yaml")
"""


def make_project(pytester, engine="mixtral-8x7b-tp2-h100"):
    pytester.makepyfile(test_pinned=TEST.format(engine=os.path.join(ROOT, "plans", "engines", engine + ".yaml")))
    return pytester.path / "golden" / "pinned.yaml"


def test_missing_golden_fails(pytester):
    make_project(pytester)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*golden file golden/pinned.yaml is missing*--update-golden*"])


def test_update_then_pass_then_mismatch_shows_a_diff(pytester):
    golden = make_project(pytester)
    pytester.runpytest_subprocess("--update-golden").assert_outcomes(passed=1)
    assert golden.read_text().startswith("# warmup-planner expanded plan")
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    golden.write_text(golden.read_text().replace("num_scheduled_tokens: 2,", "num_scheduled_tokens: 3,", 1))
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expanded plan differs from golden/pinned.yaml*",
                                 "*-  - {req_id: _warmup_0_, num_scheduled_tokens: 3,*",
                                 "*+  - {req_id: _warmup_0_, num_scheduled_tokens: 2,*"])
    assert (golden.parent / "pinned.yaml.obtained").exists()


def test_a_golden_file_with_its_lines_reordered_fails(tmp_path):
    # issue 37: the order of a plan's steps is part of the plan; the check compares text, not line sets
    import pytest

    from planner.pytest_plugin import compare_golden, render_plan

    engine = os.path.join(ROOT, "plans", "engines", "mixtral-8x7b-tp2-h100.yaml")
    text = render_plan("vllm", engine)
    golden = tmp_path / "g.yaml"
    lines = text.splitlines(keepends=True)
    assert lines[3] != lines[4]
    golden.write_text("".join(lines[:3] + [lines[4], lines[3]] + lines[5:]))
    assert sorted(golden.read_text().splitlines()) == sorted(text.splitlines())  # the same lines
    with pytest.raises(pytest.fail.Exception, match="expanded plan differs"):
        compare_golden(text, str(golden), update=False)
    golden.write_text(text)
    compare_golden(text, str(golden), update=False)                             # the same text passes
