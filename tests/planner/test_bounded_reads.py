"""Saved plans are bounded before anything is built from them, and the tool reads what it writes.

Issue 19: a 20-byte run such as "1..99999999999999" in a saved plan was expanded before any bound
applied (MemoryError, exit 3); a list over 2^20 values validated; a plan over 1 MiB written by
`warmup plan` could not be checked, diffed, validated or executed.
"""

import json

import pytest

from planner import yamlio
from planner.cli import main
from planner.limits import MAX_VALUES_PER_LIST

ENGINE = "plans/engines/llama-3.1-8b-fp8-h100.yaml"
README_PLAN = """name: my-warmup
extends: vllm
stages:
  - name: deep_gemm
    with: {mode: full}
  - name: flashinfer_autotune
    enabled: false
  - name: attention_extra
    kind: prefill_attention
    when: device_capability >= 90
    with:
      num_tokens: [1, 16, "min(max_num_batched_tokens, max_model_len, 64)"]
"""


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved plan (YAML) of the vllm plan for the Llama engine, and its text."""
    path = tmp_path_factory.mktemp("saved") / "plan.yaml"
    assert main(["plan", "vllm", "-e", ENGINE, "-o", str(path)]) == 0
    return path, path.read_text()


def with_m_values(tmp_path, text: str, items: str, name="bad.yaml"):
    """The saved plan with `items` put first in the first step's m_values."""
    head = "m_values: [1, 2, 4, 8, 16,"
    assert head in text
    path = tmp_path / name
    path.write_text(text.replace(head, f"m_values: [{items}, 1, 2, 4, 8, 16,", 1))
    return str(path)


@pytest.mark.parametrize("items,message", [
    ('"1..99999999999999"', "run '1..99999999999999' makes a list of 99,999,999,999,999 values, more than the "
                            "limit of 1,048,576"),
    ('"1..600000", "1..600000"', "run '1..600000' makes a list of 1,200,000 values"),
    ('"1..5/0"', "run '1..5/0': expected a..b or a..b/s with a <= b, s >= 1"),
    ('"9..1"', "run '9..1': expected"),
    ('"1..10/4"', "run '1..10/4': expected"),
])
@pytest.mark.parametrize("command", ["check", "validate", "diff"])
def test_a_run_is_measured_before_it_is_expanded(tmp_path, capsys, saved, command, items, message):
    path = with_m_values(tmp_path, saved[1], items)
    argv = {"check": ["check", path], "validate": ["validate", path], "diff": ["diff", str(saved[0]), path]}
    code, out, err = run(capsys, *argv[command])
    assert code == 2 and out == ""
    assert err.startswith(f"warmup: error: {path}:32: steps[0].m_values: ") and message in err, err
    assert err.count("\n") == 1


def test_a_plain_list_over_the_limit_is_refused(tmp_path, capsys, saved):
    # As JSON, the way `warmup plan -f json` writes every value: 2^20 + 1 values in one list.
    doc = json.loads(json.dumps(yamlio.decompress(yamlio.load_text(saved[1], "x").data)))
    doc["steps"][0]["m_values"] = list(range(1, MAX_VALUES_PER_LIST + 2))
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc, separators=(",", ":")))
    code, _, err = run(capsys, "validate", str(path))
    assert code == 2 and "steps[0].m_values: a list of 1,048,577 values, more than the limit of 1,048,576" in err


def test_runs_are_bounded_across_the_whole_plan(tmp_path, capsys, saved, monkeypatch):
    monkeypatch.setattr(yamlio, "MAX_TOTAL_VALUES", 1000)  # the plan's 2^23, scaled down
    path = with_m_values(tmp_path, saved[1], '"100000..100999"')
    code, _, err = run(capsys, "check", path)
    assert code == 2 and "takes the plan past 1,000 values in runs" in err


@pytest.mark.parametrize("text,message", [
    ('{"format":"warmup-expanded-plan/v2","plan":"a","plan":"b"}', "invalid JSON: duplicate key 'plan'"),
    ('{"format":"warmup-expanded-plan/v2","x":NaN}', ":1: x: NaN is not a finite number"),
    ('{"format":"warmup-expanded-plan/v2","x":' + "[" * 100 + "]" * 100 + "}", "nested deeper than 64 levels"),
    ('{"format":"warmup-expanded-plan/v2","x":' + "[" * 100000 + "]" * 100000 + "}", "invalid JSON: nested too"),
    ('{"format":"warmup-expanded-plan/v2",', "invalid JSON: Expecting property name"),
])
def test_json_plans_are_held_to_the_yaml_rules(tmp_path, capsys, text, message):
    path = tmp_path / "p.json"
    path.write_text(text)
    code, _, err = run(capsys, "validate", str(path))
    assert code == 2 and message in err and err.count("\n") == 1, err


@pytest.fixture(scope="module")
def big_plans(tmp_path_factory):
    """The README's example plan for an engine with 65,536 batched tokens: over the old 1 MiB."""
    folder = tmp_path_factory.mktemp("big")
    (folder / "my-plan.yaml").write_text(README_PLAN)
    engine = open(ENGINE).read().replace("max_num_batched_tokens: 8192", "max_num_batched_tokens: 65536")
    (folder / "engine.yaml").write_text(engine)
    for fmt in ("yaml", "json"):
        assert main(["plan", str(folder / "my-plan.yaml"), "-e", str(folder / "engine.yaml"), "-f", fmt,
                     "-o", str(folder / f"plan.{fmt}")]) == 0
    return folder


def test_what_plan_writes_check_diff_validate_and_execute_read(big_plans, capsys):
    plan_json, engine, source = (str(big_plans / n) for n in ("plan.json", "engine.yaml", "my-plan.yaml"))
    assert (big_plans / "plan.json").stat().st_size > 1 << 20  # the old limit of every input
    assert run(capsys, "check", plan_json, "-e", engine)[0] == 0
    assert run(capsys, "check", str(big_plans / "plan.yaml"), "-e", engine)[0] == 0
    assert run(capsys, "diff", str(big_plans / "plan.yaml"), plan_json)[0] == 0  # same steps, both formats
    code, out, _ = run(capsys, "validate", plan_json)
    assert code == 0 and out == f"{plan_json}: ok (expanded plan)\n"
    code, out, _ = run(capsys, "execute", plan_json, "-e", engine, "--source-plan", source, "--dry-run",
                       "--no-progress")
    assert code == 0 and "status: ok (exit 0)" in out


def test_plan_refuses_to_write_what_the_readers_would_refuse(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(yamlio, "MAX_EXPANDED_PLAN_BYTES", 100_000)
    out = tmp_path / "p.json"
    code, stdout, err = run(capsys, "plan", "vllm", "-e", ENGINE, "-f", "json", "-o", str(out))
    assert code == 2 and stdout == "" and not out.exists()
    assert "the expanded plan would be 0.2 MiB, over the 0.1 MiB limit for expanded plans" in err, err


def test_an_expanded_plan_over_the_read_limit_says_so(tmp_path, capsys, saved, monkeypatch):
    monkeypatch.setattr(yamlio, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr(yamlio, "MAX_EXPANDED_PLAN_BYTES", 200_000)
    code, _, err = run(capsys, "check", str(saved[0]))
    assert code == 2 and err == f"warmup: error: {saved[0]}: the file is over the 0.2 MiB limit for expanded plans\n"
    small = tmp_path / "small.yaml"  # between the two limits: an expanded plan is read, a plan is not
    small.write_text(saved[1][:2000])
    assert "limit" not in run(capsys, "check", str(small))[2]
    small.write_text("name: x\n" + "#" * 2000 + "\nstages: []\n")
    code, _, err = run(capsys, "check", str(small), "-e", ENGINE)
    assert code == 2 and "0 MiB is over the 0 MiB limit for plans, engine configs and config.json files" in err
