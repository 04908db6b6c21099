"""Issue 27's bad input and small words: a block-FP8 MoE weight vLLM refuses is refused at its engine
field (a linear's K that no kernel takes is planned around instead: tests/planner/test_planned_around.py);
`-o` into a missing directory and `-o ''` are one-line errors; `validate` reports every file;
`warmup plans` ends a description at a sentence or with "..."; the table counts a request once;
`check` says "1 step"."""

from __future__ import annotations

import os

import pytest

from planner.cli import main
from planner.commands.plan import summary
from tests.factories import make_engine

LLAMA = "plans/engines/llama-3.1-8b-fp8-h100.yaml"
QWEN_MOE = "plans/engines/qwen3-30b-a3b-fp8-h100.yaml"
HF = "tests/fixtures/hf/llama-3.1-8b-instruct-fp8-block.json"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error(capsys, *argv) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("warmup: error: "), (code, out, err)
    return err[len("warmup: error: "):].rstrip("\n")


def edited(tmp_path, source: str, old: str, new: str) -> str:
    text = open(source).read()
    assert text.count(old) == 1, old
    path = tmp_path / "engine.yaml"
    path.write_text(text.replace(old, new))
    return str(path)


def line_of(path: str, fragment: str) -> int:
    return next(i for i, line in enumerate(open(path), 1) if fragment in line)


# --- (a) a block-FP8 weight that is not whole blocks -------------------------------------

def test_an_n_off_the_block_stays_valid_as_vllm_takes_it(tmp_path, capsys):
    """vLLM refuses an N off the block only where TP splits it or a merged GEMM's non-last part has it,
    which the per-rank engine config does not record; DeepSeek-V3's fused_qkv_a_proj (N = 2112 =
    1536 + 576) is one vLLM serves. Such a layer still reaches the Triton plan."""
    path = edited(tmp_path, LLAMA, "name: o_proj, n: 4096, k: 4096", "name: o_proj, n: 4000, k: 4096")
    assert run(capsys, "validate", path)[0] == 0
    code, out, _ = run(capsys, "plan", "triton", "-e", path)
    assert code == 0 and "gemm-n4000-k4096" in out
    assert run(capsys, "validate", "plans/engines/deepseek-v3-fp8-tp8-h200.yaml")[0] == 0


MOE = "intermediate_size: 768, count: 48, quant: {method: fp8, weight_block_size: [128, 128]}"


@pytest.mark.parametrize("size, block, tp, dim", [(700, "[128, 128]", 1, "N"), (704, "[64, 128]", 2, "K")])
def test_an_moe_intermediate_size_vllm_refuses_is_refused(tmp_path, capsys, size, block, tp, dim):
    """validate_fp8_block_shape_moe: whole blocks of N always, of K under tensor parallelism."""
    path = edited(tmp_path, QWEN_MOE, MOE, MOE.replace("768", str(size)).replace("[128, 128]", block))
    text = open(path).read().replace("tensor_parallel_size: 1", f"tensor_parallel_size: {tp}")
    open(path, "w").write(text)
    message = one_error(capsys, "validate", path)
    assert message.startswith(f"{path}:{line_of(path, 'intermediate_size')}: model.moe[0].intermediate_size: "
                              f"intermediate_size = {size} is not a whole number of FP8 blocks of {dim}"), message
    assert message.endswith("vLLM refuses it")
    if tp > 1:  # the same size on one rank: vLLM checks K only where TP splits it
        open(path, "w").write(text.replace(f"tensor_parallel_size: {tp}", "tensor_parallel_size: 1"))
        assert run(capsys, "validate", path)[0] == 0


def test_the_block_check_leaves_unquantized_and_per_tensor_weights_alone():
    make_engine(model={"vocab_size": 1000, "max_model_len": 4096,
                       "linear": [{"name": "a", "n": 100, "k": 100, "quant": {"method": "none"}},
                                  {"name": "b", "n": 100, "k": 100, "quant": {"method": "fp8_per_tensor"}}]})


# --- (b) -o into a missing directory, and -o '' ------------------------------------------

COMMANDS = {
    "plan": ["plan", "triton", "-e", LLAMA],
    "engine": ["engine", "--from-hf", HF, "--num-blocks", "1024"],
    "diff": ["diff", "-p", "triton", "-e", LLAMA, "-e", LLAMA],
    "check": ["check", "triton", "-e", LLAMA],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_output_into_a_missing_directory_is_refused(tmp_path, capsys, command):
    target = tmp_path / "missing" / "deeper" / "out.yaml"
    message = one_error(capsys, *COMMANDS[command], "-o", target)
    assert message == f"{target}: cannot write: directory {target.parent} does not exist (create it first)"
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_empty_output_name_is_refused(tmp_path, capsys, command):
    assert one_error(capsys, *COMMANDS[command], "-o", "") == \
        "'': cannot write: an empty file name (leave out -o, or give -o -, to write to stdout)"


def test_a_relative_output_names_its_directory_as_given(tmp_path, capsys, monkeypatch):
    engine = os.path.abspath(LLAMA)
    monkeypatch.chdir(tmp_path)
    assert one_error(capsys, "plan", "triton", "-e", engine, "-o", "out/plan.yaml") == \
        "out/plan.yaml: cannot write: directory out does not exist (create it first)"


def test_only_the_executors_own_records_make_their_directories(tmp_path):
    """A file a user names (-o, --report, ...) follows the shell: a missing folder is refused (issue 55
    item 2); the executor's own records under a cache root it owns (make_folder) create theirs."""
    from planner.errors import WriteError
    from planner.output import write_atomic

    with pytest.raises(WriteError, match="does not exist"):
        write_atomic(tmp_path / "out" / "r.json", "{}\n")
    assert not (tmp_path / "out").exists()
    write_atomic(tmp_path / "cache" / "m.json", "{}\n", make_folder=True)
    assert (tmp_path / "cache" / "m.json").read_text() == "{}\n"


# --- (c) validate reports every file -----------------------------------------------------

def test_validate_reports_every_file_and_exits_2_if_any_is_bad(tmp_path, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [\n")
    missing = tmp_path / "missing.yaml"
    code, out, err = run(capsys, "validate", LLAMA, broken, missing, "plans/vllm.yaml")
    assert code == 2
    assert out.splitlines() == [f"{LLAMA}: ok (engine)", "plans/vllm.yaml: ok (plan)"]
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"warmup: error: {broken}:") and "invalid YAML" in lines[0]
    assert lines[1] == f"warmup: error: {missing}: no such file"
    assert run(capsys, "validate", LLAMA, "plans/vllm.yaml")[0] == 0


# --- words: plans, the table, check ------------------------------------------------------

def test_plans_end_descriptions_at_a_sentence_or_with_dots(capsys):
    code, out, _ = run(capsys, "plans")
    plans = out.split("Engines:")[0].splitlines()[1:]
    assert code == 0 and len(plans) >= 8
    for line in plans:
        assert len(line) <= 100 and (line.endswith(".") or line.endswith("...")), line
    names = [line.split()[0] for line in plans]
    starts = {line.index(line.split()[1], len(name) + 2) for line, name in zip(plans, names)}
    assert len(starts) == 1  # one column, however long a name (vllm-0.25-plugin)


@pytest.mark.parametrize("text, room, expected", [
    ("One sentence. Another one.", 80, "One sentence."),
    ("Ends at\nthe first sentence, e.g. this one. Not this.", 80, "Ends at the first sentence, e.g. this one."),
    ("A sentence that is far too long to fit in the room it has here.", 30, "A sentence that is far too..."),
    ("vllm-0.25 (the newest release that pins torch 2.11.0), in order.", 80,
     "vllm-0.25 (the newest release that pins torch 2.11.0), in order."),
    ("No full stop at all", 80, "No full stop at all"),
])
def test_summary(text, room, expected):
    assert summary(text, room) == expected and len(summary(text, room)) <= room


def test_the_table_counts_each_request_once(capsys):
    code, out, _ = run(capsys, "plan", "vllm-0.33", "-e", "tests/fixtures/engines/review-llama-eagle1.yaml",
                       "-f", "table")
    rows = {tuple(line.split()[:2]): line for line in out.splitlines() if line.startswith("warmup_kernels")}
    assert code == 0
    # 10 decode steps of the same 1024 requests (1024, 2, 2, 1, 1 per pass): not 2060 requests
    assert rows[("warmup_kernels", "decode")].endswith("1024 distinct requests, 4112 tokens in all")
    code, out, _ = run(capsys, "plan", "vllm", "-e", LLAMA, "-f", "table")
    assert "1024 requests, 2048 tokens" in out  # one prefill step


def test_check_says_one_step(tmp_path, capsys):
    plan = tmp_path / "one.yaml"
    plan.write_text("name: one\nstages:\n  - name: cudagraph\n    kind: cudagraph_capture\n"
                    "    with: {max_capture_size: 1}\n")
    code, out, _ = run(capsys, "check", plan, "-e", LLAMA)
    assert (code, out) == (0, "warmup check: one for llama-3.1-8b-fp8-h100 (1 step)\n\n"
                              "No problems: 16 lints over 1 step.\n")
