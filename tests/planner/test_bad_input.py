"""Every class of bad input: exit 2, one short line naming file, line and YAML path, no traceback."""

import os
import re
from pathlib import Path

import pytest

from planner.cli import main

ENGINE = "plans/engines/llama-3.1-8b-fp8-h100.yaml"
GOOD_ENGINE = open(ENGINE).read()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def bad_engine(tmp_path, text):
    path = tmp_path / "engine.yaml"
    path.write_text(text)
    return str(path)


def assert_one_line_error(code, err, *fragments):
    assert code == 2
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


@pytest.mark.parametrize("edit,fragments", [
    # YAML syntax
    (lambda t: t.replace("model:", "model: [", 1), ["invalid YAML"]),
    # schema violation: missing required key
    (lambda t: t.replace("  vocab_size: 128256\n", ""), [":3: model: 'vocab_size' is required"]),
    # wrong type
    (lambda t: t.replace("max_num_seqs: 1024", "max_num_seqs: lots"),
     [":25: scheduler.max_num_seqs: expected integer, got str 'lots'"]),
    # unknown key
    (lambda t: t.replace("  max_num_seqs: 1024", "  max_num_seqs: 1024\n  max_num_sequences: 3"),
     [":26: scheduler.max_num_sequences: unknown key 'max_num_sequences' (did you mean 'max_num_seqs'?); "
      "allowed: max_num_batched_tokens, max_num_seqs"]),
    # duplicated key
    (lambda t: t.replace("  max_num_seqs: 1024", "  max_num_seqs: 1024\n  max_num_seqs: 8"),
     [":26: scheduler.max_num_seqs: duplicate key 'max_num_seqs'"]),
    # zero and negative sizes
    (lambda t: t.replace("num_blocks: 31744", "num_blocks: 0"), ["kv_cache.num_blocks", "minimum of 1"]),
    (lambda t: t.replace("block_size: 16", "block_size: -16"), ["kv_cache.groups[0].block_size"]),
    # impossible combinations
    (lambda t: t.replace("pipeline_rank: 0", "pipeline_rank: 1"),
     ["parallel.pipeline_rank: pipeline_rank 1 must be < pipeline_parallel_size 1"]),
    (lambda t: t.replace("num_speculative_tokens: 0", "num_speculative_tokens: 2"),
     ["speculative: method 'none' goes with num_speculative_tokens 0"]),
    (lambda t: t.replace("max_num_batched_tokens: 8192", "max_num_batched_tokens: 512"),
     ["max_num_batched_tokens (512) must be >= max_num_seqs (1024)"]),
    (lambda t: t.replace("num_kv_heads: 8", "num_kv_heads: 7"), ["model.attention[0].num_kv_heads"]),
    # YAML features a config must not use
    (lambda t: t + "extra: &a [1]\nmore: *a\n", ["anchors and aliases are not allowed"]),
    (lambda t: t.replace("name: llama", "name: !!python/object:os.system llama"), ["unsupported YAML tag"]),
    (lambda t: "- just\n- a list\n", ["expected a mapping"]),
    (lambda t: "", ["empty file"]),
])
def test_bad_engine(tmp_path, capsys, edit, fragments):
    path = bad_engine(tmp_path, edit(GOOD_ENGINE))
    code, out, err = run(capsys, "plan", "vllm", "--engine", path)
    assert_one_line_error(code, err, path, *fragments)
    assert out == ""


def test_alias_bomb_is_refused_quickly(tmp_path, capsys):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]" for i in range(1, 30)]
    path = bad_engine(tmp_path, "\n".join(lines) + "\n")
    code, _, err = run(capsys, "validate", path)
    assert_one_line_error(code, err, "anchors and aliases are not allowed")


@pytest.mark.parametrize("content,fragment", [
    (b"\x00\x01\x02binary", "binary data"),
    (b"\xff\xfe\xfd not utf-8", "not UTF-8"),
    (b"x: 1\n" * 300000, "1.4 MiB is over the 1 MiB limit for plans, engine configs and config.json files"),
])
def test_garbage_files(tmp_path, capsys, content, fragment):
    path = tmp_path / "garbage.yaml"
    path.write_bytes(content)
    code, _, err = run(capsys, "validate", str(path))
    assert_one_line_error(code, err, str(path), fragment)


def test_directory_and_missing_file(tmp_path, capsys):
    code, _, err = run(capsys, "plan", "vllm", "--engine", str(tmp_path) + "/")
    assert_one_line_error(code, err, "is a directory")
    code, _, err = run(capsys, "plan", "vllm", "--engine", str(tmp_path / "nope.yaml"))
    assert_one_line_error(code, err, "nope.yaml: no such file")
    code, _, err = run(capsys, "plan", "no-such-plan", "--engine", ENGINE)
    assert_one_line_error(code, err, "no built-in plan named 'no-such-plan'", "built-in: ")


@pytest.mark.parametrize("value,fragment", [
    ("'prompt_len + bogus'", "unknown name 'bogus'"),
    ("'__import__(\"os\").system(\"true\")'", "attribute access is not allowed"),
    ("'num_blocks / 2'", "operator / is not allowed"),
    ("'1 if'", "invalid expression"),
    ("'0 - 5'", "must be >= 1, got -5"),
    ("[1, 2]", "expected integer or string or boolean"),
])
def test_bad_plan_expressions(tmp_path, capsys, value, fragment):
    plan = tmp_path / "p.yaml"
    plan.write_text(f"name: p\nextends: vllm\nstages:\n  - name: warmup_kernels\n    with:\n      decode_len: {value}\n")
    code, _, err = run(capsys, "plan", str(plan), "--engine", ENGINE)
    assert_one_line_error(code, err, f"{plan}:6: stages[0].with.decode_len", fragment)


@pytest.mark.parametrize("text,fragment", [
    ("name: p\nstages:\n  - name: a\n    kind: warp_drive\n", "stages[0].kind: expected one of"),
    ("name: p\nstages:\n  - name: a\n    kind: deep_gemm\n    with: {mode: fastest}\n",
     "stages[0].with.mode: expected one of 'relax', 'full'"),
    ("name: p\nstages:\n  - name: a\n    kind: deep_gemm\n    with: {modes: full}\n",
     ":5: stages[0].with.modes: unknown key 'modes' (did you mean 'mode'?); allowed: block_m,"),
    ("name: p\nstagess: []\n", ":2: stagess: unknown key 'stagess' (did you mean 'stages'?)"),
    ("name: p\nstages:\n  - name: a\n    kind: deep_gemm\n    with: {max_tokens: max_num_seq}\n",
     "unknown name 'max_num_seq' (did you mean 'max_num_seqs'?); known:"),
    ("name: p\nstages:\n  - name: a\n    kind: deep_gemm\n    with: {max_tokens: 'cdvi(8, 2)'}\n",
     "unknown function 'cdvi' (did you mean 'cdiv'?); allowed:"),
    ("name: p\nstages:\n  - name: a\n    kind: deep_gemm\n    with: {xyzzy: 1}\n",
     "stages[0].with.xyzzy: unknown key 'xyzzy'; allowed: block_m,"),   # nothing near: no guess
    ("name: p\nstages:\n  - name: a\n", "stage 'a' needs a kind"),
    ("name: p\nstages:\n  - {name: a, kind: deep_gemm}\n  - {name: a, kind: deep_gemm}\n", "duplicate stage name 'a'"),
    ("name: p\nextends: vllm\nstages:\n  - {name: deep_gemm, kind: cudagraph_capture}\n",
     "is a deep_gemm in the parent plan"),
    ("name: p\nextends: missing-parent\n", "extends: no built-in plan named 'missing-parent'"),
    ("name: p\nstages:\n  - {name: a, kind: deep_gemm, when: 'num_sms + 1'}\n", "expected a condition"),
    ("name: p\nstages:\n  - {name: a, kind: deep_gemm, with: {max_tokens: 100000000}}\n", "more than the limit"),
    ("name: p\nstages:\n  - {name: a, kind: synthetic_batches, with: {num_reqs: 10000000}}\n",
     "the synthetic batch would have 10000000 entries"),
])
def test_bad_plans(tmp_path, capsys, text, fragment):
    plan = tmp_path / "p.yaml"
    plan.write_text(text)
    code, _, err = run(capsys, "plan", str(plan), "--engine", ENGINE)
    assert_one_line_error(code, err, str(plan), fragment)


def test_extends_cycle(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text("name: a\nextends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("name: b\nextends: a.yaml\n")
    code, _, err = run(capsys, "plan", str(tmp_path / "a.yaml"), "--engine", ENGINE)
    assert_one_line_error(code, err, "cycle")


def test_nothing_half_written(tmp_path, capsys):
    out = tmp_path / "plan.yaml"
    out.write_text("previous content\n")
    bad = bad_engine(tmp_path, GOOD_ENGINE.replace("num_blocks: 31744", "num_blocks: -1"))
    code, _, err = run(capsys, "plan", "vllm", "--engine", bad, "-o", str(out))
    assert code == 2
    assert out.read_text() == "previous content\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "vllm"])
    assert e.value.code == 2
    assert "--engine" in capsys.readouterr().err


def test_internal_errors_exit_3(monkeypatch, capsys):
    import planner.api

    def boom(*a, **k):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(planner.api, "expand", boom)
    code, _, err = run(capsys, "plan", "vllm", "--engine", ENGINE)
    assert code == 3
    assert re.search(r"internal error: RuntimeError: simulated bug", err)
    assert "Traceback" not in err


def test_interrupt_exits_130(monkeypatch, capsys):
    import planner.api

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(planner.api, "expand", interrupted)
    code, _, _ = run(capsys, "plan", "vllm", "--engine", ENGINE)
    assert code == 130
    assert os.path.exists(ENGINE)


# --- NaN and infinities (issue 44 item 4): refused where the number is read, in YAML and in JSON -------

SCALE = "scale: 0.08838834764831845"
HF_CONFIG = Path("tests/fixtures/hf/llama-3.1-8b-instruct-fp8-block.json")


@pytest.mark.parametrize("value", [".nan", ".NaN", ".inf", "-.inf", "+.Inf", "1.0e+999"])
def test_a_non_finite_number_in_an_engine_is_refused_at_its_line(tmp_path, capsys, value):
    assert SCALE in GOOD_ENGINE
    path = bad_engine(tmp_path, GOOD_ENGINE.replace(SCALE, f"scale: {value}"))
    out = tmp_path / "plan.json"
    code, stdout, err = run(capsys, "plan", "vllm", "--engine", path, "-f", "json", "-o", str(out))
    assert_one_line_error(code, err, f"{path}:19: model.attention[0].scale: {value} is not a finite number")
    assert stdout == "" and not out.exists()


def test_a_non_finite_number_anywhere_in_a_plan_is_refused(tmp_path, capsys):
    plan = tmp_path / "p.yaml"
    plan.write_text("name: p\nextends: vllm\nstages:\n  - name: warmup_kernels\n    with:\n      decode_len: .inf\n")
    code, _, err = run(capsys, "plan", str(plan), "--engine", ENGINE)
    assert_one_line_error(code, err, f"{plan}:6: stages[0].with.decode_len: .inf is not a finite number")


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999", "-2.5E+400"])
def test_a_non_finite_number_in_a_config_json_is_refused_at_its_line(tmp_path, capsys, token):
    text = HF_CONFIG.read_text()
    assert '"rope_theta": 500000.0' in text
    config = tmp_path / "config.json"
    config.write_text(text.replace('"rope_theta": 500000.0', f'"rope_theta": {token}'))
    code, out, err = run(capsys, "engine", "--from-hf", str(config), "--num-blocks", "1024")
    assert_one_line_error(code, err, f"{config}:40: rope_theta: {token} is not a finite number")
    assert out == ""


MAMBA2 = Path("tests/fixtures/hf/mamba-codestral-7b-v0.1.json")  # transformers 4's Mamba2Config, as the Hub has it


def test_an_unplanned_architecture_is_refused_for_that_whatever_its_numbers(tmp_path, capsys):
    """A Mamba2 config gives time_step_limit [0.0, Infinity] (transformers' default, float('inf')):
    the refusal names the architecture, not the number (issue 55 item 3)."""
    assert "Infinity" in MAMBA2.read_text()
    out = tmp_path / "engine.yaml"
    code, stdout, err = run(capsys, "engine", "--from-hf", str(MAMBA2), "-o", str(out))
    assert_one_line_error(code, err, f"{MAMBA2}:2: architectures: Mamba2ForCausalLM is not planned by --from-hf: "
                                     "a state-space (Mamba) model")
    assert stdout == "" and not out.exists()


def test_a_string_that_says_nan_is_only_a_string(tmp_path, capsys):
    config = tmp_path / "config.json"
    text = HF_CONFIG.read_text()
    config.write_text(text.replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e-05, "note": "NaN 1e999"'))
    assert run(capsys, "engine", "--from-hf", str(config), "--num-blocks", "1024")[0] == 0


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_a_non_finite_number_in_an_expanded_plan_is_refused(tmp_path, capsys, fmt):
    path = tmp_path / f"plan.{fmt}"
    assert main(["plan", "vllm", "--engine", ENGINE, "-f", fmt, "-o", str(path)]) == 0
    text = path.read_text()
    top_p = "top_p: 0.9" if fmt == "yaml" else '"top_p":0.9'
    assert top_p in text
    path.write_text(text.replace(top_p, top_p.replace("0.9", ".nan" if fmt == "yaml" else "1e999"), 1))
    code, _, err = run(capsys, "check", str(path))
    assert_one_line_error(code, err, str(path), ".sampling_params.top_p: ", "is not a finite number")
