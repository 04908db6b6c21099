"""What a vLLM release decides at start-up (issue 24): the model runner and each block-FP8 linear's
kernel (planner/engine/vllm_choices.py), how the engine records them, what the release plans make of them,
what the plugin's plan adds, and the W204 lint that names what the mirrored vLLM compiles after ready.

tests/integration/vllm_parity checks the same rules against each release's own functions; these tests pin them
where vLLM is not installed."""

from __future__ import annotations

import pytest
import yaml

from kernel_model import deep_gemm as dg
from planner.api import load_engine
from planner.cli import main
from planner.engine.releases import model_runner
from planner.engine.vllm_choices import default_linear_kernel
from planner.errors import PlanError
from planner.plan.authored import load_plan
from planner.plan.digest import digest
from planner.plan.expand import expand
from planner.plan.stages.deep_gemm import from_m
from planner.plan.steps import Gemm
from planner.review import lints
from tests.factories import make_engine, steps_of

FP8 = {"method": "fp8", "weight_block_size": [128, 128]}
QWEN3_MOE = {"architecture": "Qwen3MoeForCausalLM",
             "moe": [{"name": "experts", "num_experts": 128, "top_k": 8, "hidden_size": 2048,
                      "intermediate_size": 768, "count": 48, "quant": FP8}]}
LLAMA_HF = "tests/fixtures/hf/llama-3.1-8b-instruct-fp8-block.json"


def runner(release, **overrides):
    return model_runner(release, make_engine(**overrides).facts)


# --- the rules ------------------------------------------------------------------------------------------

def test_model_runner_per_release():
    assert runner("0.25.0") == ("v2", "vLLM 0.25.0's default")
    moe_runner, why = runner("0.25.0", model=QWEN3_MOE)
    assert moe_runner == "v1" and "Qwen3MoeForCausalLM is an MoE model outside DEFAULT_V2_MODEL_RUNNER" in why
    assert runner("0.25.0", model={**QWEN3_MOE, "architecture": "DeepseekV2ForCausalLM"})[0] == "v2"
    assert runner("0.33.0", model=QWEN3_MOE)[0] == "v2"
    for method, v1_in in (("ngram", {"0.25.0"}), ("draft_model", {"0.25.0"}), ("suffix", {"0.25.0", "0.33.0"}),
                          ("eagle", set()), ("mtp", set())):
        spec = {"method": method, "num_speculative_tokens": 2}
        assert {r for r in ("0.25.0", "0.33.0") if runner(r, speculative=spec)[0] == "v1"} == v1_in, method
    assert runner("0.25.0", model={**QWEN3_MOE, "runner": "generate"},
                  speculative={"method": "dspark", "num_speculative_tokens": 2})[0] == "v2"  # DSpark forces V2
    assert runner("0.25.0", model={"runner": "pooling"})[0] == "v1"
    assert runner(None, model=QWEN3_MOE)[0] == "v2"  # a plan of no release
    assert runner("0.25.0", model={**QWEN3_MOE, "model_runner": "v2"}) == (
        "v2", "the engine config sets model.model_runner: v2")
    assert runner("0.33.0", model={"model_runner": "v1"})[0] == "v1"


@pytest.mark.parametrize("layer, dtype, capability, flashinfer, kernel", [
    ({"n": 6144, "k": 4096, "quant": FP8}, "bfloat16", "9.0", True, "flashinfer_deep_gemm"),
    ({"n": 6144, "k": 4096, "quant": FP8}, "bfloat16", "9.0", False, "deep_gemm"),
    ({"n": 2112, "k": 7168, "quant": FP8}, "bfloat16", "9.0", True, "flashinfer_deep_gemm"),  # N % 64
    ({"n": 4192, "k": 4096, "quant": FP8}, "bfloat16", "9.0", True, "cutlass"),  # N % 64 != 0
    ({"n": 6144, "k": 4096, "quant": FP8}, "float16", "9.0", True, "cutlass"),
    ({"n": 6144, "k": 4096, "quant": FP8}, "bfloat16", "10.0", True, "deep_gemm"),
    ({"n": 6144, "k": 4096, "quant": FP8}, "bfloat16", "8.0", True, "marlin"),
    ({"n": 6144, "k": 4096, "quant": {"method": "fp8"}}, "bfloat16", "9.0", True, None),
    ({"n": 6144, "k": 4096, "quant": {"method": "none"}}, "bfloat16", "9.0", True, None),
])
def test_default_linear_kernel(layer, dtype, capability, flashinfer, kernel):
    assert default_linear_kernel(layer, dtype, capability, flashinfer) == kernel


# --- the engine -----------------------------------------------------------------------------------------

def with_kernels(kernel):
    return make_engine(model={"linear": [{"name": "qkv_proj", "n": 6144, "k": 4096, "count": 32, "quant": FP8,
                                          "kernel": kernel},
                                         {"name": "o_proj", "n": 4096, "k": 4096, "count": 32, "quant": FP8,
                                          "kernel": kernel}]})


def test_the_engine_fills_in_vllms_default_kernel_and_digests_it_as_left_out():
    plain = make_engine()
    assert [layer["kernel"] for layer in plain.data["model"]["linear"]] == ["flashinfer_deep_gemm"] * 2
    assert plain.data["model"]["model_runner"] == "auto"
    explicit = with_kernels("flashinfer_deep_gemm")
    assert digest(explicit.shaping_fields()) == digest(plain.shaping_fields())
    assert digest(with_kernels("deep_gemm").shaping_fields()) != digest(plain.shaping_fields())
    assert digest(make_engine(model={"model_runner": "v2"}).shaping_fields()) != digest(plain.shaping_fields())


def test_a_kernel_on_a_linear_that_is_not_block_fp8_is_refused():
    with pytest.raises(PlanError, match=r"model\.linear\.0\.kernel|model.linear\[0\].kernel: kernel names the "
                                        r"kernel of a block-FP8 linear"):
        make_engine(model={"linear": [{"name": "lm_head", "n": 4096, "k": 4096, "quant": {"method": "none"},
                                       "kernel": "deep_gemm"}]})


def from_hf(capsys, *flags):
    code = main(["engine", "--from-hf", LLAMA_HF, *flags])
    out, err = capsys.readouterr()
    return code, out, err


def load_engine_text(text: str):
    from planner.engine.config import engine_from_document
    from planner.yamlio import load_text
    return engine_from_document(load_text(text, "<generated engine>"))


def test_from_hf_writes_the_release_defaults_and_the_flags_say_otherwise(capsys):
    code, out, _ = from_hf(capsys)
    data = yaml.safe_load(out)
    assert code == 0 and "model_runner" not in data["model"]  # auto: each plan's release decides
    assert {layer.get("kernel") for layer in data["model"]["linear"]} == {None}  # the default: filled in on load
    engine = load_engine_text(out)
    assert {layer.get("kernel") for layer in engine.data["model"]["linear"]} == {"flashinfer_deep_gemm", None}
    code, out, _ = from_hf(capsys, "--fp8-linear-kernel", "deep_gemm", "--model-runner", "v1")
    data = yaml.safe_load(out)
    assert code == 0 and data["model"]["model_runner"] == "v1"
    assert {layer.get("kernel") for layer in data["model"]["linear"]} == {"deep_gemm", None}
    assert "--fp8-linear-kernel deep_gemm --model-runner v1` from LlamaForCausalLM" in data["description"]


@pytest.mark.parametrize("flags, message", [
    (("--fp8-linear-kernel", "flashinfer_deep_gemm", "--gpu", "B200"),
     "vLLM selects FlashInfer's block-FP8 kernel on SM 9.0 only"),
    (("--fp8-linear-kernel", "cutlass"), "invalid choice: 'cutlass'"),
    (("--model-runner", "v3"), "invalid choice: 'v3'"),
])
def test_bad_choice_flags_are_one_line_exit_2(capsys, flags, message):
    if "invalid" in message:  # argparse refuses these itself, before the command runs
        with pytest.raises(SystemExit) as exit_:
            main(["engine", "--from-hf", LLAMA_HF, *flags])
        code, (out, err) = exit_.value.code, capsys.readouterr()
    else:
        code, out, err = from_hf(capsys, *flags)
    assert (code, out) == (2, "") and message in err and err.count("\n") == 1


# --- the release plans ----------------------------------------------------------------------------------

def test_025_warms_no_linear_on_flashinfers_kernel_and_033_does():
    assert steps_of("vllm-0.25", make_engine(), kind="gemm") == []
    assert [s.n for s in steps_of("vllm-0.25", with_kernels("deep_gemm"), kind="gemm")] == [6144, 4096]
    assert [s.n for s in steps_of("vllm-0.33", make_engine(), kind="gemm")] == [6144, 4096]


def test_the_v1_runner_runs_no_warmup_kernels():
    moe = make_engine(model=QWEN3_MOE)
    assert steps_of("vllm-0.25", moe, stage="warmup_kernels") == []
    assert steps_of("vllm-0.33", moe, stage="warmup_kernels") != []
    pinned = make_engine(model={"model_runner": "v1"})
    assert steps_of("vllm-0.33", pinned, stage="warmup_kernels") == []


def test_v1_with_speculative_decoding_captures_multiples_of_1_plus_k():
    spec = {"speculative": {"method": "eagle", "num_speculative_tokens": 2},
            "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 8192}}
    v1 = steps_of("vllm-0.25", make_engine(model=QWEN3_MOE, **spec), kind="cudagraph")[0]
    assert v1.sizes and all(s % 3 == 0 for s in v1.sizes)
    v2 = steps_of("vllm-0.25", make_engine(**spec), kind="cudagraph")[0]
    assert any(s % 3 for s in v2.sizes)


@pytest.mark.parametrize("parallel, cache_025", [({}, "persistent"), ({"tensor_parallel_size": 2}, "memory"),
                                                 ({"data_parallel_size": 2}, "memory")])
def test_025_autotunes_in_memory_above_one_rank(parallel, cache_025):
    eng = make_engine(parallel=parallel)
    assert steps_of("vllm-0.25", eng, kind="autotune")[0].cache == cache_025
    assert steps_of("vllm-0.33", eng, kind="autotune")[0].cache == "persistent"


# --- the plugin's plan ----------------------------------------------------------------------------------

def test_from_m():
    assert from_m([1, 2, 4, 16, 64, 128], 32, 4096) == [32, 64, 128]
    assert from_m(range(1, 100), 32, 99) == range(32, 100)
    assert from_m([1, 2], 32, 16) == [] and from_m([1, 2], 1, 16) == [1, 2]


@pytest.mark.parametrize("engine_name", ["llama-3.1-8b-fp8-h100", "qwen3-30b-a3b-fp8-h100",
                                         "deepseek-v3-fp8-tp8-h200"])
def test_plugin_compiles_every_deep_gemm_kernel_behind_flashinfer(engine_name):
    """Every DeepGEMM kernel an M of 32..max_num_batched_tokens reaches is a compile key of the plugin's
    plan (kernel_model's dispatch over every M, not the relaxed ones), and no M below 32 is planned."""
    eng = load_engine(engine_name)
    max_tokens, num_sms = eng.data["scheduler"]["max_num_batched_tokens"], eng.data["device"]["num_sms"]
    steps = [s for s in expand(load_plan("vllm-0.25-plugin"), eng).steps
             if isinstance(s, Gemm) and s.stage == "deep_gemm_flashinfer"]
    shapes = {(layer["n"], layer["k"]) for layer in eng.data["model"]["linear"]
              if layer.get("kernel") == "flashinfer_deep_gemm"}
    assert shapes and {(s.n, s.k) for s in steps} == shapes
    for step in steps:
        assert min(step.m_values) == 32
        assert set(dg.dense_keys(range(32, max_tokens + 1), step.n, step.k, num_sms)) <= set(step.compile_keys)


def test_plugin_runs_the_synthetic_batches_on_v1():
    moe = make_engine(model=QWEN3_MOE)
    assert steps_of("vllm-0.25-plugin", moe, stage="warmup_kernels") != []
    assert steps_of("vllm-0.25-plugin", moe, stage="deep_gemm_flashinfer") != []
    assert steps_of("vllm-0.25-plugin", with_kernels("deep_gemm"), stage="deep_gemm_flashinfer") == []


# --- W204 -----------------------------------------------------------------------------------------------

def w204(plan, eng):
    findings, _ = lints.run(expand(load_plan(plan), eng), eng.facts, codes=["W204"])
    return [f.message for f in findings]


def test_w204_names_deep_gemm_behind_flashinfer_with_the_upstream_fix():
    assert w204("vllm-0.25", make_engine()) == [
        "engine test-engine: vLLM 0.25.0 compiles DeepGEMM fp8_gemm_nt n=6144 k=4096 (qkv_proj, on "
        "FlashInferFp8DeepGEMMDynamicBlockScaledKernel) for M 32..2048 after ready (fixed upstream by vLLM PR "
        "#49467, after 0.25)",
        "engine test-engine: vLLM 0.25.0 compiles DeepGEMM fp8_gemm_nt n=4096 k=4096 (o_proj, on "
        "FlashInferFp8DeepGEMMDynamicBlockScaledKernel) for M 32..2048 after ready (fixed upstream by vLLM PR "
        "#49467, after 0.25)"]
    for plan in ("vllm-0.25-plugin", "vllm-0.33", "vllm-head", "vllm"):
        assert w204(plan, make_engine()) == [], plan


def test_w204_names_a_deep_gemm_linear_025_skips_for_its_n():
    eng = make_engine(model={"linear": [{"name": "q_a", "n": 2112, "k": 7168, "quant": FP8, "kernel": "deep_gemm"}]})
    assert w204("vllm-0.25", eng) == ["engine test-engine: vLLM 0.25.0 compiles DeepGEMM fp8_gemm_nt n=2112 k=7168 "
                                      "(q_a, on DeepGemmFp8BlockScaledMMKernel) for M 1..2048 after ready"]
    assert w204("vllm-0.33", eng) == []


def test_w204_names_the_v1_runner():
    eng = make_engine(model=QWEN3_MOE)
    messages = w204("vllm-0.25", eng)
    assert messages[-1].startswith("engine test-engine: vLLM 0.25.0 runs the V1 model runner: Qwen3MoeForCausalLM "
                                   "is an MoE model outside DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES; V1 never calls "
                                   "warmup_kernels")
    assert w204("vllm-0.25-plugin", eng) == [] and w204("vllm-0.33", eng) == []
