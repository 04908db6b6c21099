"""Stale saved plans: an expanded plan is refused when its inputs changed, naming which one."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import yaml

from planner import cli
from planner import api as stale
from planner.engine.config import engine_from_document, load_engine
from planner.errors import PlanError
from planner.plan.authored import load_plan
from planner.plan.digest import digest
from planner.plan.expand import expand
from planner.yamlio import Document

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
EAGLE = os.path.join(HERE, "fixtures", "engines", "review-llama-eagle1.yaml")
PRE_40746 = os.path.join(HERE, "fixtures", "plans", "pre-40746.yaml")
SHA = r"sha256:[0-9a-f]{12}…"


def test_digest_is_sha256_of_canonical_json():
    value = {"b": [1, 2], "a": "é"}
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert digest(value) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert digest({"a": "é", "b": [1, 2]}) == digest(value) != digest({"a": "e", "b": [1, 2]})


def engine(**changes):
    with open(EAGLE) as f:
        data = yaml.safe_load(f)
    for section, values in changes.items():
        data[section] = {**data[section], **values} if isinstance(values, dict) else values
    return engine_from_document(Document(data=data, file="changed.yaml"))


@pytest.fixture(scope="module")
def saved():
    """vllm planned for the EAGLE engine, as `warmup plan -o` saved it."""
    return expand(load_plan("vllm"), load_engine(EAGLE))


def refusal(expanded, eng, plan) -> str:
    with pytest.raises(PlanError) as caught:
        stale.check_fresh(expanded, eng, plan, file="saved.yaml")
    return str(caught.value)


def test_fresh_plan_passes(saved):
    stale.check_fresh(saved, load_engine(EAGLE), load_plan("vllm"))
    stale.check_fresh(saved, load_engine(EAGLE), None)


def test_cosmetic_engine_changes_do_not_make_a_plan_stale(saved):
    stale.check_fresh(saved, engine(name="renamed", description="same engine, new words"), load_plan("vllm"))


def test_engine_change_is_named(saved):
    message = refusal(saved, engine(scheduler={"max_num_seqs": 512}), load_plan("vllm"))
    assert message.startswith("saved.yaml: stale plan: the engine config changed since this plan was made "
                              "(engine digest sha256:")
    assert message.endswith("); re-run `warmup plan vllm --engine changed.yaml` and review the change with "
                            "`warmup diff`")
    old, new = saved.inputs["engine"][:19], engine(scheduler={"max_num_seqs": 512}).shaping_fields()
    assert f"{old}… -> {digest(new)[:19]}…" in message
    assert "\n" not in message


def test_another_engine_is_named_too(saved):
    message = refusal(saved, load_engine("llama-3.1-8b-fp8-h100"), None)
    assert "made for engine 'review-llama-eagle1', given 'llama-3.1-8b-fp8-h100'" in message
    assert "--engine llama-3.1-8b-fp8-h100`" in message  # a built-in engine by its name


def test_plan_change_is_named(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", "extends": "vllm"}))
    expanded = expand(load_plan(str(path)), load_engine(EAGLE))
    path.write_text(yaml.safe_dump({"name": "mine", "extends": "vllm",
                                    "stages": [{"name": "warmup_kernels", "with": {"num_reqs": 8}}]}))
    message = refusal(expanded, load_engine(EAGLE), load_plan(str(path)))
    assert "stale plan: the plan changed since this plan was made (plan digest sha256:" in message
    both = refusal(expanded, engine(scheduler={"max_num_seqs": 512}), load_plan(str(path)))
    assert "the plan and the engine config changed since this plan was made (plan digest" in both
    assert "; engine digest" in both
    # Without the plan, only the engine and the planner are compared: the plan change goes unseen.
    stale.check_fresh(expanded, load_engine(EAGLE), None)


def test_planner_version_change_is_named(saved, monkeypatch):
    from planner.plan import digest as digests

    monkeypatch.setattr(digests, "__version__", "9.9.9")
    message = refusal(saved, load_engine(EAGLE), load_plan("vllm"))
    assert "the planner version changed since this plan was made (planner version 0.1.0 -> 9.9.9)" in message


def test_edited_header_is_refused(saved):
    edited = saved._replace(inputs={**saved.inputs, "engine": digest("something else")})
    assert "does not match its inputs: the header was edited" in refusal(edited, load_engine(EAGLE), None)


def test_builtin_plan_is_found_by_name(saved):
    assert stale.source_plan(saved, None, file="saved.yaml").name == "vllm"
    assert stale.source_plan(expand(load_plan(PRE_40746), load_engine(EAGLE)), None, file="saved.yaml") is None


# --- warmup check refuses a stale saved plan (exit 2) -----------------------------------


def test_check_refuses_a_stale_plan(capsys, tmp_path):
    with open(EAGLE) as f:
        data = yaml.safe_load(f)
    data["scheduler"]["max_num_seqs"] = 8
    engine_path = tmp_path / "engine.yaml"
    engine_path.write_text(yaml.safe_dump(data))
    saved_path = tmp_path / "saved.yaml"
    assert cli.main(["plan", "vllm", "-e", str(engine_path), "-o", str(saved_path)]) == 0
    assert cli.main(["check", str(saved_path), "-e", str(engine_path)]) == 0
    data["kv_cache"]["num_blocks"] = 1000  # the engine changed after the plan was saved
    engine_path.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    assert cli.main(["check", str(saved_path), "-e", str(engine_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"warmup: error: {saved_path}: stale plan: the engine config changed since this plan "
                          "was made (engine digest sha256:")
    assert err.count("\n") == 1


# --- the DeepGEMM install: an input of plans with DeepGEMM steps (issue 18) ------------------------

DG_A = "2.5.0@/venv/lib/python3.12/site-packages/vllm/third_party/deep_gemm/include"
DG_B = "2.8.1@/other/vllm/third_party/deep_gemm/include"
DSV3 = "deepseek-v3-fp8-tp8-h200"


def test_deep_gemm_install_is_an_input_of_plans_with_deep_gemm_steps():
    plan, eng = load_plan("vllm"), load_engine(DSV3)
    without = expand(plan, eng)
    with_a = expand(plan, eng, DG_A)
    assert "deep_gemm" not in without.inputs  # stated nowhere: nothing recorded, goldens unchanged
    assert with_a.inputs["deep_gemm"] == DG_A and with_a.digest != without.digest
    assert expand(plan, eng, DG_A).digest == with_a.digest  # deterministic
    assert "deep_gemm" not in expand(load_plan("triton"), load_engine("llama-3.1-8b-fp8-h100"), DG_A).inputs


def test_another_deep_gemm_makes_the_plan_stale_naming_both():
    plan, eng = load_plan("vllm"), load_engine(DSV3)
    saved_a = expand(plan, eng, DG_A)
    stale.check_fresh(saved_a, eng, plan, deep_gemm=DG_A)
    stale.check_fresh(saved_a, eng, plan)  # nothing installed here: not compared
    with pytest.raises(PlanError) as caught:
        stale.check_fresh(saved_a, eng, plan, file="saved.yaml", deep_gemm=DG_B)
    message = str(caught.value)
    assert message.startswith("saved.yaml: stale plan: the DeepGEMM install changed since this plan was made "
                              f"(deep_gemm version {DG_A} -> {DG_B})")
    assert "\n" not in message


def test_plan_cli_records_deep_gemm_and_refuses_a_bad_value(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert cli.main(["plan", "vllm", "--engine", DSV3, "-f", "json", "-o", str(out), "--deep-gemm", DG_A]) == 0
    assert json.loads(out.read_text())["inputs"]["deep_gemm"] == DG_A
    bad = tmp_path / "bad.json"
    assert cli.main(["plan", "vllm", "--engine", DSV3, "-o", str(bad), "--deep-gemm", "2.8.1@relative/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("warmup: error: command line: --deep-gemm '2.8.1@relative/x': expected VERSION")
    assert err.count("\n") == 1 and not bad.exists()
    assert stale.parse_deep_gemm("2.6.1") == "2.6.1"
    assert stale.parse_deep_gemm("2.6.1@/a/b/../include") == "2.6.1@/a/include"
