"""`warmup check`: every lint on a plan that triggers it and one that does not, golden plans, exit codes."""

from __future__ import annotations

import copy
import json
import os
import re

import pytest
import yaml
from test_absorb import ACTIVATED, LLAMA, MONITOR_TAIL, plugin_jit_log, vllm_line
from test_planned_around import K192

from planner import cli
from planner.engine.config import engine_from_document, load_engine
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.expanded import ExpandedPlan
from planner.resources import builtin_engines, builtin_plans
from planner.review import lints
from planner.yamlio import Document

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
FIXTURES = os.path.join(HERE, "fixtures")
GOLDEN = os.path.join(HERE, "golden")
EAGLE = os.path.join(FIXTURES, "engines", "review-llama-eagle1.yaml")
PRE_40746 = os.path.join(FIXTURES, "plans", "pre-40746.yaml")



def warmup(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def merge(base: dict, changes: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def engine_data(changes: dict | None = None, base: str = EAGLE) -> dict:
    with open(base) as f:
        return merge(yaml.safe_load(f), changes or {})


def engine(changes: dict | None = None, base: str = EAGLE):
    return engine_from_document(Document(data=engine_data(changes, base), file="<test engine>"))


def write_engine(tmp_path, changes: dict | None = None, name: str = "engine.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(engine_data(changes)))
    return str(path)


def write_plan(tmp_path, stages: list, name: str = "review-test", extends: str = "vllm-head") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "extends": extends, "stages": stages}))
    return str(path)


def codes(plan, eng=None) -> list[str]:
    findings, _ = lints.run(plan, eng.facts if eng is not None else None)
    return [f.lint.code for f in findings]


def planned(plan: str, eng) -> ExpandedPlan:
    return expand(load_plan(plan), eng)


def plain(plan: ExpandedPlan) -> dict:
    """The plan's plain form, to edit by hand as a user would edit a saved plan."""
    return plan.to_dict()


def read(data: dict) -> ExpandedPlan:
    """A hand-edited plain form read back, as `warmup check` reads a file."""
    return ExpandedPlan.from_dict(data)


def step_of(data: dict, step_id: str) -> dict:
    return next(s for s in data["steps"] if s["id"] == step_id)


@pytest.fixture(scope="module")
def clean():
    """vllm-head on the EAGLE engine: the baseline every mutation starts from; it has no findings."""
    eng = engine()
    return planned("vllm-head", eng), eng


def mutated(clean, step_id: str, **fields) -> ExpandedPlan:
    data = plain(clean[0])
    step_of(data, step_id).update(fields)
    return read(data)


def test_baseline_is_clean(clean):
    plan, eng = clean
    assert codes(plan, eng) == []


def test_every_lint_has_code_severity_explanation_and_fix():
    seen = set()
    for item in lints.LINTS:
        assert item.code[0] == {"error": "E", "warning": "W"}[item.severity] and item.code not in seen
        assert item.name and len(item.explanation) > 80 and len(item.fix) > 20
        seen.add(item.code)
    assert len(seen) >= 14


# --- E101 prefill-classified-as-decode --------------------------------------------------

def test_e101_pre_40746_plan_is_caught():
    findings, _ = lints.run(planned(PRE_40746, engine()), engine().facts)
    assert [f.line() for f in findings] == [
        "ERROR E101 warmup_kernels/prefill: per-request query length 2 <= decode query length 2 "
        "(1 + 1 speculative token): the engine classifies the batch as uniform decode and never warms the "
        "prefill path"]


def test_e101_not_without_speculation_or_with_the_fix():
    no_spec = engine({"speculative": {"method": "none", "num_speculative_tokens": 0}})
    assert "E101" not in codes(planned(PRE_40746, no_spec), no_spec)  # 2 > decode_query_len 1
    assert "E101" not in codes(planned("vllm", engine()), engine())  # #40746: prompt_len 2 + 1


# --- E102 kv-blocks-short ---------------------------------------------------------------

SMALL_BLOCKS = {"speculative": {"method": "eagle", "num_speculative_tokens": 2},
                "kv_cache": {"num_blocks": 31744, "groups": [{"block_size": 4, "kind": "full_attention"}]}}


def test_e102_seed_warmup_without_lookahead_reservation():
    # vllm (seed): prompt 4 tokens in 1 block of 4; the scheduler holds cdiv(4 + 2 lookahead, 4) = 2.
    eng = engine(SMALL_BLOCKS)
    findings, _ = lints.run(planned("vllm", eng), eng.facts, codes=["E102"])
    assert findings[0].step == "warmup_kernels/prefill"
    assert "hold 1 block in KV group 0; the scheduler would hold 2 for 4 tokens + 2 lookahead" in findings[0].message
    assert "1024 requests" in findings[0].message


def test_e102_not_with_lookahead_reserved():
    eng = engine(SMALL_BLOCKS)
    assert "E102" not in codes(planned("vllm-head", eng), eng)


def test_e102_wrong_number_of_kv_groups(clean):
    data = plain(clean[0])
    for r in step_of(data, "warmup_kernels/prefill")["requests"]:
        r["block_ids"] = r["block_ids"] * 2
    findings, _ = lints.run(read(data), clean[1].facts, codes=["E102"])
    assert findings and "requests hold blocks in 2 KV cache groups, the engine has 1" in findings[0].message


# --- block ids --------------------------------------------------------------------------

def prefill_with_blocks(clean, blocks: list) -> ExpandedPlan:
    data = plain(clean[0])
    for r, ids in zip(step_of(data, "warmup_kernels/prefill")["requests"], blocks):
        r["block_ids"] = [ids]
    return read(data)


def test_e103_null_block(clean):
    plan = prefill_with_blocks(clean, [[0]])
    findings, _ = lints.run(plan, None, codes=["E103"])
    assert [f.message for f in findings] == ["1 request (_warmup_0_) hold the null block 0"]
    assert codes(clean[0]) == []  # and without an engine, the clean plan stays clean


def test_e104_block_reused_across_requests_and_after_cleanup(clean):
    plan = prefill_with_blocks(clean, [[5], [5]])
    findings, _ = lints.run(plan, None, codes=["E104"])
    assert "block 5 goes to _warmup_1_ while _warmup_0_ holds it" in findings[0].message
    # Two warmup stages one after the other may reuse ids: the cleanup freed them.
    twice = plain(clean[0])
    twice["steps"] += [dict(s, id="again/" + s["id"].split("/")[1], stage="again")
                       for s in plain(clean[0])["steps"] if s["stage"] == "warmup_kernels"]
    assert "E104" not in codes(read(twice))


def test_e105_block_ids_beyond_num_blocks(clean):
    plan, eng = clean
    small = engine({"kv_cache": {"num_blocks": 100}})
    findings, _ = lints.run(plan, small.facts, codes=["E105"])
    assert findings[0].step == "warmup_kernels/prefill" and "outside 1..99 (num_blocks 100)" in findings[0].message
    assert "E105" not in codes(planned("vllm-head", small), small)  # planned for it: num_reqs fits


# --- scheduler limits -------------------------------------------------------------------

def test_e106_tokens_over_max_num_batched_tokens(tmp_path):
    plan = write_plan(tmp_path, [{"name": "warmup_kernels", "with": {"prompt_len": 64, "num_reqs": "max_num_seqs"}}])
    findings, _ = lints.run(planned(plan, engine()), engine().facts, codes=["E106"])
    assert [f.message for f in findings] == [
        "schedules 65536 tokens, more than max_num_batched_tokens 8192"]


def test_e106_request_past_max_model_len(clean):
    short = engine({"model": {"max_model_len": 3}})
    findings, _ = lints.run(clean[0], short.facts, codes=["E106"])
    assert any("grow past max_model_len 3" in f.message for f in findings)
    assert "E106" not in codes(clean[0], clean[1])


def test_e107_too_many_requests(tmp_path):
    plan = write_plan(tmp_path, [{"name": "warmup_kernels", "with": {"num_reqs": "max_num_seqs + 1"}}])
    findings, _ = lints.run(planned(plan, engine()), engine().facts, codes=["E107"])
    assert findings[0].message == "schedules 1025 requests, more than max_num_seqs 1024"
    ok = write_plan(tmp_path, [{"name": "warmup_kernels", "with": {"num_reqs": "max_num_seqs"}}], name="ok")
    assert "E107" not in codes(planned(ok, engine()), engine())


# --- step contents ----------------------------------------------------------------------

def test_e108_empty_step(clean):
    plan = mutated(clean, "deep_gemm/gemm-n6144-k4096", m_values=[])
    findings, _ = lints.run(plan, None, codes=["E108"])
    assert [f.line() for f in findings] == [
        "ERROR E108 deep_gemm/gemm-n6144-k4096: a GEMM without M-values: the step does nothing"]
    plan = mutated(clean, "warmup_kernels/cleanup", finished_req_ids=[])
    assert "E108" in codes(plan)


def test_e109_inconsistent_batches(clean):
    plan = mutated(clean, "warmup_kernels/prefill", total_num_scheduled_tokens=1)
    assert "its requests schedule 3072" in lints.run(plan, None, codes=["E109"])[0][0].message
    # A decode of a request no prefill added.
    data = plain(clean[0])
    step_of(data, "warmup_kernels/decode-1")["requests"][0]["req_id"] = "_stray_"
    messages = [f.message for f in lints.run(read(data), None, codes=["E109"])[0]]
    assert any("request _stray_ is decoded but not running" in m for m in messages)
    # A grammar bitmask sized for another batch.
    data = plain(clean[0])
    step_of(data, "warmup_kernels/sample")["grammar_bitmask"]["num_rows"] = 7
    assert "grammar bitmask has 7 rows" in lints.run(read(data), None, codes=["E109"])[0][0].message


def test_e110_relax_m_values_above_a_small_token_budget():
    # vLLM's relax warmup always adds M = 1..64: an error only where max_num_batched_tokens < 64.
    tiny = engine({"scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 32},
                   "speculative": {"method": "none", "num_speculative_tokens": 0}})
    findings, _ = lints.run(planned("vllm", tiny), tiny.facts, codes=["E110"])
    assert findings and all("outside [1, 32]" in f.message for f in findings)
    assert "40, 48, 56, 64" in findings[0].message
    enough = engine({"scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 64},
                     "speculative": {"method": "none", "num_speculative_tokens": 0}})
    assert "E110" not in codes(planned("vllm", enough), enough)


def test_e110_grouped_gemm_bound():
    moe = engine(base=os.path.join(os.path.dirname(HERE), "plans", "engines", "qwen3-30b-a3b-fp8-h100.yaml"))
    plan = planned("vllm", moe)
    assert "E110" not in codes(plan, moe)
    data = plain(plan)
    step = next(s for s in data["steps"] if s["kind"] == "grouped_gemm")
    step["m_values"].append(step["m_values"][-1] * 4)
    assert "E110" in codes(read(data), moe)


def test_e111_unaligned_shapes(clean):
    plan = mutated(clean, "deep_gemm/gemm-n6144-k4096", n=6100)
    findings, _ = lints.run(plan, None, codes=["E111"])
    assert findings[0].message == "fp8_gemm_nt cannot take this shape: n=6100 is not a multiple of 64"
    assert not lints.run(mutated(clean, "deep_gemm/gemm-n6144-k4096", n=2112), None, codes=["E111"])[0]
    moe = engine(base=os.path.join(os.path.dirname(HERE), "plans", "engines", "qwen3-30b-a3b-fp8-h100.yaml"))
    data = plain(planned("vllm", moe))
    grouped = next(s for s in data["steps"] if s["kind"] == "grouped_gemm")
    grouped["m_values"] = grouped["m_values"] + [grouped["m_values"][0] + 1]
    assert "not a multiple of the alignment 128" in lints.run(read(data), None, codes=["E111"])[0][0].message
    assert "E111" not in codes(planned("triton", moe))  # Triton takes any N, K % 128


# --- warnings ---------------------------------------------------------------------------

def test_w201_decode_without_captured_graphs(tmp_path):
    plan = write_plan(tmp_path, [{"name": "cudagraph", "enabled": False}])
    findings, _ = lints.run(planned(plan, engine()), engine().facts, codes=["W201"])
    assert [f.line() for f in findings] == [
        "WARNING W201 warmup_kernels/decode-1: 5 decode steps run and the plan captures no CUDA graphs (the engine "
        "does: FULL_AND_PIECEWISE): they run eagerly"]
    eager = engine({"compilation": {"enforce_eager": True}})
    assert "W201" not in codes(planned(plan, eager), eager)


def test_w201_decode_before_capture_is_fine(tmp_path):
    # vLLM 0.33's order: warmup_kernels, then capture, which warms the graph path itself.
    plan = write_plan(tmp_path, [{"name": "cudagraph", "enabled": False},
                                 {"name": "late_cudagraph", "kind": "cudagraph_capture"}])
    assert "W201" not in codes(planned(plan, engine()), engine())


def test_w201_decode_sizes_for_another_decode_query_len(clean):
    plan = mutated(clean, "cudagraph/capture", uniform_decode_sizes=[9, 7, 5, 3], decode_query_len=1)
    messages = [f.message for f in lints.run(plan, clean[1].facts, codes=["W201"])[0]]
    assert messages == [
        "uniform decode graphs are captured for decode_query_len 1, the engine decodes 2 tokens per request "
        "(1 + 1 speculative token)",
        "4 uniform decode sizes not a multiple of decode_query_len 2 (9, 7, 5, 3): no uniform decode batch has "
        "that many tokens"]


def test_w202_autotune_below_the_largest_batch(tmp_path):
    plan = write_plan(tmp_path, [{"name": "flashinfer_autotune", "with": {"num_tokens": 4096}}])
    findings, _ = lints.run(planned(plan, engine()), engine().facts, codes=["W202"])
    assert findings[0].message == "flashinfer autotunes at 4096 tokens, below the largest batch (8192 tokens)"
    assert findings[0].lint.severity == "warning"


def test_w203_two_stages_warming_the_same_gemms(tmp_path):
    plan = write_plan(tmp_path, [{"name": "deep_gemm_again", "kind": "deep_gemm", "with": {"grouped": False}}])
    findings, _ = lints.run(planned(plan, engine()), None, codes=["W203"])
    assert findings[0].step == "deep_gemm_again/gemm-n6144-k4096"
    assert findings[0].message.startswith("duplicates deep_gemm/gemm-n6144-k4096: 298 of its M-values run there "
                                          "too (1, 2, 4, 8, ...)")
    # Stateful steps (samples after each decode) repeat by design.
    assert "W203" not in codes(planned("vllm-head", engine()))


# --- golden plans -----------------------------------------------------------------------

CASES = [(p, e) for p in builtin_plans() for e in builtin_engines()]


@pytest.mark.parametrize("plan,engine_name", CASES, ids=[f"{p}--{e}" for p, e in CASES])
def test_golden_plans_are_clean(plan, engine_name):
    """Every golden plan is clean: no error, no warning (tests/test_golden.py pins each golden file to
    exactly this expansion; loading the files again here would only cost time)."""
    eng = engine(base=os.path.join(os.path.dirname(HERE), "plans", "engines", f"{engine_name}.yaml"))
    findings, skipped = lints.run(planned(plan, eng), eng.facts)
    assert [f.line() for f in findings if f.lint.code != "W204"] == [] and skipped == []
    # W204 names what the mirrored vLLM compiles after ready: vLLM 0.25's gaps on every shipped engine
    # (FlashInfer's block-FP8 kernel, the V1 runner), none left where the plugin runs or on 0.33.
    assert bool([f for f in findings if f.lint.code == "W204"]) == (plan == "vllm-0.25")


def test_cases_cover_the_per_release_plans_and_every_shipped_engine():
    """CASES come from the shipped files: vllm-0.25 and vllm-0.33 are among them."""
    assert {"vllm-0.25", "vllm-0.33"} <= {plan for plan, _ in CASES}
    assert {e for _, e in CASES} == set(builtin_engines()) and len(CASES) == len(builtin_plans()) * len(builtin_engines())


@pytest.mark.parametrize("plan,engine_name", CASES, ids=[f"{p}--{e}" for p, e in CASES])
def test_warmup_check_passes_every_builtin_plan_on_every_shipped_engine(capsys, plan, engine_name):
    """The command itself (plan by name, engine by name): exit 0, no finding."""
    rc, out, err = warmup(capsys, "check", plan, "--engine", engine_name)
    assert (rc, err) == (0, "")
    assert out.startswith(f"warmup check: {plan} for {engine_name} (")
    if plan == "vllm-0.25":  # the release's own gaps: warnings, exit 0 unless --strict
        assert "\nWARNING W204 (plan): engine " in out and "\n0 errors, " in out
        assert warmup(capsys, "check", plan, "--engine", engine_name, "--strict")[0] == 1
    else:
        assert "\nNo problems: " in out


def test_check_golden_file_end_to_end(capsys):
    """A golden file checked as a saved plan: loaded, found fresh for its engine, linted."""
    rc, out, err = warmup(capsys, "check", os.path.join(GOLDEN, "vllm--deepseek-v3-fp8-tp8-h200.yaml"),
                          "--engine", "deepseek-v3-fp8-tp8-h200")
    assert (rc, err) == (0, "")
    assert out == ("warmup check: vllm for deepseek-v3-fp8-tp8-h200 (16 steps)\n\n"
                   "No problems: 16 lints over 16 steps.\n")


# --- the command ------------------------------------------------------------------------

def test_check_pre_40746_exit_1_with_explanation(capsys):
    rc, out, err = warmup(capsys, "check", PRE_40746, "--engine", EAGLE)
    assert rc == 1 and err == ""
    assert "ERROR E101 warmup_kernels/prefill: per-request query length 2 <= decode query length 2" in out
    assert "E101 prefill-classified-as-decode (error)" in out and "vLLM PR #40746" in out and "Fix: " in out
    assert out.rstrip().endswith("1 error, 0 warnings (16 lints run).")


def test_check_json(capsys):
    rc, out, _ = warmup(capsys, "check", PRE_40746, "-e", EAGLE, "--format", "json")
    data = json.loads(out)
    assert rc == 1 and data["errors"] == 1 and data["warnings"] == 0 and data["lints_skipped"] == []
    assert data["findings"] == [{"code": "E101", "name": "prefill-classified-as-decode", "severity": "error",
                                 "step": "warmup_kernels/prefill", "message": data["findings"][0]["message"]}]
    assert data["lints"]["E101"]["fix"].startswith("Give every prefill request")


def test_check_warnings_exit_0_unless_strict(capsys, tmp_path):
    plan = write_plan(tmp_path, [{"name": "flashinfer_autotune", "with": {"num_tokens": 4096}}])
    rc, out, _ = warmup(capsys, "check", plan, "-e", EAGLE)
    assert rc == 0 and "WARNING W202 flashinfer_autotune/autotune" in out and "0 errors, 1 warning" in out
    assert warmup(capsys, "check", plan, "-e", EAGLE, "--strict")[0] == 1


def test_check_expanded_file_without_engine_runs_engine_free_lints(capsys, tmp_path):
    small = write_engine(tmp_path, {"scheduler": {"max_num_seqs": 8}})  # a small file, quick to load
    path = tmp_path / "plan.yaml"
    assert cli.main(["plan", PRE_40746, "-e", small, "-o", str(path)]) == 0
    rc, out, _ = warmup(capsys, "check", path)
    assert rc == 0  # E101 needs to know the speculation: it is skipped, and the output says so
    assert "note: no --engine: ran 6 of 16 lints; E101, E102, E105, E106, E107, E110, W201, W202, W204, W206 need" in out
    rc, out, _ = warmup(capsys, "check", path, "--engine", small)
    assert rc == 1 and "ERROR E101" in out
    assert "note: plan 'pre-40746' is not a built-in plan" in out
    rc, out, _ = warmup(capsys, "check", path, "--engine", small, "--source-plan", PRE_40746)
    assert rc == 1 and "note:" not in out
    rc, _, err = warmup(capsys, "check", path, "--engine", small, "--source-plan", "vllm")
    assert rc == 2 and "--source-plan vllm is plan 'vllm', but this expanded plan was made from 'pre-40746'" in err


def test_check_list(capsys):
    rc, out, _ = warmup(capsys, "check", "--list")
    assert rc == 0 and all(f"{x.code} {x.name} [{x.severity}]" in out for x in lints.LINTS)


@pytest.mark.parametrize("argv, message", [
    (["check", "vllm"], "a plan needs --engine"),
    (["check"], "expected a plan or an expanded plan"),
    (["check", "no-such-plan", "-e", "deepseek-v3-fp8-tp8-h200"], "no built-in plan named 'no-such-plan'"),
    (["check", EAGLE], "this is an engine config"),
    (["check", "vllm", "-e", "deepseek-v3-fp8-tp8-h200", "--source-plan", "vllm"], "PLAN is already a plan"),
])
def test_check_invalid_input_exit_2(capsys, argv, message):
    rc, out, err = warmup(capsys, *argv)
    assert rc == 2 and out == "" and message in err and err.count("\n") == 1


def test_check_internal_error_exit_3(capsys, monkeypatch):
    def broken(plan, engine):
        raise RuntimeError("boom")
        yield  # pragma: no cover

    monkeypatch.setattr(lints, "LINTS", lints.LINTS + [lints.Lint("E199", "broken", "error", False, "x", "y",
                                                                  broken)])
    rc, _, err = warmup(capsys, "check", "vllm", "-e", "deepseek-v3-fp8-tp8-h200")
    assert rc == 3 and "internal error: RuntimeError: boom" in err


# --- log findings, their order, replayed requests, the limits' edges (issue 44 item 7) --

def log_findings(out: str) -> list[str]:
    """The findings about the logs, the log's path cut off and the time of the compile as <when>."""
    return [re.sub(r"\(\d{4}-\d\d-\d\dT[\d:]+Z\)", "(<when>)", line.split(".jsonl:", 1)[-1].split(".log:", 1)[-1])
            for line in out.splitlines() if " (logs): " in line]


def test_a_log_finding_says_when_and_why_the_plan_leaves_the_compile_cold(tmp_path, capsys):
    """E112 for a kernel no stage warms and no not-modelled entry names, W205 with the entry's action."""
    log = plugin_jit_log(tmp_path / "plugin_jit.jsonl")
    code, out, _ = warmup(capsys, "check", "vllm-0.25-plugin", "--engine", LLAMA, "--logs", log)
    assert code == 1
    assert log_findings(out) == [
        ("1: Triton _my_unplanned_kernel compiled after ready (<when>): no stage of this plan warms it, and its "
         "not-modelled list does not name it"),
        "4: torch.compile torch.compile frame compiled after ready (<when>): not modelled: torch.compile warmup runs",
    ]


def test_a_log_finding_for_a_variant_says_what_the_stage_plans_instead(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text(ACTIVATED + vllm_line("Triton kernel JIT compilation during inference: _topk_topp_kernel "
                                         "(constexprs={TOPK_ENABLED=True, TOPP_ENABLED=False, VOCAB_SIZE=32000}; "
                                         f"key=k){MONITOR_TAIL}"))
    code, out, _ = warmup(capsys, "check", "vllm-0.25-plugin", "--engine", LLAMA, "--logs", log)
    assert code == 1
    [finding] = log_findings(out)
    assert finding.startswith("2: Triton _topk_topp_kernel compiled after ready (11-27 03:46:47): ")
    assert "stage sampler_kernels warms _topk_topp_kernel" in finding  # absorb's words for a variant


def test_findings_come_plan_wide_first_then_in_step_order_whatever_their_codes():
    """`warmup check` lists what concerns the whole plan first, then each step's findings in the order
    the steps run (a later step's E1xx after an earlier step's W2xx)."""
    engine = load_engine(K192)  # its k = 192 linears: W206 for the plan as a whole
    data = expand(load_plan("vllm-0.33"), engine).to_dict()
    steps = data["steps"]
    assert [s["id"] for s in steps[:3]] == ["deep_gemm/gemm-n192-k512", "flashinfer_autotune/autotune",
                                            "warmup_kernels/prefill"]
    steps[0]["m_values"] = []                      # E108: the GEMM does nothing
    steps[1]["num_tokens"] = 1                     # W202: autotunes below the batches
    steps[2]["total_num_scheduled_tokens"] += 1    # E109: its requests do not add up
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts)
    assert [(f.step, f.lint.code) for f in findings] == [
        ("(plan)", "W204"), ("(plan)", "W206"), ("(plan)", "W206"), ("(plan)", "W206"),
        ("deep_gemm/gemm-n192-k512", "E108"), ("flashinfer_autotune/autotune", "W202"),
        ("warmup_kernels/prefill", "E109")]


LLAMA_ENGINE = "plans/engines/llama-3.1-8b-fp8-h100.yaml"


def with_prefill_again(before_cleanup: bool, **changes):
    """vllm-0.33 on Llama with its warmup prefill run a second time (with `changes`), before or after
    the cleanup that finishes its requests: (plan, engine)."""
    engine = load_engine(LLAMA_ENGINE)
    data = expand(load_plan("vllm-0.33"), engine).to_dict()
    steps = data["steps"]
    prefill = next(s for s in steps if s["id"] == "warmup_kernels/prefill")
    cleanup = next(i for i, s in enumerate(steps) if s["id"] == "warmup_kernels/cleanup")
    steps.insert(cleanup if before_cleanup else cleanup + 1, {**prefill, "id": "warmup_kernels/prefill-again", **changes})
    return ExpandedPlan.from_dict(data), engine


def test_a_request_prefilled_again_while_it_runs_is_inconsistent():
    """One line for the step: the first request, and how many more."""
    plan, engine = with_prefill_again(before_cleanup=True)
    findings, _ = lints.run(plan, engine.facts, codes=["E109"])
    assert [(f.step, f.message) for f in findings] == [
        ("warmup_kernels/prefill-again", "request _warmup_0_ is added again while it is running (and 1023 more)")]


def test_a_request_id_finished_by_a_cleanup_can_be_prefilled_again():
    plan, engine = with_prefill_again(before_cleanup=False)
    assert lints.run(plan, engine.facts, codes=["E104", "E107", "E109"])[0] == []


def test_a_decode_of_requests_no_prefill_added_is_inconsistent():
    engine = load_engine(LLAMA_ENGINE)
    data = expand(load_plan("vllm-0.33"), engine).to_dict()
    data["steps"] = [s for s in data["steps"] if s["id"] != "warmup_kernels/prefill"]
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=["E109"])
    assert (findings[0].step, findings[0].message) == (
        "warmup_kernels/decode-1", "request _warmup_0_ is decoded but not running (no prefill added it, or a "
        "cleanup finished it) (and 1023 more)")


def llama_findings(edit, codes: list, plan: str = "vllm-0.33") -> list:
    """(step, message) of the lints `codes` on `plan` for Llama, its steps (by id) edited by `edit`."""
    engine = load_engine(LLAMA_ENGINE)
    data = expand(load_plan(plan), engine).to_dict()
    edit({s["id"]: s for s in data["steps"]})
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=codes)
    return [(f.step, f.message) for f in findings]


def test_a_decode_that_outgrows_its_blocks_holds_too_few():
    def grow(steps):
        decode = steps["warmup_kernels/decode-1"]
        decode["requests"][0]["num_scheduled_tokens"] = 20   # 2 + 20 tokens: 2 blocks of 16, it holds 1
        decode["total_num_scheduled_tokens"] += 19
    assert llama_findings(grow, ["E102"]) == [
        ("warmup_kernels/decode-1", "1 request (_warmup_0_) hold 1 block in KV group 0; the scheduler would hold 2 "
                                    "for 22 tokens (block size 16)")]


def test_a_request_holding_blocks_in_too_few_kv_groups_is_one_finding_per_step():
    def drop_groups(steps):
        steps["warmup_kernels/prefill"]["requests"][0]["block_ids"] = []
    assert llama_findings(drop_groups, ["E102"]) == [
        (step, "requests hold blocks in 0 KV cache groups, the engine has 1")
        for step in ("warmup_kernels/prefill", "warmup_kernels/decode-1", "warmup_kernels/decode-2",
                     "warmup_kernels/decode-3")]


def test_a_prefill_is_taken_for_a_decode_only_when_its_longest_request_is_decode_sized():
    def one_short(steps):
        prefill = steps["warmup_kernels/prefill"]
        prefill["requests"][0]["num_scheduled_tokens"] = 1
        prefill["total_num_scheduled_tokens"] -= 1

    def all_short(steps):
        prefill = steps["warmup_kernels/prefill"]
        for r in prefill["requests"]:
            r["num_scheduled_tokens"] = 1
        prefill["total_num_scheduled_tokens"] = len(prefill["requests"])

    assert llama_findings(one_short, ["E101"]) == []
    assert [step for step, _ in llama_findings(all_short, ["E101"])] == ["warmup_kernels/prefill"]


def test_a_block_handed_out_twice_is_named_by_the_first_reuse():
    plan, engine = with_prefill_again(before_cleanup=True)
    findings, _ = lints.run(plan, engine.facts, codes=["E104"])
    assert [(f.step, f.message) for f in findings] == [
        ("warmup_kernels/prefill-again", "1024 block ids handed out twice (1, 2, 3, 4, ...); e.g. block 1 goes to "
                                         "_warmup_0_ again")]


BUDGET, MAX_LEN, NUM_BLOCKS = 8192, 131072, 31744  # Llama's max_num_batched_tokens, max_model_len, num_blocks


def test_llamas_limits_are_the_ones_these_tests_probe():
    facts = load_engine(LLAMA_ENGINE).facts
    assert (facts.scheduler.max_num_batched_tokens, facts.model.max_model_len, facts.kv_cache.num_blocks) == \
        (BUDGET, MAX_LEN, NUM_BLOCKS)


@pytest.mark.parametrize("total, over", [(BUDGET, False), (BUDGET + 1, True)])
def test_a_step_may_schedule_exactly_max_num_batched_tokens(total, over):
    def schedule(steps):
        steps["warmup_kernels/prefill"]["total_num_scheduled_tokens"] = total
    found = llama_findings(schedule, ["E106"])
    assert found == ([("warmup_kernels/prefill", f"schedules {total} tokens, more than max_num_batched_tokens "
                                                 f"{BUDGET}")] if over else [])


@pytest.mark.parametrize("step, tokens, over", [
    ("warmup_kernels/prefill", MAX_LEN, False), ("warmup_kernels/prefill", MAX_LEN + 1, True),
    ("warmup_kernels/decode-1", MAX_LEN - 2, False), ("warmup_kernels/decode-1", MAX_LEN - 1, True),  # 2 computed
])
def test_a_request_may_grow_to_exactly_max_model_len(step, tokens, over):
    def grow(steps):
        steps[step]["requests"][0]["num_scheduled_tokens"] = tokens
    found = llama_findings(grow, ["E106"])
    assert found == ([(step, f"1 request (_warmup_0_) grow past max_model_len {MAX_LEN}")] if over else [])


@pytest.mark.parametrize("block, out", [(NUM_BLOCKS - 1, False), (NUM_BLOCKS, True), (0, False), (-1, True)])
def test_block_ids_run_from_the_null_block_to_num_blocks_less_one(block, out):
    """Block 0 is the null block (E103's concern), not out of range; num_blocks and negative ids are."""
    def give(steps):
        steps["warmup_kernels/prefill"]["requests"][0]["block_ids"] = [[block]]
    found = llama_findings(give, ["E105"])
    assert found == ([("warmup_kernels/prefill", f"1 block id outside 1..{NUM_BLOCKS - 1} (num_blocks "
                                                 f"{NUM_BLOCKS}): {block}")] if out else [])


@pytest.mark.parametrize("tokens, over", [(BUDGET, False), (BUDGET + 1, True)])
def test_an_attention_step_may_run_exactly_max_num_batched_tokens(tokens, over):
    step = "prefill_attention/attention-h32-kv8-d128-t1"

    def run_tokens(steps):
        steps[step]["num_tokens"] = tokens
    found = llama_findings(run_tokens, ["E106"], plan="triton")
    assert found == ([(step, f"runs {tokens} tokens, more than max_num_batched_tokens {BUDGET}")] if over else [])


def test_more_running_requests_than_max_num_seqs_is_too_many():
    """A second prefill of 1024 new requests, each step within max_num_seqs (1024), 2048 running."""
    plan, engine = with_prefill_again(before_cleanup=True)
    data = plan.to_dict()
    again = next(s for s in data["steps"] if s["id"] == "warmup_kernels/prefill-again")
    for i, r in enumerate(again["requests"]):
        r["req_id"], r["block_ids"] = f"again-{i}", [[NUM_BLOCKS - 1 - i]]
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=["E107"])
    assert [(f.step, f.message) for f in findings] == [
        ("warmup_kernels/prefill-again", "2048 requests are running, more than max_num_seqs 1024")]


def test_two_replay_problems_of_a_step_are_one_line_and_one_more():
    plan, engine = with_prefill_again(before_cleanup=True)
    data = plan.to_dict()
    again = next(s for s in data["steps"] if s["id"] == "warmup_kernels/prefill-again")
    again["requests"], again["total_num_scheduled_tokens"] = again["requests"][:2], 4
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=["E109"])
    assert [(f.step, f.message) for f in findings] == [
        ("warmup_kernels/prefill-again", "request _warmup_0_ is added again while it is running (and 1 more)")]


def test_a_prefill_request_may_not_schedule_more_than_the_prompt():
    def longer(steps):
        steps["warmup_kernels/prefill"]["requests"][0]["num_scheduled_tokens"] = 3
        steps["warmup_kernels/prefill"]["total_num_scheduled_tokens"] += 1
    assert llama_findings(longer, ["E109"])[0] == (
        "warmup_kernels/prefill", "1 request (_warmup_0_) schedule more tokens than the 2-token prompt")


@pytest.mark.parametrize("spec, bad", [(0, False), (1, True)])
def test_a_decode_must_schedule_a_verified_token_beyond_its_drafts(spec, bad):
    def drafts(steps):
        steps["warmup_kernels/decode-1"]["requests"][0]["num_spec_tokens"] = spec  # of 1 scheduled token
    found = llama_findings(drafts, ["E109"])
    assert found == ([("warmup_kernels/decode-1", "1 request (_warmup_0_) schedule no verified token: "
                                                  "num_spec_tokens must be < num_scheduled_tokens")] if bad else [])


def test_a_decode_continues_from_the_tokens_its_request_has_computed():
    def skip_ahead(steps):
        steps["warmup_kernels/decode-1"]["requests"][0]["num_computed_tokens"] = 5
    assert llama_findings(skip_ahead, ["E109"])[0] == (
        "warmup_kernels/decode-1", "request _warmup_0_ continues from 5 computed tokens, but has computed 2")


def test_blocks_a_decode_brings_in_a_new_kv_group_are_held_from_then_on():
    """A request prefilled with no blocks (a finding) that a decode gives its group's first block holds
    blocks in every group from that decode on."""
    def late_blocks(steps):
        steps["warmup_kernels/prefill"]["requests"][0]["block_ids"] = []
        steps["warmup_kernels/decode-1"]["requests"][0]["new_block_ids"] = [[NUM_BLOCKS - 1]]
    assert llama_findings(late_blocks, ["E102"]) == [
        ("warmup_kernels/prefill", "requests hold blocks in 0 KV cache groups, the engine has 1")]


QWEN_ENGINE = "plans/engines/qwen3-30b-a3b-fp8-h100.yaml"
W13 = "triton_gemm/grouped_gemm-w13-e128-n1536-k2048"
# Qwen3-30B-A3B: 8192 tokens x top_k 8 = 65536 routed rows, each of its 128 experts padded by up to
# 127 rows to the alignment of 128: the largest M_sum is 65536 + 128 * 127 = 81792 (a multiple of 128)
LARGEST_M_SUM = 81792


def qwen_triton_findings(step_id: str, codes: list, **fields) -> list:
    engine = load_engine(QWEN_ENGINE)
    data = expand(load_plan("triton"), engine).to_dict()
    next(s for s in data["steps"] if s["id"] == step_id).update(fields)
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=codes)
    return [(f.step, f.message) for f in findings]


def test_a_grouped_gemm_may_run_up_to_every_token_routed_and_every_expert_padded():
    assert qwen_triton_findings(W13, ["E110"], m_values=[128, LARGEST_M_SUM]) == []
    assert qwen_triton_findings(W13, ["E110"], m_values=[128, LARGEST_M_SUM + 128]) == [
        (W13, f"1 M-value outside [1, {LARGEST_M_SUM}] ({LARGEST_M_SUM + 128}): above the largest M_sum "
              f"{LARGEST_M_SUM} (8192 tokens x top_k 8, padded)")]


def test_a_gemm_m_of_zero_is_out_of_range():
    step = "triton_gemm/gemm-n5120-k2048"
    assert qwen_triton_findings(step, ["E110"], m_values=[0, 1]) == [
        (step, "1 M-value outside [1, 8192] (0): below 1")]


def test_the_triton_block_fp8_gemm_takes_any_n_and_k_in_whole_scale_blocks():
    step = "triton_gemm/gemm-n5120-k2048"
    assert qwen_triton_findings(step, ["E111"], n=5121) == []
    assert qwen_triton_findings(W13, ["E111"], n=1537) == []  # its grouped GEMM too
    assert qwen_triton_findings(step, ["E111"], k=2049) == [
        (step, "fp8_gemm cannot take this shape: k=2049 is not a multiple of 128")]


def with_copies(step_id: str, *m_values: list) -> list:
    """W203 on Qwen's triton plan with copies of one GEMM step (one per M-value list) after it."""
    engine = load_engine(QWEN_ENGINE)
    data = expand(load_plan("triton"), engine).to_dict()
    at = next(i for i, s in enumerate(data["steps"]) if s["id"] == step_id)
    for i, values in enumerate(m_values):
        data["steps"].insert(at + 1 + i, {**data["steps"][at], "id": f"{step_id}-copy{i}", "m_values": values})
    findings, _ = lints.run(ExpandedPlan.from_dict(data), engine.facts, codes=["W203"])
    return [(f.step, f.message) for f in findings]


def test_a_gemm_step_duplicates_another_only_where_their_m_values_meet():
    step = "triton_gemm/gemm-n5120-k2048"
    assert with_copies(step, [2, 3]) == []   # its M-values end ... 49, 193, 385: none of 2, 3
    assert with_copies(step, [49, 50]) == [(f"{step}-copy0", f"duplicates {step}: 1 of its M-values run there too (49)")]


def test_a_step_is_named_a_duplicate_once_however_many_steps_it_repeats():
    step = "triton_gemm/gemm-n5120-k2048"
    assert with_copies(step, [49], [49]) == [
        (f"{step}-copy0", f"duplicates {step}: 1 of its M-values run there too (49)"),
        (f"{step}-copy1", f"duplicates {step}: 1 of its M-values run there too (49)")]
