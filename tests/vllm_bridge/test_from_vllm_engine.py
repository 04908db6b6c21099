"""vllm_bridge.engine_from_vllm_config on a VllmConfig-shaped record: how each resolved vLLM
setting lands in the engine config. No vLLM needed (the function only reads attributes);
tests/integration/from_vllm/test_from_vllm.py runs it on real VllmConfigs."""

from __future__ import annotations

import enum
import json
import os
from types import SimpleNamespace as NS

import pytest

from planner.engine import hf
from planner.engine.config import Engine
from planner.schema import load_schema
from vllm_bridge.engine.from_vllm import engine_from_vllm_config, gpu_of_device_name

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "hf")


class Mode(enum.Enum):  # stands for vLLM's CUDAGraphMode / AttentionBackendEnum: read by .name
    FULL_DECODE_ONLY = 1
    TRITON_ATTN = 2
    NO_SUCH_BACKEND = 3


def hf_config(fixture: str):
    with open(os.path.join(FIXTURES, fixture)) as f:
        config = json.load(f)
    return NS(to_dict=lambda: dict(config))


def vllm_config(fixture="llama-3.1-8b-instruct-fp8-block.json", *, spec=None, blocks=(None, None), backend=None,
                tp=1, eager=False, performance_mode="balanced", v2=True):
    return NS(use_v2_model_runner=v2,  # a property of VllmConfig in vLLM 0.25.0 and 0.33.0
        model_config=NS(model="/models/llama", hf_config=hf_config(fixture), dtype="torch.float16",
                        max_model_len=4096, enforce_eager=eager),
        cache_config=NS(block_size=32, num_gpu_blocks=blocks[0], num_gpu_blocks_override=blocks[1]),
        parallel_config=NS(tensor_parallel_size=tp, data_parallel_size=1, enable_expert_parallel=False),
        scheduler_config=NS(max_num_seqs=64, max_num_batched_tokens=2048),
        speculative_config=spec, attention_config=NS(backend=backend), performance_mode=performance_mode,
        compilation_config=NS(cudagraph_mode=Mode.FULL_DECODE_ONLY, cudagraph_capture_sizes=[8, 1, 2, 4],
                              max_cudagraph_capture_size=8))


@pytest.fixture(autouse=True)
def linear_kernel(monkeypatch):
    """vLLM's kernel selection (vllm_bridge.engine.from_vllm.fp8_linear_kernel needs vLLM): a stand-in that
    records what it was asked and answers `linear_kernel.answer`."""
    asked = NS(calls=[], answer="flashinfer_deep_gemm")

    def choose(config, weight_shape, block):
        asked.calls.append((tuple(weight_shape), tuple(block)))
        return asked.answer
    monkeypatch.setattr("vllm_bridge.engine.from_vllm.fp8_linear_kernel", choose)
    return asked


def test_resolved_settings_land_in_the_engine():
    engine = engine_from_vllm_config(vllm_config(blocks=(None, 900)), "H200")
    assert isinstance(engine, Engine)
    data = engine.doc.data
    assert list(data) == [k for k in load_schema("engine")["properties"] if k in data]  # schema order
    assert data["compilation"] == {"cudagraph_mode": "FULL_DECODE_ONLY", "enforce_eager": False,
                                   "cudagraph_capture_sizes": [1, 2, 4, 8], "max_cudagraph_capture_size": 8}
    assert data["scheduler"] == {"max_num_seqs": 64, "max_num_batched_tokens": 2048}
    assert data["kv_cache"] == {"num_blocks": 900, "groups": [{"block_size": 32, "kind": "full_attention"}]}
    assert data["model"]["max_model_len"] == 4096 and data["model"]["dtype"] == "float16"
    assert data["device"]["name"] == "H200" and data["speculative"]["method"] == "none"
    assert "estimate" not in data["description"]
    assert data["model"]["model_runner"] == "v2"


@pytest.mark.parametrize("answer", ["flashinfer_deep_gemm", "deep_gemm", "cutlass"])
def test_model_runner_and_linear_kernels_are_vllms_answers(linear_kernel, answer):
    linear_kernel.answer = answer
    data = engine_from_vllm_config(vllm_config(v2=False), "H100").doc.data
    assert data["model"]["model_runner"] == "v1"
    block_fp8 = [layer for layer in data["model"]["linear"] if layer["quant"].get("weight_block_size")]
    assert block_fp8 and {layer["kernel"] for layer in block_fp8} == {answer}
    assert all("kernel" not in layer for layer in data["model"]["linear"] if layer not in block_fp8)
    shapes = {(layer["n"], layer["k"]) for layer in block_fp8}
    assert sorted(shape for shape, _ in linear_kernel.calls) == sorted(shapes)  # once per distinct shape


def test_model_shapes_are_planner_hf_derivation(linear_kernel):
    linear_kernel.answer = "cutlass"  # what planner/engine/hf/choices.py's rule gives float16 (vllm_choices)
    fixture = "qwen3-30b-a3b-fp8.json"
    with open(os.path.join(FIXTURES, fixture)) as f:
        request = hf.EngineRequest(tp=2, max_model_len=4096, block_size=32, max_num_seqs=64, max_num_batched_tokens=2048)
        expected = hf.engine_from_hf({**json.load(f), "torch_dtype": "float16"}, request)
    data = engine_from_vllm_config(vllm_config(fixture, tp=2), "H100").doc.data
    expected["model"]["model_runner"] = "v2"  # vLLM's answer where --from-hf leaves it to the plan's release
    for layer in expected["model"]["linear"]:  # vLLM's answer, written even where it is the default
        if layer["quant"].get("weight_block_size"):
            layer["kernel"] = "cutlass"
    assert data["model"] == expected["model"] and data["kv_cache"] == expected["kv_cache"]
    assert "estimate" in data["description"]  # no blocks given: hf/memory.py's estimate, said so


def test_profiled_blocks_win_over_the_override():
    data = engine_from_vllm_config(vllm_config(blocks=(1234, 900)), "H100").doc.data
    assert data["kv_cache"]["num_blocks"] == 1234


@pytest.mark.parametrize("method, expected", [("ngram", "ngram"), ("eagle3", "eagle3"), ("deepseek_mtp", "mtp"),
                                              ("mtp", "mtp")])
def test_speculative_method(method, expected):
    spec = NS(method=method, num_speculative_tokens=3)
    data = engine_from_vllm_config(vllm_config(spec=spec), "H100").doc.data
    assert data["speculative"] == {"method": expected, "num_speculative_tokens": 3}


def test_unmodelled_speculative_method_is_refused():
    with pytest.raises(ValueError, match="speculative method 'medusa' is not one the engine config models"):
        engine_from_vllm_config(vllm_config(spec=NS(method="medusa", num_speculative_tokens=2)), "H100")


def test_chosen_attention_backend():
    data = engine_from_vllm_config(vllm_config(backend=Mode.TRITON_ATTN), "H100").doc.data
    assert {a["backend"] for a in data["model"]["attention"]} == {"TRITON_ATTN"}
    with pytest.raises(ValueError, match="attention backend NO_SUCH_BACKEND is not one"):
        engine_from_vllm_config(vllm_config(backend=Mode.NO_SUCH_BACKEND), "H100")


def test_eager_and_interactivity():
    data = engine_from_vllm_config(vllm_config(eager=True, performance_mode="interactivity"), "H100").doc.data
    assert data["compilation"]["enforce_eager"] is True
    assert data["compilation"]["performance_mode"] == "interactivity"


def test_model_errors_name_the_config_key():
    config = vllm_config()
    broken = {**config.model_config.hf_config.to_dict(), "num_attention_heads": 0}
    config.model_config.hf_config = NS(to_dict=lambda: broken)
    with pytest.raises(hf.HFConfigError) as e:
        engine_from_vllm_config(config, "H100")
    assert e.value.key == "num_attention_heads" and str(e.value).startswith("/models/llama/config.json:")


@pytest.mark.parametrize("nvml, gpu", [("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H200", "H200"),
                                       ("NVIDIA H20", "H20"), ("NVIDIA A100-SXM4-80GB", "A100"),
                                       ("NVIDIA L40S", "L40S"), ("NVIDIA B200", "B200")])
def test_gpu_of_device_name(nvml, gpu):
    assert gpu_of_device_name(nvml) == gpu


def test_unknown_gpu_name():
    with pytest.raises(ValueError, match="GPU 'NVIDIA T4' is not one the planner knows"):
        gpu_of_device_name("NVIDIA T4")


def test_load_time_quantization_is_refused():
    config = vllm_config("qwen3-8b.json")
    config.model_config.quantization = "fp8"
    with pytest.raises(ValueError, match="quantization 'fp8' is applied at load time"):
        engine_from_vllm_config(config, "H100")
    config = vllm_config()  # a checkpoint quantized in its config: fine
    config.model_config.quantization = "fp8"
    assert engine_from_vllm_config(config, "H100").doc.data["model"]["linear"][0]["quant"]["method"] == "fp8"
