"""Plan inheritance, the built-in catalogue, and the command line."""

import json
import os
import subprocess
import sys

import yaml
from factories import make_engine, steps_of, write_plan

from planner.cli import main
from planner.plan.authored import load_plan
from planner.resources import builtin_engines, builtin_plans


def test_builtin_catalogue():
    assert {"vllm", "vllm-head"} <= set(builtin_plans())
    assert {"llama-3.1-8b-fp8-h100", "qwen3-30b-a3b-fp8-h100", "deepseek-v3-fp8-tp8-h200",
            "mixtral-8x7b-tp2-h100"} <= set(builtin_engines())


def test_extends_merges_parameters_key_by_key(tmp_path):
    plan = load_plan(write_plan(tmp_path, """
        name: variant
        extends: vllm
        stages:
          - name: deep_gemm
            with: {mode: full}
          - name: flashinfer_autotune
            enabled: false
          - name: extra
            kind: prefill_attention
            with: {num_tokens: [16, 17]}
    """))
    names = [s.name for s in plan.stages]
    assert names == ["deep_gemm", "triton_nvfp4_prefill", "cudagraph", "warmup_kernels", "extra"]
    deep_gemm = plan.stages[0]
    assert deep_gemm.params["mode"] == "full" and deep_gemm.params["grouped_m_values"] == "block_m_steps"
    assert deep_gemm.when == "device_capability >= 90"
    assert plan.files[0].endswith("plan.yaml") and plan.files[1].endswith("vllm.yaml")


def test_extends_relative_path_and_chain(tmp_path):
    write_plan(tmp_path, "name: base\nextends: vllm-head\nstages: [{name: warmup_kernels, with: {num_reqs: 5}}]\n",
               "base.yaml")
    child = write_plan(tmp_path, "name: child\nextends: base.yaml\nstages: [{name: deep_gemm, when: false}]\n",
                       "child.yaml")
    steps = steps_of(child, make_engine())
    assert len(steps_of(child, make_engine(), kind="prefill")[0].requests) == 5
    assert not [s for s in steps if s.stage == "deep_gemm"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_formats(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "plan", "vllm", "--engine", "llama-3.1-8b-fp8-h100", "-f", "json")
    data = json.loads(out)
    assert code == 0 and data["steps"][0]["kind"] == "gemm"
    code, out, _ = run_cli(capsys, "plan", "vllm", "--engine", "llama-3.1-8b-fp8-h100")
    assert code == 0 and out.startswith("# warmup-planner expanded plan")
    target = tmp_path / "out.yaml"
    code, out, _ = run_cli(capsys, "plan", "vllm", "--engine", "plans/engines/llama-3.1-8b-fp8-h100.yaml",
                           "-o", str(target))
    assert code == 0 and out == "" and target.read_text().startswith("# warmup-planner")


def test_validate_detects_each_kind(capsys, tmp_path):
    expanded = tmp_path / "e.yaml"
    main(["plan", "vllm", "--engine", "mixtral-8x7b-tp2-h100", "-o", str(expanded)])
    code, out, _ = run_cli(capsys, "validate", "plans/vllm.yaml", "plans/engines/mixtral-8x7b-tp2-h100.yaml",
                           str(expanded))
    assert code == 0
    assert out.splitlines() == ["plans/vllm.yaml: ok (plan)", "plans/engines/mixtral-8x7b-tp2-h100.yaml: ok (engine)",
                                f"{expanded}: ok (expanded plan)"]


def test_validate_rejects_edited_expanded_plan(capsys, tmp_path):
    expanded = tmp_path / "e.yaml"
    main(["plan", "vllm", "--engine", "mixtral-8x7b-tp2-h100", "-o", str(expanded)])
    expanded.write_text(expanded.read_text().replace("kind: cudagraph", "kind: teleport"))
    code, _, err = run_cli(capsys, "validate", str(expanded))
    assert code == 2 and "steps[1].kind" in err


def test_plans_command_lists_catalogue(capsys):
    code, out, _ = run_cli(capsys, "plans")
    assert code == 0 and "vllm-head" in out and "deepseek-v3-fp8-tp8-h200" in out


def test_engine_from_hf(capsys, tmp_path):
    target = tmp_path / "engine.yaml"
    code, _, _ = run_cli(capsys, "engine", "--from-hf", "tests/fixtures/hf/qwen3-30b-a3b-fp8.json",
                         "--gpu", "H200", "--max-num-batched-tokens", "16384", "-o", str(target))
    assert code == 0
    engine = yaml.safe_load(target.read_text())
    assert engine["scheduler"]["max_num_batched_tokens"] == 16384 and engine["device"]["name"] == "H200"
    code, _, _ = run_cli(capsys, "plan", "vllm", "--engine", str(target), "-f", "table")
    assert code == 0


def test_engine_from_hf_bad_inputs(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = run_cli(capsys, "engine", "--from-hf", str(bad))
    assert code == 2 and f"{bad}:1: invalid JSON" in err
    bad.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    code, _, err = run_cli(capsys, "engine", "--from-hf", str(bad))
    assert code == 2 and "GPT2LMHeadModel" in err
    code, _, err = run_cli(capsys, "engine", "--from-hf", "tests/fixtures/hf/llama-3.1-8b-instruct-fp8-block.json",
                           "--gpu", "Z80")
    assert code == 2 and "Z80" in err


def test_console_script_runs_from_anywhere(tmp_path):
    """The installed `warmup` finds built-in plans, engines and schemas without a checkout."""
    exe = os.path.join(os.path.dirname(sys.executable), "warmup")
    if not os.path.exists(exe):
        import pytest
        pytest.skip("warmup console script not installed in this interpreter's environment")
    out = subprocess.run([exe, "plan", "vllm", "--engine", "qwen3-30b-a3b-fp8-h100", "-f", "table"],
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "Totals:" in out


def test_import_planner_stays_pure():
    code = "import sys, planner.cli, planner.plan.expand, planner.engine.config, planner.plan.authored; " \
           "print(sorted(m for m in ('torch', 'triton', 'numpy', 'executor') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
