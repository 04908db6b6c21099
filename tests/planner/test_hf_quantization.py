"""`warmup engine --from-hf` on quantized checkpoints: each quant_method vLLM 0.25 and 0.33 serve on a
kernel the engine config names, vLLM's rule for the modules each one leaves unquantized, and a
refusal that says what to do instead for the rest (planner/engine/hf/quantization.py,
compressed_tensors.py). tests/integration/from_vllm/test_model_layers.py compares the same fixtures (and ignore
lists) with the quant method vLLM gives each layer it builds.
"""

from __future__ import annotations

import json
import os

import pytest

from planner.engine.hf import EngineRequest, HFConfigError, engine_from_hf

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "hf")
FP8_BLOCK = {"method": "fp8", "weight_block_size": [128, 128]}


def load(name: str) -> dict:
    with open(os.path.join(FIXTURES, name + ".json"), encoding="utf-8") as f:
        return json.load(f)


def quants(hf: dict, **kwargs) -> dict:
    """linear name -> (count, quant entry); experts too."""
    e = engine_from_hf(hf, EngineRequest(**{"num_blocks": 64, **kwargs}))
    out = {x["name"]: (x["count"], x["quant"]) for x in e["model"]["linear"]}
    out.update({x["name"]: (x["count"], x["quant"]) for x in e["model"]["moe"]})
    return out


# --------------------------------------------------------------------------------------------
# compressed-tensors: CompressedTensorsW8A8Fp8 by tensor, channel or block

def test_compressed_tensors_fp8_per_tensor_per_channel_and_block():
    assert quants(load("llama-3.1-8b-instruct-fp8-static"))["qkv_proj"] == (32, {"method": "fp8_per_tensor"})
    nemo = quants(load("mistral-nemo-instruct-2407-fp8-dynamic"), max_model_len=4096)
    assert {q["method"] for name, (_, q) in nemo.items() if name != "lm_head"} == {"fp8_per_channel"}
    assert nemo["lm_head"] == (1, {"method": "none"})
    block = quants(load("qwen3-8b-fp8-block-ct"))
    assert block["down_proj"] == (36, FP8_BLOCK)


def test_compressed_tensors_block_fp8_takes_vllms_block_kernel():
    # the same kernel selection as quant_method fp8 (init_fp8_linear_kernel): FlashInfer's on SM 9.0
    # (the default, not written), DeepGEMM's with --fp8-linear-kernel deep_gemm
    e = engine_from_hf(load("qwen3-8b-fp8-block-ct"), EngineRequest(num_blocks=64, fp8_linear_kernel="deep_gemm"))
    assert {x.get("kernel") for x in e["model"]["linear"] if x["name"] != "lm_head"} == {"deep_gemm"}


def test_compressed_tensors_ignore_by_name_and_regex():
    hf = load("llama-3.1-8b-instruct-fp8-static")
    hf["quantization_config"]["ignore"] = ["lm_head", r"re:.*layers\.0\..*", "model.layers.7.mlp.down_proj",
                                           "mlp.gate_up_proj"]  # a suffix is no name to compressed-tensors
    q = quants(hf)
    assert q["qkv_proj.unquantized"][0] == 1 and q["gate_up_proj.unquantized"][0] == 1
    assert q["down_proj.unquantized"][0] == 2 and q["down_proj"][0] == 30
    hf["quantization_config"]["ignore"] = ["model.layers.3.self_attn.q_proj"]
    with pytest.raises(HFConfigError, match="leaves only some of the modules that vLLM fuses into qkv_proj in layer 3"):
        quants(hf)


def test_compressed_tensors_attention_group_is_skipped_as_vllm_skips_it():
    hf = load("mistral-nemo-instruct-2407-fp8-dynamic")
    groups = hf["quantization_config"]["config_groups"]
    groups["group_1"] = {"targets": ["MistralAttention"], "weights": None,
                         "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor"}}
    assert quants(hf, max_model_len=4096)["o_proj"][1] == {"method": "fp8_per_channel"}


# --------------------------------------------------------------------------------------------
# AWQ and GPTQ: Machete or Marlin, compiled ahead of time

def test_awq_and_gptq_linears():
    awq = quants(load("qwen2.5-7b-instruct-awq"))
    assert awq["qkv_proj"] == (28, {"method": "awq"}) and awq["lm_head"][1] == {"method": "none"}
    gptq = quants(load("qwen2.5-7b-instruct-gptq-int4"))
    assert {q["method"] for name, (_, q) in gptq.items() if name != "lm_head"} == {"gptq"}


def test_awq_modules_to_not_convert_by_substring():
    # AutoAWQConfig: is_layer_skipped(..., skip_with_substr=True)
    hf = load("qwen2.5-7b-instruct-awq")
    hf["quantization_config"]["modules_to_not_convert"] = ["layers.3.mlp", "o_proj"]
    q = quants(hf)
    assert q["gate_up_proj.unquantized"][0] == 1 and q["down_proj.unquantized"][0] == 1
    assert q["o_proj"] == (28, {"method": "none"})


def test_gptq_quantizes_the_modules_it_lists():
    # AutoGPTQConfig: a module is quantized where an entry of modules_in_block_to_quantize is in its name
    hf = load("qwen2.5-7b-instruct-gptq-int4")
    hf["quantization_config"]["modules_in_block_to_quantize"] = [["self_attn.q_proj", "self_attn.k_proj",
                                                                  "self_attn.v_proj"], ["self_attn.o_proj"]]
    q = quants(hf)
    assert q["qkv_proj"][1] == {"method": "gptq"} and q["down_proj"][1] == {"method": "none"}
    hf["quantization_config"]["modules_in_block_to_quantize"] = ["self_attn.q_proj"]
    with pytest.raises(HFConfigError, match="fuses into qkv_proj"):
        quants(hf)


def test_int4_weights_are_half_a_byte_in_the_estimate():
    bf16, awq = load("qwen2-7b-instruct"), load("qwen2.5-7b-instruct-awq")
    bf16["torch_dtype"] = "float16"
    blocks = [engine_from_hf(hf)["kv_cache"]["num_blocks"] for hf in (bf16, awq)]
    # 6.5e9 decoder weights in 4 bits free ~4.5 GiB more for the KV cache (57 KiB a 16-token block)
    assert blocks[1] > blocks[0] + 4 * 2 ** 30 // (28 * 16 * 2 * 4 * 128 * 2)


@pytest.mark.parametrize("quant, why", [
    ({"quant_method": "gptq", "bits": 3, "group_size": 128, "sym": True}, "gptq with bits 3"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False}, "gptq with sym false"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "lm_head": True}, "a quantized lm_head"),
    ({"quant_method": "awq", "bits": 4, "group_size": 256, "zero_point": True}, "awq with bits 4 and group_size 256"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": False}, "awq without zero_point"),
])
def test_int_configs_marlin_does_not_take_are_refused(quant, why):
    hf = load("qwen2-7b-instruct")
    hf["quantization_config"] = quant
    with pytest.raises(HFConfigError, match=why):
        engine_from_hf(hf)


# --------------------------------------------------------------------------------------------
# mxfp4 (GPT-OSS), fp8 by exact name

def test_mxfp4_quantizes_the_experts_only():
    q = quants(load("gpt-oss-20b"))
    assert q["experts"] == (24, {"method": "mxfp4"})
    assert {entry["method"] for name, (_, entry) in q.items() if name != "experts"} == {"none"}


def test_fp8_names_fused_linears_by_their_own_name_too():
    # is_layer_skipped honours the fused name first (0.25.0 and 0.33.0)
    hf = load("llama-3.1-8b-instruct-fp8-block")
    hf["quantization_config"]["ignored_layers"] = ["model.layers.4.self_attn.qkv_proj"]
    assert quants(hf)["qkv_proj.unquantized"][0] == 1


# --------------------------------------------------------------------------------------------
# refused, with what to do instead

@pytest.mark.parametrize("quant, why", [
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "quant_method 'bitsandbytes' is not planned"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "quant_method 'modelopt' is not planned"),
    ({"quant_method": "fbgemm_fp8"}, "quant_method 'fbgemm_fp8' is not planned"),
    ({"load_in_8bit": True}, "quant_method None is not planned"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
        "input_activations": None}}}, "int 4-bit group weights with 16-bit activations"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group"},
        "input_activations": {"num_bits": 4, "type": "float", "dynamic": "local"}}}}, "float 4-bit tensor_group"),
    ({"quant_method": "compressed-tensors", "config_groups": {
        "a": {"targets": ["re:.*mlp.*"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
              "input_activations": {"num_bits": 8, "type": "float", "dynamic": True, "strategy": "token"}}}},
     "targets \\['re:.\\*mlp.\\*'\\]"),
])
def test_other_quantizations_are_refused_with_a_way_out(quant, why):
    hf = load("qwen2-7b-instruct")
    hf["quantization_config"] = quant
    with pytest.raises(HFConfigError, match=why) as info:
        engine_from_hf(hf)
    message = str(info.value)
    assert "write the engine YAML by hand" in message and "warmup engine --from-vllm" in message
    assert info.value.key == "quantization_config" and "\n" not in message


# --------------------------------------------------------------------------------------------
# QuantConfig: the read quantization_config, one identity built by keyword (issue 56 item 4)

def test_quant_config_is_built_by_keyword_only_and_never_changed():
    import dataclasses

    from planner.engine.hf.quantization import NONE, QuantConfig

    with pytest.raises(TypeError):
        QuantConfig(dict(NONE), dict(NONE))  # the positional form: refused
    quant = QuantConfig(linear=dict(NONE), experts=dict(NONE))
    assert (quant.patterns, quant.match, quant.weight_bits, quant.linears) == ([], "exact", 16, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        quant.match = "regex"


def test_every_quant_config_of_the_hf_builder_is_built_by_keyword():
    import ast

    folder = os.path.join(os.path.dirname(FIXTURES), "..", "..", "planner", "engine", "hf")
    calls = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                calls += [(name, node) for node in ast.walk(ast.parse(f.read()))
                          if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                          and node.func.id == "QuantConfig"]
    assert len(calls) >= 7  # one per method read, and none's
    assert [f"{name}: {ast.unparse(call)}" for name, call in calls if call.args] == []
