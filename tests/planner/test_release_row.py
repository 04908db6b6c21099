"""A new vLLM release is one row of planner/engine/releases.py plus its plan file (issue 36 item 1).

The made-up release 0.99.0 is registered into the table for one test (monkeypatch) with rules of
its own, and its plan is a file in a temporary folder: no other file changes, and yet it is
planned with its rules, in the parity tests' release list and setup_vllm.sh's installs, and
accepted by the plugin's release lookup and `--from-vllm`. The other tests hold that no other
place keeps a release list the row would miss.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import subprocess
import sys

import pytest

from planner.cli import version_text
from planner.engine import releases
from planner.engine.config import load_engine
from planner.engine.releases import VLLM_RELEASES, VllmRelease
from planner.plan.authored import load_plan
from planner.plan.expand import expand

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINE = "llama-3.1-8b-fp8-h100"  # a dense block-FP8 engine: Model Runner V2 under 0.33.0


def all_v1(engine) -> str:
    return "the made-up release runs every model on V1"


def triton_linear(layer, dtype, capability, flashinfer=True):
    return "triton" if layer.get("quant") else None


def triton_sampler(version, engine):
    return "triton", f"vLLM {version}: the made-up release has no FlashInfer sampler"


@pytest.fixture
def release_099(tmp_path, monkeypatch):
    """Row 0.99.0 in the table, its plan vllm-0.99 (0.33.0's stages) in a temporary folder."""
    plan = tmp_path / "vllm-0.99.yaml"
    plan.write_text(f'name: vllm-0.99\nextends: {os.path.join(ROOT, "plans", "vllm-0.33.yaml")}\n'
                    'vllm_release: "0.99.0"\n')
    row = VllmRelease("0.99.0", str(plan), all_v1, triton_linear, triton_sampler, flashinfer="9.9.9")
    monkeypatch.setitem(VLLM_RELEASES, "0.99.0", row)
    return row


def test_a_made_up_release_is_planned_with_its_rows_rules(release_099):
    engine = load_engine(ENGINE)
    plan = load_plan(release_099.plan)
    assert plan.vllm_release == "0.99.0"
    names = engine.expression_names("0.99.0")
    assert (names["model_runner"], names["sampler"]) == ("v1", "triton")
    assert releases.model_runner("0.99.0", engine.facts)[1] == (
        "vLLM 0.99.0 runs the V1 model runner: the made-up release runs every model on V1")
    assert engine.expression_names("0.33.0")["model_runner"] == "v2"
    stages = {step.stage for step in expand(plan, engine).steps}
    ours = {step.stage for step in expand(load_plan("vllm-0.33"), engine).steps}
    assert "warmup_kernels" in ours and stages == ours - {"warmup_kernels"}  # V1: no synthetic batches


def test_a_made_up_release_is_parity_checked(release_099, monkeypatch):
    from tests.integration.vllm_parity import test_parity as parity

    installed = "0.25=/a,0.33=/b,0.99=/c"
    assert parity.releases(installed) == {"0.25": "/a", "0.33": "/b", "0.99": "/c"}
    assert parity.not_installed("0.25=/a,0.33=/b") == ["0.99.0"]  # its env missing fails the parity run
    assert parity.row_of("0.99") is release_099
    engine = load_engine(ENGINE)
    assert parity.plan_facts("0.99", engine)["warmup_kernels"] == []  # the row's plan, its V1 rule
    layers = {layer["name"]: "triton" for layer in engine.data["model"]["linear"] if layer.get("kernel")}
    vllm = {"model_runner": "v1", "flashinfer": True, "linear_kernels": layers,
            "linear_kernels_without_flashinfer": layers, "sampler": "triton"}
    assert layers and parity.compare_choices("0.99", engine, vllm) == {
        "model_runner": None, "linear_kernels": None, "sampler": None}
    assert parity.compare_choices("0.33", engine, vllm)["model_runner"] == ("v1", "v2")
    assert "0.99.0 9.9.9" in releases.setup_lines()


def test_a_made_up_release_is_accepted_by_the_plugin(release_099):
    from vllm_bridge import releases as bridge
    from vllm_bridge.cli import check_release, supported_releases

    row = bridge.release_for("0.99.0")
    assert (row.plan, row.worker_module, row.warmup_method) == (
        release_099.plan, "vllm.v1.worker.gpu_worker", "compile_or_warm_up_model")
    assert list(bridge.RELEASES) == ["0.25.0", "0.33.0", "0.99.0"]
    check_release("0.99.0")
    assert supported_releases()[-1] == "0.99"
    assert "  vllm 0.99.0  plan " + release_099.plan in version_text()
    with pytest.raises(bridge.UnsupportedVllm, match="supports vLLM 0.25.0, 0.33.0, 0.99.0 "):
        bridge.release_for("0.98.0")


def test_a_renamed_name_is_keyed_by_a_row(monkeypatch):
    from vllm_bridge import releases as bridge

    assert set(bridge.RENAMED) <= set(VLLM_RELEASES)
    assert all(set(names) <= set(bridge.Release._fields) - {"plan"} for names in bridge.RENAMED.values())
    monkeypatch.setitem(bridge.RENAMED, "0.33.0", {"warmup_method": "_compile_or_warm_up_model"})
    assert (bridge.release_for("0.33.0").warmup_method, bridge.release_for("0.25.0").warmup_method) == (
        "_compile_or_warm_up_model", "compile_or_warm_up_model")


def test_a_plan_of_a_release_with_no_row_is_one_line_exit_2(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text('name: p\nvllm_release: "0.98.0"\nstages: []\n')
    done = subprocess.run([sys.executable, "-m", "planner.cli", "plan", str(plan), "--engine", ENGINE],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"warmup: error: {plan}:2: vllm_release: expected one of '0.25.0', '0.33.0' "
                           "(planner/engine/releases.py), got '0.98.0'\n")


def test_no_other_place_holds_a_release_list():
    """A version or release plan name of the table written anywhere else in the packages is a hidden
    list the next row would miss (the plan schema's enum and vllm_choices' tuples were)."""
    names = {v for v in VLLM_RELEASES} | {row.plan for row in VLLM_RELEASES.values()}
    found = [f"{os.path.relpath(path, ROOT)}:{node.lineno}"
             for floor in ("kernel_model", "planner", "executor", "vllm_bridge")
             for path in glob.glob(os.path.join(ROOT, floor, "**", "*.py"), recursive=True)
             if not path.endswith(os.path.join("planner", "engine", "releases.py"))
             for node in ast.walk(ast.parse(open(path, encoding="utf-8").read()))
             if isinstance(node, ast.Constant) and node.value in names]
    assert found == []
    with open(os.path.join(ROOT, "schemas", "plan.schema.json"), encoding="utf-8") as f:
        assert set(json.load(f)["properties"]["vllm_release"]) == {"type", "maxLength", "description"}
    with open(os.path.join(ROOT, "tests", "integration", "vllm_parity", "setup_vllm.sh"), encoding="utf-8") as f:
        code = "\n".join(line for line in f.read().splitlines() if not line.lstrip().startswith("#"))
    assert "-m planner.engine.releases setup" in code and not any(v in code for v in VLLM_RELEASES)


def test_setup_reads_the_table_from_the_command_line():
    done = subprocess.run([sys.executable, "-m", "planner.engine.releases", "setup"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == releases.setup_lines() == [
        f"{v} {VLLM_RELEASES[v].flashinfer or '-'}" for v in releases.supported()]


def test_the_engine_fills_in_every_rows_linear_kernel():
    """The engine config is release-independent, so the kernel it fills in for a block-FP8 linear
    (planner/engine/config.py) must be every row's rule; a release that selects otherwise needs the engine
    to record the kernel per release first."""
    from planner.engine.vllm_choices import default_linear_kernel

    assert {row.linear_kernel for row in VLLM_RELEASES.values()} == {default_linear_kernel}
