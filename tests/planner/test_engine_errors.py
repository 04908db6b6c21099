"""An error caused by an engine value names the engine file, line and field (issue 10).

Through the command line: exit 2, exactly one line, no traceback. Three paths:
the schema's bounds refuse absurd sizes at the engine file itself; a value within the
bounds that still makes a plan parameter absurd is blamed on the engine fields behind
it, with the plan stage as context; a parameter that uses no engine name is blamed on
the plan, as before.
"""

import pytest

from planner.cli import main
from planner.engine.config import load_engine
from planner.engine.names import EXPRESSION_FIELDS
from planner.plan.expr import trace
from planner.resources import resolve

ENGINE = "plans/engines/llama-3.1-8b-fp8-h100.yaml"
GOOD_ENGINE = open(ENGINE).read()
VLLM = resolve("vllm", "plan")


def engine_file(tmp_path, *edits) -> str:
    """The shipped Llama engine with text edits; each `old` must occur exactly once."""
    text = GOOD_ENGINE
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "my-engine.yaml"
    path.write_text(text)
    return str(path)


def plan_file(tmp_path, warmup_kernels_params: str) -> str:
    """A plan that extends vllm and overrides parameters of its warmup_kernels stage (line 6 on)."""
    path = tmp_path / "my-plan.yaml"
    path.write_text("name: my-plan\nextends: vllm\nstages:\n  - name: warmup_kernels\n    with:\n"
                    + "".join(f"      {line}\n" for line in warmup_kernels_params.splitlines()))
    return str(path)


def plan_error(capsys, plan: str, engine: str) -> str:
    """The one line `warmup plan` prints for bad input, without the 'warmup: error: ' prefix."""
    code = main(["plan", plan, "--engine", engine])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("warmup: error: ") and err.count("\n") == 1, err
    return err[len("warmup: error: "):-1]


# 1. The schema's bounds catch the common mistakes at the engine file's own line.

@pytest.mark.parametrize("old,new,message", [
    ("max_num_batched_tokens: 8192", "max_num_batched_tokens: 1000000000000",
     ":26: scheduler.max_num_batched_tokens: 1000000000000 is greater than the maximum of 16777216"),
    ("max_model_len: 131072", "max_model_len: 100000000",
     ":6: model.max_model_len: 100000000 is greater than the maximum of 16777216"),
    ("max_num_seqs: 1024", "max_num_seqs: 1000000",
     ":25: scheduler.max_num_seqs: 1000000 is greater than the maximum of 65536"),
    ("num_blocks: 31744", "num_blocks: 3174400000",
     ":21: kv_cache.num_blocks: 3174400000 is greater than the maximum of 16777216"),
    ("vocab_size: 128256", "vocab_size: 1282560000",
     ":5: model.vocab_size: 1282560000 is greater than the maximum of 2097152"),
])
def test_schema_bounds_refuse_absurd_engine_sizes(tmp_path, capsys, old, new, message):
    engine = engine_file(tmp_path, (old, new))
    assert plan_error(capsys, "vllm", engine) == engine + message


# 2. A value within the bounds that makes a plan parameter absurd: blamed on the engine.

def test_refused_minimum_names_the_engine_fields_and_the_plan_stage(tmp_path, capsys):
    # 1 // prompt_len (2 + num_speculative_tokens) leaves no request for the prefill batch.
    engine = engine_file(tmp_path, ("max_num_seqs: 1024", "max_num_seqs: 1"),
                         ("max_num_batched_tokens: 8192", "max_num_batched_tokens: 1"))
    assert plan_error(capsys, "vllm", engine) == (
        f"{engine}:26: scheduler.max_num_batched_tokens = 1, speculative.num_speculative_tokens = 0 (line 29): "
        f"in the warmup_kernels stage ({VLLM}:62), num_reqs must be >= 1, got 0 "
        "(from 'min(max_num_seqs, max_num_batched_tokens // max(prompt_len, 1 + num_speculative_tokens), "
        "max(1, (num_blocks - 1) // max_blocks_per_req))')")


def test_refused_count_names_every_engine_field_of_the_expression(tmp_path, capsys):
    plan = plan_file(tmp_path, "num_reqs: max_num_seqs * max_model_len")
    assert plan_error(capsys, plan, ENGINE) == (
        f"{ENGINE}:6: model.max_model_len = 131072, scheduler.max_num_seqs = 1024 (line 25): "
        f"in the warmup_kernels stage ({plan}:6), num_reqs gives the synthetic batch 134,217,728 entries, "
        "more than the limit of 65,536")


def test_a_default_engine_value_is_named_as_such(tmp_path, capsys):
    engine = engine_file(tmp_path, ("speculative:\n  method: none\n  num_speculative_tokens: 0\n", ""))
    plan = plan_file(tmp_path, "num_reqs: num_speculative_tokens")
    assert plan_error(capsys, plan, engine) == (
        f"{engine}:1: speculative.num_speculative_tokens = 0 (default): "
        f"in the warmup_kernels stage ({plan}:6), num_reqs must be >= 1, got 0 (from 'num_speculative_tokens')")


# 3. A parameter that uses no engine name is the plan's mistake, located in the plan as before.

@pytest.mark.parametrize("param,message", [
    ("num_reqs: 10000000", "the synthetic batch would have 10000000 entries, more than the limit of 65536; "
                           "this is almost certainly a mistake in the plan or the engine config"),
    ("num_reqs: 3 - 3", "must be >= 1, got 0 (from '3 - 3')"),
])
def test_plan_only_values_still_name_the_plan(tmp_path, capsys, param, message):
    plan = plan_file(tmp_path, param)
    assert plan_error(capsys, plan, ENGINE) == f"{plan}:6: stages[0].with.num_reqs: {message}"


# The pieces: which names a value came from, and which engine fields are behind a name.

@pytest.mark.parametrize("text,read", [
    ("min(a, b // 2)", {"b"}),                  # only min's winning argument
    ("max(a, b) + c", {"b", "c"}),
    ("min(a, c - 2)", {"a", "c"}),              # a tie keeps both
    ("a if c > 0 else b", {"a", "c"}),          # the condition and the branch taken
    ("cdiv(b, c)", {"b", "c"}),
    (7, set()),
])
def test_trace_reports_the_names_a_value_came_from(text, read):
    assert trace(text, {"a": 3, "b": 4, "c": 5})[1] == read


def test_every_expression_name_has_its_engine_fields():
    engine = load_engine(ENGINE)
    assert set(EXPRESSION_FIELDS) == set(engine.expression_names())
    for paths in EXPRESSION_FIELDS.values():
        for path in paths:
            value = engine.data
            for key in path:
                value = value[key]  # every path exists in a canonical engine


def test_a_misspelt_required_key_is_named_at_its_own_line(tmp_path, capsys):
    # issue 37: `schedular:` said only "'scheduler' is required", at the top of the file
    engine = engine_file(tmp_path, ("\nscheduler:", "\nschedular:"))
    line = GOOD_ENGINE.splitlines().index("scheduler:") + 1
    assert plan_error(capsys, "vllm", engine) == (
        f"{engine}:{line}: schedular: unknown key 'schedular': did you mean 'scheduler'? ('scheduler' is required)")
    far = engine_file(tmp_path, ("\nscheduler:", "\nbatching:"))  # nothing like it: the plain line
    assert plan_error(capsys, "vllm", far) == f"{far}:1: (top level): 'scheduler' is required"
