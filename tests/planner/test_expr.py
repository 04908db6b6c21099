"""The plan expression language: what it computes and everything it refuses."""

import pytest

from planner.plan.expr import ExprError, cdiv, evaluate, last_power_of_2, next_power_of_2, round_up

NAMES = {"max_num_batched_tokens": 8192, "max_model_len": 4096, "num_speculative_tokens": 2,
         "runner": "generate", "is_last_pp_rank": True}


@pytest.mark.parametrize("text,value", [
    ("2 + num_speculative_tokens", 4),
    ("min(max_num_batched_tokens, max_model_len, 64)", 64),
    ("max(1, (1000 - 1) // 3)", 333),
    ("cdiv(17, 16)", 2),
    ("round_up(17, 16)", 32),
    ("round_down(17, 16)", 16),
    ("next_power_of_2(17)", 32),
    ("last_power_of_2(17)", 16),
    ("-3 % 2", 1),
    ("1 if num_speculative_tokens > 0 else 0", 1),
    ("runner == 'pooling'", False),
    ("not is_last_pp_rank or 3 > 2", True),
    ("1 < 2 < 3", True),
    ("1 < 3 < 2", False),
    ("true and false", False),
    (7, 7),
    (True, True),
])
def test_evaluates(text, value):
    assert evaluate(text, NAMES) == value


@pytest.mark.parametrize("text,message", [
    ("__import__('os')", "unknown function"),
    ("open('x')", "unknown function"),
    ("max_num_batched_tokens.bit_length()", "not allowed"),
    ("[1, 2][0]", "not allowed"),
    ("lambda: 1", "not allowed"),
    ("8192 / 2", "use // or cdiv"),
    ("2 ** 64", "operator ** is not allowed"),
    ("1 << 3", "operator << is not allowed"),
    ("unknown_name + 1", "unknown name 'unknown_name'"),
    ("1 // 0", "division by zero"),
    ("cdiv(4, 0)", "division by zero"),
    ("min()", "takes at least 1"),
    ("cdiv(1)", "takes 2"),
    ("min(x=1)", "keyword"),
    ("1.5 + 1", "literal 1.5 is not allowed"),
    ("runner + 1", "needs an integer"),
    ("runner < 'a'", "strings can only be compared"),
    ("1 +", "invalid expression"),
    ("x := 3", "invalid expression"),
    ("(" * 300 + "1" + ")" * 300, "nested"),
    ("9" * 30 + " * 9" * 10, "out of range"),
    ("1" * 1001, "longer than"),
    (1.5, "expected an integer or an expression"),
    (None, "expected an integer or an expression"),
])
def test_refuses(text, message):
    with pytest.raises(ExprError, match=message.replace("(", r"\(").replace("*", r"\*")):
        evaluate(text, NAMES)


def test_helpers_match_vllm_definitions():
    assert [cdiv(n, 16) for n in (1, 16, 17)] == [1, 1, 2]
    assert round_up(0, 128) == 0 and round_up(1, 128) == 128
    assert next_power_of_2(1) == 1 and next_power_of_2(64) == 64
    assert last_power_of_2(8192) == 8192 and last_power_of_2(8191) == 4096
