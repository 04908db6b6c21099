"""Issue 44: the plugin never stops vLLM, through vLLM's own start-up on CPU (probe.py, `start_up`).

Each cause in a start-up of its own: vLLM's loader loads the plugin, vLLM resolves the VllmConfig
from `vllm serve` arguments (the plugin's build-ahead wrapper around it), vLLM's GPU Worker is
patched, and its three methods run in the executor's order (vLLM's own bodies stand in, since they
need a GPU). An engine the planner cannot derive (architecture, quantization), a plan it cannot
make (broken YAML, a missing file), a report it cannot write, a vLLM release it does not support:
one warning line naming the cause, and every method of vLLM's runs as it would without the plugin.
WARMUP_STRICT=1 makes the same failure one fatal line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from planner.api import load_target
from planner.engine import hf
from planner.errors import PlanError, one_line
from planner.output import check_writable
from tests.integration.vllm_parity.test_parity import RELEASES

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
LLAMA = os.path.join(ROOT, "tests", "fixtures", "hf", "llama-3.1-8b-instruct-fp8-block.json")
TAIL = "; vLLM starts as it would without the plugin"
STOCK = [["load_model", {}], ["determine_available_memory", {"profile_run_is_vllms": True}],
         ["compile_or_warm_up_model", {"kernel_warmup_is_vllms": True, "warmup_kernels_is_vllms": True,
                                       "deep_gemm_warmup_is_vllms": True, "capture_model_is_vllms": True}]]
pytestmark = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")


def llama_config() -> dict:
    with open(LLAMA, encoding="utf-8") as f:
        return json.load(f)


def phi3_config() -> dict:
    """Phi-4's architecture on Llama's shapes (issue 44's example)."""
    config = {**llama_config(), "architectures": ["Phi3ForCausalLM"], "model_type": "phi3"}
    config.pop("rope_scaling")  # Llama 3's rope type is not Phi-3's
    return config


def mamba_config() -> dict:
    """A state-space model (Mamba-130m's config.json): the planner refuses it by rule."""
    return {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "vocab_size": 50280, "hidden_size": 768,
            "state_size": 16, "num_hidden_layers": 24, "expand": 2, "conv_kernel": 4, "use_bias": False,
            "use_conv_bias": True, "layer_norm_epsilon": 1e-5, "time_step_rank": 48, "pad_token_id": 0,
            "bos_token_id": 0, "eos_token_id": 0, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}


def awq_config() -> dict:
    """Llama with an AWQ checkpoint's quantization_config (issue 44's example)."""
    return {**llama_config(), "torch_dtype": "float16",
            "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                                    "version": "gemm"}}


def modelopt_config() -> dict:
    """Llama with NVIDIA ModelOpt's FP8 quantization_config."""
    config = {key: value for key, value in llama_config().items() if key != "quantization_config"}
    return {**config, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}


# What vLLM 0.25 and 0.33 serve and the planner may not model: each test takes the first of its list the
# planner refuses (issue 44 item 2 makes it model more of them: the examples come first).
ARCHITECTURES = {"phi3": phi3_config, "mamba": mamba_config}
QUANTIZATIONS = {"awq": awq_config, "modelopt": modelopt_config}


def refusal(config: dict, path: str) -> str | None:
    """The one line the planner refuses a config.json with (the plugin's cause), or None: planned."""
    try:
        hf.engine_from_hf(config, hf.EngineRequest(gpu="H100", source=path))
    except hf.HFConfigError as e:
        return one_line(e.as_plan_error(path, json.dumps(config, indent=2)))
    return None


class Server:
    """The files of the cases: model directories, plan files, report paths; the causes expected."""

    def __init__(self, root, version: str):
        self.root, self.version, self.models, self.refusals = root, version, {}, {}
        self._model("llama", llama_config())
        self.architecture = self._unplanned(ARCHITECTURES)
        self.quantization = self._unplanned(QUANTIZATIONS)
        self.broken_plan = root / "broken.yaml"
        self.broken_plan.write_text("extends: vllm\nstages: [{name: deep_gemm\n")
        self.missing_plan = root / "no-such-plan.yaml"
        (root / "a-file").write_text("a file where the report's directory should be\n")
        self.unwritable_report = root / "a-file" / "report.json"

    def _model(self, name: str, config: dict) -> str:
        folder = self.root / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        self.models[name] = folder
        return name

    def _unplanned(self, candidates: dict) -> str:
        for name, make in candidates.items():
            path = str(self.root / name / "config.json")
            cause = refusal(make(), path)
            if cause is not None:
                self.refusals[name] = cause
                return self._model(name, make())
        pytest.fail(f"the planner plans every one of {', '.join(candidates)} now: add one it refuses")

    def case(self, name: str, model: str = "llama", plan: str | None = None, **extra) -> dict:
        env = {"WARMUP_PLAN": plan or f"vllm-{self.version}", "WARMUP_JOBS": "0",
               "WARMUP_PLAN_REPORT": str(self.root / f"{name}.report.json"), **extra.pop("env", {})}
        args = [str(self.models[model]), "--max-model-len", "2048", "--num-gpu-blocks-override", "4096"]
        return {"serve_args": args, "env": env, **extra}

    def cases(self) -> dict:
        arch = self.architecture
        return {"architecture": self.case("architecture", arch),
                "quantization": self.case("quantization", self.quantization),
                "plan_yaml": self.case("plan_yaml", plan=str(self.broken_plan)),
                "plan_missing": self.case("plan_missing", plan=str(self.missing_plan)),
                "report": self.case("report", env={"WARMUP_PLAN_REPORT": str(self.unwritable_report)}),
                "strict": self.case("strict", arch, env={"WARMUP_STRICT": "1"}),
                "second_rank": self.case("second_rank", arch, rank=1),
                "version": self.case("version", version="0.26.0", child=True),
                "version_strict": self.case("version_strict", version="0.26.0", env={"WARMUP_STRICT": "1"})}


@pytest.fixture(scope="module", params=sorted(RELEASES) or ["none"])
def started(request, tmp_path_factory):
    version = request.param
    server = Server(tmp_path_factory.mktemp(f"step-aside-{version}"), version)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, RELEASES[version]]), "VLLM_LOGGING_LEVEL": "ERROR",
           "VLLM_HAS_FLASHINFER_CUBIN": "1"}
    for key in [k for k in env if k.startswith("WARMUP_") and k != "WARMUP_VLLM_ENVS"]:
        env.pop(key)
    payload = {"checks": ["start_up"], "cases": server.cases()}
    run = subprocess.run([sys.executable, os.path.join(HERE, "probe.py")], input=json.dumps(payload),
                         capture_output=True, text=True, env=env, timeout=900, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return server, json.loads(run.stdout)["start_up"]


def plan_refusal(path) -> str:
    with pytest.raises(PlanError) as e:
        load_target(str(path))
    return one_line(e.value)


def stepped_aside(facts: dict, cause: str) -> None:
    """One warning line naming the cause, nothing stopped, every vLLM method as without the plugin."""
    assert facts["error"] is None, facts
    warnings = [text for level, text in facts["lines"] if level in ("WARNING", "ERROR")]
    assert warnings == [f"warmup-planner: stepping aside: {cause}{TAIL}"]
    assert facts["stock"] == STOCK
    assert not facts["report_written"]


def test_an_architecture_the_planner_does_not_model_steps_aside(started):
    server, facts = started
    cause = server.refusals[server.architecture]
    assert cause.startswith(f"{server.models[server.architecture]}/config.json:") and "architectures" in cause
    stepped_aside(facts["architecture"], cause)


def test_a_quantization_the_planner_does_not_model_steps_aside(started):
    server, facts = started
    cause = server.refusals[server.quantization]
    assert cause.startswith(f"{server.models[server.quantization]}/config.json:") and "quant" in cause
    stepped_aside(facts["quantization"], cause)


def test_a_broken_plan_file_steps_aside_at_its_line(started):
    server, facts = started
    cause = plan_refusal(server.broken_plan)
    assert cause.startswith(f"{server.broken_plan}:")  # FILE:LINE: ...
    stepped_aside(facts["plan_yaml"], cause)


def test_a_missing_plan_file_steps_aside(started):
    server, facts = started
    stepped_aside(facts["plan_missing"], plan_refusal(server.missing_plan))


def test_an_unwritable_report_steps_aside_before_the_plan_runs(started):
    server, facts = started
    with pytest.raises(PlanError) as e:
        check_writable(server.unwritable_report)
    stepped_aside(facts["report"], one_line(e.value))


def test_strict_makes_the_same_failure_one_fatal_line_before_the_weights_load(started):
    server, facts = started
    strict = facts["strict"]
    assert strict["error"] == {"type": "PluginError",
                               "message": f"warmup-planner: {server.refusals[server.architecture]} (WARMUP_STRICT=1)"}
    assert strict["stock"] == [] and not [line for line in strict["lines"] if "stepping aside" in line[1]]


def test_another_rank_meets_the_same_cause_and_says_nothing_more(started):
    """Each rank derives the engine; the cause is said once for the server (by rank 0)."""
    server, facts = started
    rank1 = facts["second_rank"]
    assert rank1["error"] is None and rank1["stock"] == STOCK
    assert not [line for line in rank1["lines"] if line[0] == "WARNING"]
    assert ["DEBUG", f"warmup-planner: stepping aside: {server.refusals[server.architecture]}{TAIL}"] in rank1["lines"]


def test_an_unsupported_vllm_steps_aside_in_every_process_said_once(started):
    """Met at register, in every process of the server: the API server says it, the engine core and
    workers it starts step aside without saying it again; nothing is patched anywhere."""
    _, facts = started
    version = facts["version"]
    [line] = [text for level, text in version["lines"] if level == "WARNING"]
    assert line.startswith("warmup-planner: stepping aside: WARMUP_PLAN is set but vLLM 0.26.0 is installed; "
                           "the plugin supports vLLM 0.25.0, 0.33.0") and line.endswith(TAIL)
    assert version["error"] is None and version["stock"] == STOCK and not version["patched"]
    child = version["child"]
    assert child["error"] is None and not child["patched"]
    assert not [entry for entry in child["lines"] if entry[0] == "WARNING"]


def test_strict_refuses_an_unsupported_vllm_in_one_line(started):
    _, facts = started
    error = facts["version_strict"]["error"]
    assert error["type"] == "PluginError" and "\n" not in error["message"]
    assert error["message"].startswith("warmup-planner: WARMUP_PLAN is set but vLLM 0.26.0 is installed")
    assert error["message"].endswith("(WARMUP_STRICT=1)") and facts["version_strict"]["stock"] == []
