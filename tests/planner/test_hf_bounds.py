"""`warmup engine --from-hf`: every size read is bounded at its key, and a model that does not fit
the GPU is refused with the numbers (issue 19).

Before: a num_hidden_layers of 10^30 ran out of memory after 90 s without a word, 10^7 took 95 s
and wrote an engine that validates; DeepSeek-V3 at TP8 on an H100 got num_blocks 16 and passed
every check, a configuration vLLM refuses.
"""

import json
import re

import pytest

from planner import limits
from planner.cli import main
from planner.schema import load_schema

HF = "tests/fixtures/hf"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def config(tmp_path, fixture: str, **changes) -> str:
    """The fixture's config.json with `changes`, one key a line (so that errors have lines)."""
    with open(f"{HF}/{fixture}.json", encoding="utf-8") as f:
        hf = json.load(f)
    hf.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf, indent=2))
    return str(path)


def line_of(path: str, key: str) -> int:
    text = open(path).read()
    return text.count("\n", 0, re.search(f'"{key}"', text).start()) + 1


@pytest.mark.parametrize("fixture,key,value,message", [
    ("llama-3.1-8b-instruct-fp8-block", "num_hidden_layers", 10 ** 30,
     "num_hidden_layers = 1000000000000000000000000000000 is over the bound of 4,096 (no model has more than"),
    ("llama-3.1-8b-instruct-fp8-block", "num_hidden_layers", 10 ** 7, "over the bound of 4,096"),
    ("llama-3.1-8b-instruct-fp8-block", "hidden_size", 10 ** 9, "hidden_size = 1000000000 is over the bound of "
                                                                "1,048,576"),
    ("llama-3.1-8b-instruct-fp8-block", "intermediate_size", 1 << 21, "over the bound of 1,048,576"),
    ("llama-3.1-8b-instruct-fp8-block", "vocab_size", 1 << 22, "vocab_size = 4194304 is over the bound of 2,097,152"),
    ("llama-3.1-8b-instruct-fp8-block", "max_position_embeddings", 1 << 25,
     "max_position_embeddings = 33,554,432 is over the bound of 16,777,216 tokens for max_model_len; pass "
     "--max-model-len"),
    ("mixtral-8x7b", "num_local_experts", 10 ** 6, "num_local_experts = 1000000 is over the bound of 16,384"),
    ("deepseek-v3", "kv_lora_rank", 10 ** 12, "kv_lora_rank = 1000000000000 is over the bound"),
    ("deepseek-v3", "n_routed_experts", 10 ** 5, "n_routed_experts = 100000 is over the bound of 16,384"),
    ("deepseek-v3", "first_k_dense_replace", 10 ** 9, "over the bound of 4,096"),
    ("llama-3.1-8b-instruct-fp8-block", "attn_logit_softcapping", "lots",
     "attn_logit_softcapping must be a finite number, got 'lots'"),
])
def test_every_size_read_is_bounded_at_its_key(tmp_path, capsys, fixture, key, value, message):
    path = config(tmp_path, fixture, **{key: value})
    out = tmp_path / "engine.yaml"
    code, stdout, err = run(capsys, "engine", "--from-hf", path, "--tp", "8" if "deepseek" in fixture else "2",
                            "--gpu", "H200", "-o", str(out))
    assert code == 2 and stdout == "" and not out.exists()
    located = f"warmup: error: {path}:{line_of(path, key)}: "
    assert err.startswith(located) and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("rope,message", [
    ({"factor": "big"}, "rope_scaling.factor must be a finite number, got 'big'"),
    ({"factor": 40, "mscale_all_dim": 1e308}, "rope_scaling gives a softmax scale of inf"),
])
def test_float_fields_are_numbers(tmp_path, capsys, rope, message):
    path = config(tmp_path, "deepseek-v3", rope_scaling={"type": "yarn", **rope})
    code, _, err = run(capsys, "engine", "--from-hf", path, "--tp", "8", "--gpu", "H200")
    assert code == 2 and message in err, err


@pytest.mark.parametrize("text,message", [
    ('{"vocab_size": ' + "9" * 5000 + "}", "invalid JSON: Exceeds the limit (4300 digits)"),
    ("[" * 100000 + "]" * 100000, "invalid JSON: nested too deeply"),
])
def test_json_that_python_refuses_is_exit_2(tmp_path, capsys, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    code, _, err = run(capsys, "engine", "--from-hf", str(path))
    assert code == 2 and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("flag,value,bound", [
    ("--num-blocks", 1 << 25, "16,777,216"), ("--max-num-seqs", 70000, "65,536"),
    ("--max-num-batched-tokens", 1 << 25, "16,777,216"), ("--block-size", 1 << 25, "16,777,216"),
    ("--tp", 10 ** 6, "65,536"),
])
def test_flags_are_bounded_as_the_fields_they_set(capsys, flag, value, bound):
    code, _, err = run(capsys, "engine", "--from-hf", f"{HF}/qwen3-8b.json", flag, str(value))
    assert code == 2 and f"{flag} {value} is over the bound of {bound}" in err, err


def test_the_bounds_are_the_engine_schemas():
    defs = load_schema("engine")["$defs"]
    assert defs["num_tokens"]["maximum"] == limits.MAX_TOKENS
    assert defs["num_seqs"]["maximum"] == limits.MAX_SEQS
    assert defs["num_blocks"]["maximum"] == limits.MAX_BLOCKS
    assert defs["vocab_size"]["maximum"] == limits.MAX_VOCAB


DEEPSEEK = f"{HF}/deepseek-v3.json"


def test_weights_that_do_not_fit_are_refused_with_the_numbers(tmp_path, capsys):
    out = tmp_path / "engine.yaml"
    code, stdout, err = run(capsys, "engine", "--from-hf", DEEPSEEK, "--tp", "8", "-o", str(out))
    assert code == 2 and stdout == "" and not out.exists()
    assert err == (f"warmup: error: {DEEPSEEK}: the weights do not fit: 79.3 GiB per rank against the 72.0 GiB "
                   "budget (90% of the H100's 80 GiB), which leaves no room for the KV cache; use more tensor "
                   "parallelism (--tp, now 8) or a GPU with more memory (--gpu), or pass --num-blocks with the count "
                   "your server reports; or --ignore-memory to write the engine config anyway\n")


def test_ignore_memory_warns_loudly_and_says_so_in_the_engine(tmp_path, capsys):
    out = tmp_path / "engine.yaml"
    code, _, err = run(capsys, "engine", "--from-hf", DEEPSEEK, "--tp", "8", "--ignore-memory", "-o", str(out))
    assert code == 0
    assert err.startswith("warmup: warning: the weights do not fit: 79.3 GiB per rank") and err.count("\n") == 1
    assert "writing num_blocks 10240 (one max_model_len request)" in err
    text = out.read_text()
    assert "  num_blocks: 10240\n" in text  # 163,840 tokens of max_model_len in blocks of 16 (FLASH_ATTN_MLA's)
    assert "--tp 8 --ignore-memory` from" in text and "vLLM would refuse this configuration" in text
    assert run(capsys, "validate", str(out))[0] == 0


def test_a_kv_cache_short_of_one_request_is_refused(tmp_path, capsys):
    # Fits at 163,840 tokens (the shipped engine); 2^24 tokens need 1,048,576 blocks of 16.
    path = config(tmp_path, "deepseek-v3", max_position_embeddings=1 << 24)
    code, _, err = run(capsys, "engine", "--from-hf", path, "--tp", "8", "--gpu", "H200")
    assert code == 2
    assert "the KV cache does not hold one request of max_model_len 16777216" in err
    assert "where one request needs 1048576 (vLLM refuses to start); lower --max-model-len to at most" in err
    code, out, _ = run(capsys, "engine", "--from-hf", path, "--tp", "8", "--gpu", "H200", "--max-model-len", "131072")
    assert code == 0 and "max_model_len: 131072" in out


def test_num_blocks_given_is_not_an_estimate(capsys):
    code, out, err = run(capsys, "engine", "--from-hf", DEEPSEEK, "--tp", "8", "--num-blocks", "4096")
    assert (code, err) == (0, "") and "  num_blocks: 4096\n" in out
