"""`warmup diff`: semantic output on real changes, the three formats, and the exit codes."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from planner import cli
from planner.engine import hf
from planner.engine.config import load_engine
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.expanded import ExpandedPlan
from planner.review import diff

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
FIXTURES = os.path.join(HERE, "fixtures")
EAGLE = os.path.join(FIXTURES, "engines", "review-llama-eagle1.yaml")
OVERRIDE = os.path.join(FIXTURES, "plans", "review-override.yaml")
LLAMA, DSV3 = "llama-3.1-8b-fp8-h100", "deepseek-v3-fp8-tp8-h200"



def warmup(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """Engine configs from Hugging Face configs, as users make them: DeepSeek-V3 at TP 4 and 8, Llama at
    max_num_batched_tokens 8192 and 16384."""
    folder = tmp_path_factory.mktemp("engines")
    paths = {}
    dsv3 = ("deepseek-v3.json", {"gpu": "H200", "num_blocks": 11264, "max_num_seqs": 1024})
    llama = ("llama-3.1-8b-instruct-fp8-block.json", {"num_blocks": 31744})  # as plans/engines/llama-3.1-8b-...
    variants = {"dsv3-tp4": (dsv3, {"tp": 4}), "dsv3-tp8": (dsv3, {"tp": 8}),
                "llama-8k": (llama, {"max_num_batched_tokens": 8192}),
                "llama-16k": (llama, {"max_num_batched_tokens": 16384})}
    for name, ((config, common), flags) in variants.items():
        with open(os.path.join(FIXTURES, "hf", config)) as f:
            data = hf.engine_from_hf(json.load(f), hf.EngineRequest(name=name, **common, **flags))
        paths[name] = folder / f"{name}.yaml"
        paths[name].write_text(hf.engine_to_yaml(data))
    return paths


def lines_of(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines()]


# --- real changes -----------------------------------------------------------------------

def test_speculative_decoding_on(capsys):
    rc, out, err = warmup(capsys, "diff", "--plan", "vllm", "--engine", LLAMA, "--engine", EAGLE)
    assert (rc, err) == (1, "")
    assert out == """\
warmup diff: vllm for llama-3.1-8b-fp8-h100 -> vllm for review-llama-eagle1
~ header: engine llama-3.1-8b-fp8-h100 -> review-llama-eagle1; inputs changed: engine config

Steps are matched by id. Symbols:  + add   - remove   ~ change   -/+ replace (same layers, new shape)

  # cudagraph/capture (cudagraph) will change
  ~ uniform decode sizes: -[1]
  ~ decode_query_len 1 -> 2

  # warmup_kernels/prefill (prefill) will change
  ~ prefill: prompt_len 2 -> 3 (num_reqs 1024, tokens 2048 -> 3072)

  # warmup_kernels/decode-1 (decode) will change
  ~ decode: tokens 1024 -> 2048 (1024 requests)
  ~ per request: tokens 1 -> 2, spec tokens 0 -> 1, computed tokens 2 -> 3

Plan: +0 steps, -0 steps, ~3 changed; scheduled tokens 3072 -> 5120; CUDA graphs 102 -> 101
"""


def test_speculative_decoding_off_is_the_mirror_image(capsys):
    rc, out, _ = warmup(capsys, "diff", "--plan", "vllm-head", "-e", EAGLE, "-e", LLAMA)
    assert rc == 1
    lines = lines_of(out)
    assert "~ prefill: prompt_len 3 -> 2 (num_reqs 1024, tokens 3072 -> 2048)" in lines
    # HEAD's spec / non-spec decode subsets: two fewer steps without speculation.
    assert "# warmup_kernels/decode-5 (decode) will be removed" in lines
    assert "- decode: 1 request, 1 token (0 spec tokens per request)" in lines
    assert lines[-1].startswith("Plan: +0 steps, -4 steps, ~")


def test_tensor_parallel_4_to_8_replaces_every_gemm_shape(capsys, engines):
    rc, out, _ = warmup(capsys, "diff", "--plan", "vllm", "-e", engines["dsv3-tp4"], "-e", engines["dsv3-tp8"])
    assert rc == 1
    lines = lines_of(out)
    at = lines.index("# deep_gemm/gemm-n6144-k1536 -> deep_gemm/gemm-n3072-k1536 (gemm, layers q_b_proj) "
                     "will be replaced")
    assert lines[at + 1] == "- gemm n=6144 k=1536 (fp8_gemm_nt, deep_gemm): 298 M-values (1, 2, 4, ..., 8192)"
    assert lines[at + 2] == "+ gemm n=3072 k=1536 (fp8_gemm_nt, deep_gemm): 233 M-values (1, 2, 4, ..., 8192)"
    assert ("# deep_gemm/grouped_gemm-w13-e256-n1024-k7168 -> deep_gemm/grouped_gemm-w13-e256-n512-k7168 "
            "(grouped_gemm, layers experts) will be replaced") in lines
    assert lines[-1] == "Plan: +9 steps, -9 steps, ~0 changed (9 replaced); GEMM calls 3535 -> 3347"


def test_max_num_batched_tokens_8192_to_16384(capsys, engines):
    rc, out, _ = warmup(capsys, "diff", "--plan", "vllm", "-e", engines["llama-8k"], "-e", engines["llama-16k"])
    assert rc == 1
    lines = lines_of(out)
    assert "~ gemm n=6144 k=4096: +140 M-values (8256, 8320, 8384, 8448, ...), -0" in lines
    assert "~ num_tokens 8192 -> 16384" in lines and "~ buckets: +[16384]" in lines
    assert lines[-1] == "Plan: +0 steps, -0 steps, ~5 changed; GEMM calls 1181 -> 1749"


def test_plan_parameter_override(capsys):
    rc, out, _ = warmup(capsys, "diff", "--plan", "vllm", "--plan", OVERRIDE, "--engine", DSV3)
    assert rc == 1
    lines = lines_of(out)
    assert lines[1] == "~ header: plan vllm -> review-override; inputs changed: plan"
    assert "~ cudagraph sizes: +[528]" in lines and "~ uniform decode sizes: +[528]" in lines
    assert "~ prefill: prompt_len 2 -> 3 (num_reqs 1024, tokens 2048 -> 3072)" in lines
    assert "~ per request: computed tokens 2 -> 3" in lines
    assert lines[-1] == "Plan: +0 steps, -0 steps, ~3 changed; scheduled tokens 3072 -> 4096; CUDA graphs 102 -> 104"


def test_plan_change_adds_steps_and_changes_grouped_gemms(capsys):
    rc, out, _ = warmup(capsys, "diff", "-p", "vllm", "-p", "vllm-head", "-e", DSV3)
    lines = lines_of(out)
    assert "~ grouped_gemm w13 experts=256 n=512 k=7168: +0 M-values, -525 (128, 256, 384, 512, ...)" in lines
    assert "~ cache memory -> persistent" in lines and "~ randomize_inputs false -> true" in lines
    added = [line for line in lines if line.startswith("# ") and line.endswith("will be added")]
    assert added == [f"# warmup_kernels/{s} will be added" for s in ("decode-2 (decode)", "sample-3 (sample)",
                                                                    "decode-3 (decode)", "sample-4 (sample)")]
    assert lines[-1] == "Plan: +4 steps, -0 steps, ~3 changed; GEMM calls 3347 -> 2297; scheduled tokens 3072 -> 3075"


def test_long_lists_show_counts_and_a_few_examples(capsys, tmp_path):
    full = tmp_path / "full.yaml"
    full.write_text(yaml.safe_dump({"name": "full", "extends": "vllm",
                                    "stages": [{"name": "deep_gemm", "with": {"mode": "full"}}]}))
    rc, out, _ = warmup(capsys, "diff", "-p", "vllm", "-p", full, "-e", LLAMA)
    assert rc == 1 and "+7906 M-values (3, 5, 6, 7, ...), -0" in out
    assert max(len(re.findall(r"\d+", line)) for line in out.splitlines()) <= 12
    assert len(out) < 2000


# --- expanded plan files, and no changes -------------------------------------------------

def test_expanded_files_diff_like_pairs(capsys, tmp_path):
    small = tmp_path / "small.yaml"
    with open(EAGLE) as f:
        data = yaml.safe_load(f)
    data["scheduler"]["max_num_seqs"] = 8  # small files load fast
    small.write_text(yaml.safe_dump(data))
    old, new = tmp_path / "old.yaml", tmp_path / "new.json"
    assert cli.main(["plan", "vllm", "-e", str(small), "-o", str(old)]) == 0
    assert cli.main(["plan", "vllm-head", "-e", str(small), "-f", "json", "-o", str(new)]) == 0
    capsys.readouterr()
    from_files = warmup(capsys, "diff", old, new)
    assert from_files == warmup(capsys, "diff", "-p", "vllm", "-p", "vllm-head", "-e", small)
    assert from_files[0] == 1
    rc, out, _ = warmup(capsys, "diff", old, old)
    assert (rc, out) == (0, "warmup diff: vllm for review-llama-eagle1\n\n"
                            "No changes. The expanded steps are identical.\n")


def test_renamed_engine_is_a_header_change_only(capsys, engines):
    # The shipped Llama engine and one made from the same HF config under another name: same steps.
    rc, out, _ = warmup(capsys, "diff", "-p", "vllm", "-e", LLAMA, "-e", engines["llama-8k"])
    assert rc == 0
    assert lines_of(out)[1] == "~ header: engine llama-3.1-8b-fp8-h100 -> llama-8k"
    assert out.endswith("No changes. The expanded steps are identical.\n")


def test_same_steps_in_another_order_and_other_block_ids():
    plan = expand(load_plan("vllm"), load_engine(EAGLE))
    other = plan.to_dict()
    capture = next(s for s in other["steps"] if s["kind"] == "cudagraph")
    capture["sizes"].reverse()
    prefill = next(s for s in other["steps"] if s["kind"] == "prefill")
    prefill["requests"][0]["block_ids"], prefill["requests"][1]["block_ids"] = (
        prefill["requests"][1]["block_ids"], prefill["requests"][0]["block_ids"])
    d = diff.diff_plans(plan, ExpandedPlan.from_dict(other))
    assert [(c.id, c.lines) for c in d.changes] == [
        ("cudagraph/capture", ["same values in another order: sizes"]),
        ("warmup_kernels/prefill", ["changed: requests (same counts; ids or values differ)"])]


# --- OLD and NEW as `warmup plan` takes them; a change of stage order ---------------------

# (vLLM 0.25 warms no DeepGEMM linear of this engine: they run FlashInfer's kernel, issue 24)
STAGE_ORDER = ("~ stage order: flashinfer_autotune, cudagraph, warmup_kernels -> flashinfer_autotune, "
               "warmup_kernels, cudagraph (cudagraph now runs after warmup_kernels)")


def test_two_plan_names_and_an_engine(capsys):
    """Issue 27: `warmup diff vllm-0.25 vllm-0.33 --engine E` was refused; 0.33 captures after warmup_kernels."""
    rc, out, err = warmup(capsys, "diff", "vllm-0.25", "vllm-0.33", "--engine", LLAMA)
    assert (rc, err) == (1, "") and STAGE_ORDER in out.splitlines()
    assert out.splitlines()[:2] == [f"warmup diff: vllm-0.25 for {LLAMA} -> vllm-0.33 for {LLAMA}",
                                    "~ header: plan vllm-0.25 -> vllm-0.33; inputs changed: plan"]
    assert "; stage order changed; " in out
    assert warmup(capsys, "diff", "-p", "vllm-0.25", "-p", "vllm-0.33", "-e", LLAMA) == (rc, out, err)


def test_plans_files_and_saved_plans_mix(capsys, tmp_path):
    saved = tmp_path / "old.yaml"
    assert cli.main(["plan", "vllm-0.25", "-e", LLAMA, "-o", str(saved)]) == 0
    capsys.readouterr()
    by_name = warmup(capsys, "diff", "vllm-0.25", "vllm-0.33", "-e", LLAMA)
    assert warmup(capsys, "diff", saved, "plans/vllm-0.33.yaml", "-e", LLAMA) == by_name
    assert warmup(capsys, "diff", saved, "vllm-0.33", "-e", f"plans/engines/{LLAMA}.yaml") == by_name


def test_one_plan_for_two_engines(capsys):
    assert warmup(capsys, "diff", "vllm", "vllm", "-e", LLAMA, "-e", EAGLE) == \
        warmup(capsys, "diff", "-p", "vllm", "-e", LLAMA, "-e", EAGLE)


def test_an_engine_no_plan_uses_is_refused(capsys, tmp_path):
    saved = tmp_path / "p.yaml"
    assert cli.main(["plan", "triton", "-e", LLAMA, "-o", str(saved)]) == 0
    capsys.readouterr()
    assert warmup(capsys, "diff", saved, saved, "-e", LLAMA) == (2, "", (
        "warmup: error: warmup diff: --engine expands a plan, and OLD and NEW are expanded plan files (compared "
        "as they are): leave out --engine\n"))
    rc, out, err = warmup(capsys, "diff", saved, "triton", "-e", LLAMA, "-e", LLAMA)
    assert (rc, out) == (2, "") and err == (
        f"warmup: error: warmup diff: two --engine expand two plans (the first for OLD, the second for NEW), and "
        f"{saved} is an expanded plan file (compared as it is): give one --engine\n")


def test_a_change_of_stage_order_alone_is_a_difference():
    plan = expand(load_plan("vllm"), load_engine(LLAMA))
    data = plan.to_dict()
    data["steps"] = ([s for s in data["steps"] if s["stage"] != "cudagraph"]
                     + [s for s in data["steps"] if s["stage"] == "cudagraph"])
    d = diff.diff_plans(plan, ExpandedPlan.from_dict(data))
    assert not d.changes and not d.equal
    moved = ("~ stage order: deep_gemm, flashinfer_autotune, cudagraph, warmup_kernels -> deep_gemm, "
             "flashinfer_autotune, warmup_kernels, cudagraph (cudagraph now runs after warmup_kernels)")
    assert diff.render_text(d) == (f"warmup diff: vllm for {LLAMA}\n{moved}\n\n"
                                   "Plan: +0 steps, -0 steps, ~0 changed; stage order changed\n")
    assert json.loads(diff.render_json(d))["stage_order"] == {
        "old": ["deep_gemm", "flashinfer_autotune", "cudagraph", "warmup_kernels"],
        "new": ["deep_gemm", "flashinfer_autotune", "warmup_kernels", "cudagraph"],
        "moved": ["cudagraph now runs after warmup_kernels"]}
    assert diff.diff_plans(plan, plan).stage_order is None


@pytest.mark.parametrize("old, new, moved", [
    ("abcd", "abdc", ["c now runs after d"]),
    ("abcd", "dabc", ["d now runs first"]),
    ("abcd", "badc", ["a now runs after b", "c now runs after d"]),
    ("abc", "cba", ["b now runs after c", "a now runs after b"]),
])
def test_stage_order_names_the_fewest_moves(old, new, moved):
    assert diff.StageOrder(list(old), list(new)).moved() == moved


# --- formats ----------------------------------------------------------------------------

def test_markdown_for_a_pull_request_comment(capsys):
    rc, out, _ = warmup(capsys, "diff", "-p", "vllm", "-e", LLAMA, "-e", EAGLE, "--format", "markdown")
    assert rc == 1
    assert out.startswith("### Warmup plan: `vllm` for `llama-3.1-8b-fp8-h100` -> `vllm` for `review-llama-eagle1`\n")
    assert "**Plan: +0 steps, -0 steps, ~3 changed; scheduled tokens 3072 -> 5120; CUDA graphs 102 -> 101**" in out
    block = out.split("```diff\n", 1)[1].split("```", 1)[0]
    assert block.splitlines()[:3] == ["# cudagraph/capture (cudagraph) will change", "~ uniform decode sizes: -[1]",
                                      "~ decode_query_len 1 -> 2"]
    rc, out, _ = warmup(capsys, "diff", "-p", "vllm", "-e", LLAMA, "-e", LLAMA, "--format", "markdown")
    assert (rc, out) == (0, "### Warmup plan: `vllm` for `llama-3.1-8b-fp8-h100`\n\n"
                            "**No changes.** The expanded steps are identical.\n")


@pytest.mark.parametrize("argv", [
    ["vllm-0.25", "vllm-0.33", "-e", LLAMA],
    ["-p", "vllm", "-e", LLAMA, "-e", EAGLE],
    ["-p", "vllm", "-e", LLAMA, "-e", LLAMA],
    ["vllm", "vllm", "-e", LLAMA, "-e", "qwen3-30b-a3b-fp8-h100"],
])
def test_markdown_carries_every_line_of_the_text(capsys, argv):
    """Issue 27: markdown printed the first header line only."""
    _, text, _ = warmup(capsys, "diff", *argv, "--no-color")
    _, markdown, _ = warmup(capsys, "diff", *argv, "-f", "markdown")
    lines = [line.strip() for line in text.splitlines()[1:] if line.strip()]
    for line in lines:
        line = line[2:] if line.startswith("~ header: ") or line.startswith("~ stage order: ") else line
        line = line.replace("No changes.", "**No changes.**") if line.startswith("No changes.") else line
        assert line in markdown, line
    title = text.splitlines()[0].removeprefix("warmup diff: ")
    assert markdown.splitlines()[0].replace("`", "") == f"### Warmup plan: {title}"


def test_json_for_tools(capsys, engines):
    rc, out, _ = warmup(capsys, "diff", "-p", "vllm", "-e", engines["dsv3-tp4"], "-e", engines["dsv3-tp8"],
                        "-f", "json")
    data = json.loads(out)
    assert rc == 1 and data["format"] == "warmup-plan-diff/v1" and data["equal"] is False
    assert data["inputs_changed"] == ["engine"]
    assert data["summary"] == {"added": 9, "removed": 9, "changed": 0, "replaced": 9,
                               "totals": {"gemm_calls": {"old": 3535, "new": 3347}},
                               "line": "Plan: +9 steps, -9 steps, ~0 changed (9 replaced); GEMM calls 3535 -> 3347"}
    first = data["changes"][0]
    assert (first["action"], first["old_id"], first["id"]) == ("replace", "deep_gemm/gemm-n6144-k1536",
                                                                 "deep_gemm/gemm-n3072-k1536")
    rc, out, _ = warmup(capsys, "diff", "-p", "vllm", "-p", OVERRIDE, "-e", DSV3, "-f", "json")
    capture = next(c for c in json.loads(out)["changes"] if c["id"] == "cudagraph/capture")
    assert capture["fields"]["sizes"] == {"added": 1, "removed": 0, "added_examples": [528], "removed_examples": []}


def test_output_file(capsys, tmp_path):
    path = tmp_path / "diff.md"
    rc, out, _ = warmup(capsys, "diff", "-p", "vllm", "-e", LLAMA, "-e", EAGLE, "-f", "markdown", "-o", path)
    assert (rc, out) == (1, "") and path.read_text().startswith("### Warmup plan")


# --- exit codes -------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["diff"], "expected OLD NEW"),
    (["diff", "a.yaml"], "expected OLD and NEW (two plans or expanded plan files), got 1"),
    (["diff", "vllm", "vllm-head", "vllm"], "expected OLD and NEW (two plans or expanded plan files), got 3"),
    (["diff", "--plan", "vllm", "--engine", LLAMA], "got 1 --plan, 1 --engine"),
    (["diff", "--plan", "vllm", "-e", LLAMA, "-e", LLAMA, "-e", LLAMA], "got 1 --plan, 3 --engine"),
    (["diff", "x.yaml", "y.yaml", "--plan", "vllm"], "not both"),
    (["diff", "missing.yaml", "missing.yaml"], "missing.yaml: no such file"),
    (["diff", OVERRIDE, OVERRIDE], f"{OVERRIDE}: this is a plan: give --engine ENGINE to expand it"),
    (["diff", "vllm-0.25", "vllm-0.33"], "this is a plan: give --engine ENGINE to expand it"),
    (["diff", "vllm", "vllm", "-e", LLAMA, "-e", LLAMA, "-e", LLAMA], "got 3 --engine"),
    (["diff", "vllm", f"plans/engines/{LLAMA}.yaml", "-e", LLAMA],
     "this is an engine config, not a plan: compare engines with `warmup diff PLAN PLAN -e OLD_ENGINE -e NEW_ENGINE`"),
    (["diff", "vllm", "no-such-plan", "-e", LLAMA], "no built-in plan named 'no-such-plan'"),
    (["diff", "--plan", "vllm", "-e", LLAMA, "-e", "no-such-engine"], "no built-in engine named 'no-such-engine'"),
    (["diff", "--format", "html", "a", "b"], "invalid choice: 'html'"),
])
def test_invalid_input_exits_2(capsys, argv, message):
    with pytest.raises(SystemExit) if "--format" in argv else _no_exit() as caught:
        rc, out, err = warmup(capsys, *argv)
    if "--format" in argv:  # argparse usage errors exit 2 by themselves
        rc, (out, err) = caught.value.code, capsys.readouterr()
    assert rc == 2 and out == "" and message in err and err.count("\n") == 1


class _no_exit:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_internal_error_exits_3(capsys, monkeypatch):
    def broken(old, new):
        raise KeyError("steps")

    from planner.review import commands

    monkeypatch.setattr(commands, "diff_plans", broken)
    rc, out, err = warmup(capsys, "diff", "-p", "vllm", "-e", LLAMA, "-e", EAGLE)
    assert (rc, out) == (3, "") and "internal error: KeyError" in err
