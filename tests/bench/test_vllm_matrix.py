"""bench/vllm_matrix.py: issue 53's GPU matrix, its device calls and its table, without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_vllm_startup_bench import load  # the bench scripts loaded by path, once

matrix = load("vllm_matrix")


def test_every_model_of_the_matrix_is_a_fixture_and_the_classes_of_issue_53_are_there():
    models = matrix.load_matrix()
    covers = " ".join(c for m in models for c in m["covers"])
    for need in ("dense bf16", "fp8 per tensor", "fp8 block", "compressed-tensors fp8 per channel", "AWQ", "GPTQ",
                 "vocab not a multiple of 16", "not of 64", "tied embeddings", "soft caps", "MoE at TP 1",
                 "MLA + MoE at TP 1", "float32", "TP 2", "speculative decoding"):
        assert need in covers, need
    assert any(m["aside"] for m in models) and len({matrix.row_key(m) for m in models}) >= 12


def test_a_model_without_its_fixture_is_refused(tmp_path):
    listed = tmp_path / "m.yaml"
    listed.write_text("models:\n  - {model: no-such-model, covers: [x], aside: true}\n")
    with pytest.raises(SystemExit, match="no-such-model: no tests/fixtures/hf/no-such-model.json"):
        matrix.load_matrix(str(listed))


def test_calls_fit_the_budget_and_never_mix_machine_kinds():
    models = [{"model": f"m{i}", "tp": tp} for i, tp in enumerate((1, 1, 1, 2, 2, 1))]
    groups = matrix.calls(models, budget_s=2 * matrix.RUN_ESTIMATE_S)
    assert [[m["model"] for m in g] for g in groups] == [["m0", "m1"], ["m2"], ["m3", "m4"], ["m5"]]
    assert matrix.calls(models, budget_s=1) == [[m] for m in models]


def run_dir(root, name, model, tp=1, ready=100.0, ok=300, died_at=None, failed_step=None, start=1.0, spec=None):
    part = root / name / "plugin-cold"
    part.mkdir(parents=True)
    phases = [{"name": "first request", "end": 10.0}, {"name": "HTTP requests (288, 16 at a time)", "end": 20.0}]
    marks = {} if died_at is None else {"engine dead": {"t": died_at}}
    part.joinpath("result.json").write_text(json.dumps({
        "model_dir": f"/tmp/warmup-proof/models/{model}", "tensor_parallel_size": tp, "script_start": start,
        "speculative_config": spec,
        "ready_s": ready, "http": {"ok": ok, "failed": 300 - ok}, "phases": phases, "log_marks": marks,
        "compiles_after_ready": {"events": 0}, "cache_new_after_ready": {"files": {"triton": 0}},
        "kv_cache": {"kv_cache_size_tokens": 1000}, "generic_variant_runs": ["_k"] if tp == 2 else [],
        "rank_events_after_ready": [{"rank": 0, "events": 2 if spec else 0}]}))
    steps = [{"id": "a", "status": "ok"}] + ([{"id": failed_step, "status": "failed"}] if failed_step else [])
    part.joinpath("plan_report.json").write_text(json.dumps({"steps": steps}))


def test_the_table_has_a_row_per_model_run_and_the_facts_of_the_latest_run(tmp_path):
    run_dir(tmp_path, "old", "smollm-135m", ready=None, ok=0, start=1.0)
    run_dir(tmp_path, "new", "smollm-135m", died_at=25.0, start=2.0)          # died at the stop: no death
    run_dir(tmp_path, "cohere", "c4ai-command-r7b-12-2024", ok=0, died_at=15.0, failed_step="serving_paths/x")
    run_dir(tmp_path, "ds2", "deepseek-v3-5l", tp=2)
    run_dir(tmp_path, "mtp", "deepseek-v3-5l", ready=150.0, spec={"method": "mtp", "num_speculative_tokens": 1})
    rows = matrix.table([str(tmp_path)], matrix.load_matrix())
    by_model = {r.split(" | ")[0].lstrip("| "): r.split(" | ") for r in rows[2:]}
    assert set(by_model) == {"smollm-135m", "c4ai-command-r7b-12-2024", "deepseek-v3-5l (TP 2)",
                             "deepseek-v3-5l (mtp:1)"}  # the MTP run is not the plain TP 1 row
    assert by_model["deepseek-v3-5l (mtp:1)"][3] == "150.0 s"
    assert by_model["deepseek-v3-5l (mtp:1)"][5] == "0 / 2 / 0", "the plugin's monitor saw what vLLM's did not"
    assert by_model["smollm-135m"][3:7] == ["100.0 s", "300 / 0", "0 / 0 / 0", "0"]
    assert by_model["c4ai-command-r7b-12-2024"][4:8] == ["0 / 300", "0 / 0 / 0", "1", "serving_paths/x"]
    assert by_model["deepseek-v3-5l (TP 2)"][8] == "_k"


def test_run_serves_each_model_through_the_proof_script(tmp_path):
    done = subprocess.run([sys.executable, "bench/vllm_matrix.py", "run", "--models", "smollm-135m,codellama-7b-hf",
                           "--dry-run"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("[matrix] ") == 2 and "MODEL=smollm-135m" in done.stdout
    assert "--jit-monitor-mode error" in done.stdout and "WITH_FLASHINFER=1" in done.stdout
    mtp = subprocess.run([sys.executable, "bench/vllm_matrix.py", "run", "--models", "deepseek-v3-5l", "--spec",
                          "mtp:1", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert mtp.returncode == 0, mtp.stderr
    assert mtp.stdout.count("[matrix] ") == 1 and "SPEC=mtp:1" in mtp.stdout
    assert '--speculative-config \'{"method": "mtp", "num_speculative_tokens": 1}\'' in mtp.stdout
    wrong = subprocess.run([sys.executable, "bench/vllm_matrix.py", "run", "--models", "phi-4", "--tp", "2"],
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0 and "not in" in wrong.stderr and "phi-4" in wrong.stderr
