"""`warmup engine --from-hf` follows vLLM (issue 53 item 5): the dtype `--dtype auto` serves, GPTQ's
router, AWQ and GPTQ groups split by tensor parallelism (linears refused, experts on MoeWNA16), and
sequence-parallel MoE's shared experts. Each rule is also checked against vLLM 0.25's and 0.33's own
model classes on the meta device (tests/from_vllm/test_model_layers.py); these run without vLLM."""

from __future__ import annotations

import json
import os

import pytest

from planner import cli
from planner.engine.hf import HFConfigError, engine_from_hf
from planner.engine.hf.model import auto_dtype

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf")
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}


def load(name: str, **over) -> dict:
    with open(os.path.join(FIXTURES, name + ".json"), encoding="utf-8") as f:
        return {**json.load(f), **over}


def engine(hf: dict, **kwargs) -> dict:
    return engine_from_hf(hf, num_blocks=1024, max_model_len=4096, **kwargs)


def by_name(e: dict) -> dict:
    return {x["name"]: x for x in e["model"]["linear"]}


@pytest.mark.parametrize("config, model_type, served", [
    ("float32", "llama", "bfloat16"), ("float16", "llama", "float16"), ("bfloat16", "llama", "bfloat16"),
    ("float16", "gemma2", "bfloat16"), ("float16", "gemma3_text", "bfloat16"), ("float16", "glm4", "bfloat16")])
def test_auto_dtype_is_vllms_resolve_auto_dtype(config, model_type, served):
    assert auto_dtype(config, model_type) == served


def test_float32_checkpoint_is_served_in_bfloat16_and_the_estimate_follows():
    f32 = engine_from_hf(load("smollm-135m"))
    bf16 = engine_from_hf(load("smollm-135m", torch_dtype="bfloat16"))
    assert f32["model"]["dtype"] == "bfloat16" and f32["model"] == bf16["model"]
    assert f32["kv_cache"] == bf16["kv_cache"]  # 2-byte weights and KV, not 4
    assert {a["backend"] for a in f32["model"]["attention"]} == {"FLASH_ATTN"}
    no_dtype = {k: v for k, v in load("smollm-135m").items() if k != "torch_dtype"}
    assert engine_from_hf(no_dtype)["model"]["dtype"] == "bfloat16"  # transformers' default, float32, downcast


def test_gptq_leaves_the_router_unquantized_even_where_vllm_hands_it_the_quant_config():
    e = by_name(engine(load("qwen3-30b-a3b-fp8", quantization_config=GPTQ), tp=2))
    assert e["gate"]["quant"] == {"method": "none"} and e["qkv_proj"]["quant"] == {"method": "gptq"}
    fp8 = by_name(engine(load("qwen3-30b-a3b-fp8"), tp=2))  # the FP8 checkpoint's router follows its own list
    assert fp8["gate"]["quant"]["method"] == "none"


def test_gptq_experts_on_marlin_where_whole_groups_else_moe_wna16():
    hf = load("qwen1.5-moe-a2.7b-chat-gptq-int4")
    assert [m["quant"] for m in engine(hf)["model"]["moe"]] == [{"method": "gptq"}]
    tp2 = engine(hf, tp=2)["model"]
    assert [(m["intermediate_size"], m["quant"]) for m in tp2["moe"]] == [(704, {"method": "moe_wna16"})]
    assert by_name({"model": tp2})["gate"]["quant"] == {"method": "none"}
    # expert parallelism keeps each expert whole: Marlin again
    ep = engine(hf, tp=2, enable_expert_parallel=True)["model"]["moe"]
    assert [(m["num_experts"], m["quant"]) for m in ep] == [(30, {"method": "gptq"})]


def test_awq_experts_fall_back_to_moe_wna16_too():
    hf = load("qwen1.5-moe-a2.7b-chat", quantization_config=AWQ)
    assert [m["quant"] for m in engine(hf, tp=2)["model"]["moe"]] == [{"method": "moe_wna16"}]


def test_moe_wna16_refuses_what_no_group_of_32_divides():
    with pytest.raises(HFConfigError, match=r"176 wide per rank .* \(MoeWNA16Method.create_weights\)") as e:
        engine(load("qwen1.5-moe-a2.7b-chat-gptq-int4"), tp=8)
    assert e.value.key == "quantization_config" and "\n" not in str(e.value)


def test_awq_linear_whose_rank_k_is_not_whole_groups_is_refused():
    with pytest.raises(HFConfigError, match=r"down_proj in layer 0 has K = 1600 per rank \(--tp 8\).*"
                                            "AutoAWQLinearMethod") as e:
        engine(load("granite-3.1-8b-instruct", quantization_config=AWQ), tp=8)
    assert e.value.key == "quantization_config"


def test_gptq_linear_whose_rank_k_is_not_whole_groups_runs_machete_on_sm90_only():
    hf = load("granite-3.1-8b-instruct", quantization_config=GPTQ)
    assert by_name(engine(hf, tp=8))["down_proj"]["quant"] == {"method": "gptq"}  # Machete: K % 64, N % 128
    with pytest.raises(HFConfigError, match="down_proj in layer 0 has K = 1600 .* Exllama or Humming"):
        engine(hf, tp=8, gpu="A100")


def test_refusal_is_one_line_at_exit_2(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(load("granite-3.1-8b-instruct", quantization_config=AWQ), indent=2))
    assert cli.main(["engine", "--from-hf", str(path), "--tp", "8"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "config.json" in err and "down_proj in layer 0" in err


def shared(e: dict) -> list:
    return [(x["name"], x["n"], x["k"]) for x in e["model"]["linear"] if x["name"].startswith("shared_expert")]


def test_sequence_parallel_moe_replicates_deepseeks_shared_experts():
    hf = load("deepseek-v2-lite-chat")
    sp = engine(hf, tp=2, dp=2, enable_expert_parallel=True)
    assert shared(sp) == [("shared_experts.gate_up_proj", 5632, 2048), ("shared_experts.down_proj", 2048, 2816)]
    assert [(m["num_experts"], m["intermediate_size"]) for m in sp["model"]["moe"]] == [(16, 1408)]
    for kwargs in (dict(tp=2, dp=2), dict(tp=2, enable_expert_parallel=True)):  # not sequence parallel
        assert shared(engine(hf, **kwargs))[0][1] == 2816


def test_qwen2_moe_shared_expert_stays_split_under_sequence_parallel_moe():
    e = engine(load("qwen1.5-moe-a2.7b-chat"), tp=2, dp=2, enable_expert_parallel=True)
    assert ("shared_expert.down_proj", 2048, 2816) in shared(e)
