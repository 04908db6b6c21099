"""`warmup engine --from-vllm` against the installed vLLM releases (WARMUP_VLLM_ENVS, as
tests/integration/vllm_parity): one subprocess per build with the release on its sys.path.

Each VllmConfig build takes ~20 s on CPU, so each release builds two engines once (module
fixtures) and every assertion reads them:
* Llama-3.1-8B FP8 (block), tp 1, --num-gpu-blocks-override and --max-model-len given;
* Qwen3-30B-A3B FP8 (MoE), tp 2, n-gram speculative decoding (k = 2), KV blocks estimated.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from planner.engine import hf
from planner.engine.config import engine_from_document
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.steps import CudaGraph
from planner.yamlio import Document, load_file
from tests.integration.vllm_parity.test_parity import RELEASES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf")
NGRAM = '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}'
# name -> (fixture, `vllm serve` arguments after the model, the same engine through --from-hf)
MODELS = {
    "llama": ("llama-3.1-8b-instruct-fp8-block.json", ["--num-gpu-blocks-override", "4000", "--max-model-len", "16384"],
              {"num_blocks": 4000, "max_model_len": 16384}),
    "qwen": ("qwen3-30b-a3b-fp8.json", ["--tensor-parallel-size", "2", "--speculative-config", NGRAM], {"tp": 2}),
}
needs_vllm = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")
pytestmark = needs_vllm


def warmup(version: str, *argv: str) -> subprocess.CompletedProcess:
    """`warmup ARGV` in a process whose sys.path holds vLLM `version`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, without_flashinfer(RELEASES[version])]),
           "VLLM_LOGGING_LEVEL": "ERROR"}
    env.pop("VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER", None)
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    return subprocess.run([sys.executable, "-m", "planner.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=600, cwd=ROOT)


def without_flashinfer(path: str) -> str:
    """The release's sys.path without the FlashInfer setup_vllm.sh puts beside 0.25.0: with it and
    TP > 1, vLLM's config imports FlashInfer's allreduce fusion, whose flashinfer.comm asserts that
    libcudart is loaded, which a machine without a GPU cannot give (a limit of --from-vllm on CPU with
    FlashInfer installed; the parity tests run the same kernel selection with FlashInfer)."""
    return os.pathsep.join(p for p in path.split(os.pathsep) if "/flashinfer-" not in p)


def model_dir(tmp: str, name: str) -> str:
    path = os.path.join(tmp, name)
    os.makedirs(path, exist_ok=True)
    shutil.copy(os.path.join(FIXTURES, MODELS[name][0]), os.path.join(path, "config.json"))
    return path


@pytest.fixture(scope="module", params=sorted(RELEASES) or ["none"])
def built(request, tmp_path_factory):
    """(release, {model: (written engine data, model directory)}) for one release."""
    version, tmp = request.param, str(tmp_path_factory.mktemp("from_vllm"))
    out = {}
    for name, (_, args, _) in MODELS.items():
        path, target = model_dir(tmp, name), os.path.join(tmp, f"{name}.yaml")
        run = warmup(version, "engine", "--from-vllm", "-o", target, "--", path, *args)
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout == ""  # vLLM's logs stay off stdout
        out[name] = (load_file(target).data, path)
    return version, out


def from_hf(name: str, path: str) -> dict:
    import json
    with open(os.path.join(path, "config.json")) as f:
        request = hf.EngineRequest(source=os.path.join(path, "config.json"), **MODELS[name][2])
        return hf.engine_from_hf(json.load(f), request)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_from_vllm_and_from_hf_agree_on_the_model(built, name):
    _, engines = built
    data, path = engines[name]
    hf_data = from_hf(name, path)
    # shapes, quantization, attention, max_model_len; vLLM's start-up choices are compared below
    assert without_choices(data["model"]) == without_choices(hf_data["model"])
    # The name differs by design: vLLM's config names the model directory, a bare config.json its model_type.
    for key in ("kv_cache", "scheduler", "parallel", "device"):
        assert data[key] == hf_data[key], key
    assert data["model"]["max_model_len"] == MODELS[name][2].get("max_model_len", data["model"]["max_model_len"])


def without_choices(model: dict) -> dict:
    linear = [{k: v for k, v in layer.items() if k != "kernel"} for layer in model["linear"]]
    return {**{k: v for k, v in model.items() if k != "model_runner"}, "linear": linear}


def test_from_vllm_records_vllms_start_up_choices(built):
    """The model runner and each block-FP8 linear's kernel as that vLLM decided them: 0.25.0 runs the V1
    runner for Qwen3-MoE (and ngram), 0.33.0 V2; without FlashInfer (see without_flashinfer) both
    select DeepGEMM's kernel."""
    version, engines = built
    runners = {name: data["model"]["model_runner"] for name, (data, _) in engines.items()}
    assert runners == {"llama": "v2", "qwen": "v1" if version == "0.25" else "v2"}
    expected = "flashinfer_deep_gemm" if "flashinfer" in without_flashinfer(RELEASES[version]) else "deep_gemm"
    for data, _ in engines.values():
        block = [layer for layer in data["model"]["linear"] if layer["quant"].get("weight_block_size")]
        assert block and {layer["kernel"] for layer in block} == {expected}


def test_from_vllm_records_what_vllm_resolved(built):
    _, engines = built
    assert engines["qwen"][0]["speculative"] == {"method": "ngram", "num_speculative_tokens": 2}
    assert engines["qwen"][0]["parallel"]["tensor_parallel_size"] == 2
    assert engines["llama"][0]["speculative"]["method"] == "none"
    assert engines["llama"][0]["kv_cache"]["num_blocks"] == 4000
    for data, _ in engines.values():
        assert data["compilation"]["cudagraph_mode"] == "FULL_AND_PIECEWISE"
        assert data["compilation"]["cudagraph_capture_sizes"]


def capture_sizes(version: str, data: dict) -> list[int]:
    engine = engine_from_document(Document(data=data, file="<engine>"))
    graphs = [s for s in expand(load_plan(f"vllm-{version}"), engine).steps if isinstance(s, CudaGraph)]
    return sorted(graphs[0].sizes)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_vllm_capture_sizes_are_what_the_release_plan_computes(built, name):
    """The plan vllm-X.Y computes the sizes for the --from-hf engine (no sizes given) as vLLM X.Y
    resolved them, and keeps vLLM's list when the --from-vllm engine gives it."""
    version, engines = built
    data, path = engines[name]
    hf_data = {**from_hf(name, path), "speculative": data["speculative"]}
    resolved = data["compilation"]["cudagraph_capture_sizes"]
    if data["model"]["model_runner"] == "v1" and data["speculative"]["num_speculative_tokens"]:
        # The V1 runner rounds them to multiples of 1 + k when it starts (adjust_cudagraph_sizes_for_spec_decode,
        # after the VllmConfig --from-vllm reads: tests/integration/vllm_parity compares the rounding with vLLM's own).
        q = 1 + data["speculative"]["num_speculative_tokens"]
        resolved = sorted({-(-s // q) * q for s in resolved if -(-s // q) * q <= max(resolved)})
    assert capture_sizes(version, hf_data) == resolved
    assert capture_sizes(version, data) == resolved


def errors(version: str, tmp: str) -> dict:
    """{case: (exit code, stderr)} of the bad inputs that reach vLLM."""
    llama, empty = model_dir(tmp, "llama"), os.path.join(tmp, "empty")
    os.makedirs(empty, exist_ok=True)
    cases = {"unknown flag": [llama, "--no-such-flag", "3"], "no config.json": [empty],
             "not a directory": [os.path.join(tmp, "missing")],
             "refused": [llama, "--tensor-parallel-size", "3"]}
    out = {}
    for case, args in cases.items():
        run = warmup(version, "engine", "--from-vllm", "-o", os.path.join(tmp, "out.yaml"), "--", *args)
        out[case] = (run.returncode, run.stderr)
    return out


@pytest.mark.parametrize("version", sorted(RELEASES) or ["none"])
def test_bad_vllm_arguments_get_one_line(version, tmp_path):
    out = errors(version, str(tmp_path))
    expect = {"unknown flag": "--from-vllm: vllm serve arguments: unrecognized arguments: --no-such-flag 3",
              "no config.json": f"{tmp_path}/empty: model directory without config.json",
              "not a directory": f"{tmp_path}/missing: not a local model directory",
              "refused": "--from-vllm: vLLM refused the configuration: "}
    for case, (code, stderr) in out.items():
        assert code == 2, (case, stderr[-2000:])
        lines = [line for line in stderr.splitlines() if line.startswith("warmup:")]
        assert len(lines) == 1 and lines[0].startswith("warmup: error: " + expect[case]), (case, stderr[-2000:])
        assert "Traceback" not in stderr, case
    assert not os.path.exists(tmp_path / "out.yaml")  # nothing half-written


@pytest.mark.parametrize("version", sorted(RELEASES)[:1] or ["none"])
def test_output_onto_the_models_own_config_json_is_refused(version, tmp_path):
    """-o naming the config.json vLLM read would replace the model's config with an engine file."""
    llama = model_dir(str(tmp_path), "llama")
    config = os.path.join(llama, "config.json")
    with open(config, "rb") as f:
        before = f.read()
    run = warmup(version, "engine", "--from-vllm", "-o", config, "--", llama)
    assert run.returncode == 2 and "an input of this command" in run.stderr.strip().splitlines()[-1]
    with open(config, "rb") as f:
        assert f.read() == before
