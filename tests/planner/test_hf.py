"""planner.engine.hf: engine configs from Hugging Face config.json files.

Every expected shape below is derived by hand from the config values, with
vLLM's sharding rules: column-parallel layers split N, row-parallel split K,
KV heads are replicated when tp exceeds them, the vocabulary is padded to 64.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os

import pytest
import yaml
from jsonschema import Draft202012Validator

from planner.engine.hf import GPUS, EngineRequest, HFConfigError, engine_from_hf, engine_to_yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf")

with open(os.path.join(ROOT, "schemas", "engine.schema.json"), encoding="utf-8") as _f:
    VALIDATOR = Draft202012Validator(json.load(_f))

FP8_BLOCK = {"method": "fp8", "weight_block_size": [128, 128]}
NONE = {"method": "none"}


def load(name: str) -> dict:
    with open(os.path.join(FIXTURES, name + ".json"), encoding="utf-8") as f:
        return json.load(f)


def engine(fixture: str, **kwargs) -> dict:
    """engine_from_hf on a fixture; the result must validate against the schema."""
    e = engine_from_hf(load(fixture), EngineRequest(**kwargs))
    errors = sorted(VALIDATOR.iter_errors(e), key=lambda err: list(err.path))
    assert not errors, [f"{list(err.path)}: {err.message}" for err in errors]
    return e


def linears(e: dict) -> dict:
    """name -> (n, k, count, quant method)"""
    out = {}
    for entry in e["model"]["linear"]:
        assert entry["name"] not in out, f"duplicate linear {entry['name']}"
        out[entry["name"]] = (entry["n"], entry["k"], entry["count"], entry["quant"]["method"])
    return out


def only(items: list) -> dict:
    assert len(items) == 1, items
    return items[0]


# ----------------------------------------------------------------------------
# Llama

def test_llama_31_8b_fp8_block_tp1():
    e = engine("llama-3.1-8b-instruct-fp8-block")
    # H=32, KVH=8, head_dim=4096/32=128, hidden 4096, intermediate 14336
    assert linears(e) == {
        "qkv_proj": ((32 + 2 * 8) * 128, 4096, 32, "fp8"),   # 6144
        "o_proj": (4096, 32 * 128, 32, "fp8"),
        "gate_up_proj": (2 * 14336, 4096, 32, "fp8"),        # 28672
        "down_proj": (4096, 14336, 32, "fp8"),
        "lm_head": (128256, 4096, 1, "none"),                # 128256 = 64 * 2004
    }
    assert e["model"]["linear"][0]["quant"] == FP8_BLOCK
    assert e["model"]["linear"][-1]["quant"] == NONE
    assert e["model"]["moe"] == []
    attn = only(e["model"]["attention"])
    assert attn == {"name": "attn", "num_heads": 32, "num_kv_heads": 8, "head_size": 128, "count": 32,
                    "scale": 128 ** -0.5, "logits_soft_cap": 0.0, "sliding_window": [-1, -1],
                    "kv_cache_dtype": "auto", "backend": "FLASH_ATTN"}
    m = e["model"]
    assert (m["architecture"], m["vocab_size"], m["max_model_len"], m["runner"], m["dtype"],
            m["hidden_size"], m["num_layers"]) == (
        "LlamaForCausalLM", 128256, 131072, "generate", "bfloat16", 4096, 32)
    assert e["kv_cache"]["groups"] == [{"block_size": 16, "kind": "full_attention"}]
    assert e["scheduler"] == {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}
    assert e["speculative"] == {"method": "none", "num_speculative_tokens": 0}
    assert e["parallel"] == {"tensor_parallel_size": 1, "data_parallel_size": 1, "pipeline_parallel_size": 1,
                             "pipeline_rank": 0, "enable_expert_parallel": False}
    assert e["device"] == {"name": "H100", "num_sms": 132, "capability": "9.0"}


def test_llama_tp2_splits_n_of_column_and_k_of_row_layers():
    lin = linears(engine("llama-3.1-8b-instruct-fp8-block", tp=2))
    assert lin["qkv_proj"][:2] == ((16 + 2 * 4) * 128, 4096)   # 3072
    assert lin["o_proj"][:2] == (4096, 16 * 128)
    assert lin["gate_up_proj"][:2] == (14336, 4096)
    assert lin["down_proj"][:2] == (4096, 7168)
    assert lin["lm_head"][:2] == (128256 // 2, 4096)


def test_kv_heads_replicated_when_tp_exceeds_them():
    e = engine("llama-3.1-8b-instruct-fp8-block", tp=16)
    attn = only(e["model"]["attention"])
    assert (attn["num_heads"], attn["num_kv_heads"]) == (2, 1)          # 32/16, max(1, 8//16)
    assert linears(e)["qkv_proj"][:2] == ((2 + 2 * 1) * 128, 4096)      # 512
    # Qwen2 (H 28, KVH 4): tp 4 splits KV exactly
    q2 = engine("qwen2-7b-instruct", tp=4)
    assert (only(q2["model"]["attention"])["num_heads"], only(q2["model"]["attention"])["num_kv_heads"]) == (7, 1)
    assert linears(q2)["qkv_proj"][:2] == ((7 + 2) * 128, 3584)         # 1152
    # Qwen3-8B (H 32, KVH 8) at tp 32: one q head, each KV head replicated 4 times
    q3 = engine("qwen3-8b", tp=32)
    assert (only(q3["model"]["attention"])["num_heads"], only(q3["model"]["attention"])["num_kv_heads"]) == (1, 1)
    assert linears(q3)["qkv_proj"][:2] == ((1 + 2) * 128, 4096)
    assert linears(q3)["o_proj"][:2] == (4096, 128)
    assert linears(q3)["lm_head"][:2] == (151936 // 32, 4096)
    # vLLM replicates KV heads only when tp is a multiple of them
    with pytest.raises(HFConfigError, match=r"--tp 14 is not divisible by num_key_value_heads \(4\)"):
        engine_from_hf(load("qwen2-7b-instruct"), EngineRequest(tp=14))


# ----------------------------------------------------------------------------
# Qwen2 / Qwen3 dense

def test_qwen2_7b_instruct():
    e = engine("qwen2-7b-instruct")
    # H=28, KVH=4, head_dim = 3584/28 = 128, intermediate 18944, vocab 152064 = 64*2376
    assert linears(e) == {
        "qkv_proj": ((28 + 8) * 128, 3584, 28, "none"),
        "o_proj": (3584, 3584, 28, "none"),
        "gate_up_proj": (37888, 3584, 28, "none"),
        "down_proj": (3584, 18944, 28, "none"),
        "lm_head": (152064, 3584, 1, "none"),
    }
    # sliding_window is in the config but use_sliding_window is false
    assert only(e["model"]["attention"])["sliding_window"] == [-1, -1]
    assert e["model"]["max_model_len"] == 32768


def test_qwen2_sliding_window_used_from_max_window_layers():
    hf = load("qwen2-7b-instruct")
    hf.update(use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    e = engine_from_hf(hf)
    assert not list(VALIDATOR.iter_errors(e))
    # vLLM's groups hold as many layers as the smaller kind (kv_cache_utils.py,
    # _get_kv_cache_groups_uniform_page_size): 20 full layers are three groups of 7, 7 and 6
    attention = e["model"]["attention"]
    assert [(a["name"], a["count"], a["sliding_window"], a.get("kv_cache_group", 0)) for a in attention] == [
        ("attn", 7, [-1, -1], 0), ("attn_2", 7, [-1, -1], 1), ("attn_3", 6, [-1, -1], 2),
        ("attn_sliding", 8, [4095, 0], 3)]
    assert [g["kind"] for g in e["kv_cache"]["groups"]] == ["full_attention"] * 3 + ["sliding_window"]


def test_qwen3_8b():
    e = engine("qwen3-8b", tp=2)
    # H=32 -> 16, KVH=8 -> 4, head_dim 128, intermediate 12288 -> 6144
    assert linears(e) == {
        "qkv_proj": ((16 + 8) * 128, 4096, 36, "none"),
        "o_proj": (4096, 2048, 36, "none"),
        "gate_up_proj": (12288, 4096, 36, "none"),
        "down_proj": (4096, 6144, 36, "none"),
        "lm_head": (151936 // 2, 4096, 1, "none"),
    }
    assert e["model"]["max_model_len"] == 40960


# ----------------------------------------------------------------------------
# Qwen3-MoE

def test_qwen3_30b_a3b_fp8_tp1():
    e = engine("qwen3-30b-a3b-fp8")
    # H=32, KVH=4, head_dim=128 (explicit; 32*128=4096 != hidden 2048)
    assert linears(e) == {
        "qkv_proj": ((32 + 8) * 128, 2048, 48, "fp8"),    # 5120
        "o_proj": (2048, 4096, 48, "fp8"),
        "gate": (128, 2048, 48, "none"),    # router: replicated; the checkpoint leaves it unquantized
        "lm_head": (151936, 2048, 1, "none"),
    }
    moe = only(e["model"]["moe"])
    assert moe == {"name": "experts", "num_experts": 128, "top_k": 8, "hidden_size": 2048,
                   "intermediate_size": 768, "count": 48, "quant": FP8_BLOCK}


def test_qwen3_moe_gate_is_block_fp8_where_the_checkpoint_does_not_ignore_it():
    # Qwen's own FP8 checkpoint lists every layer's mlp.gate in modules_to_not_convert (the
    # fixture does too); without that list vLLM runs the gate on the block-FP8 linear kernel
    hf = load("qwen3-30b-a3b-fp8")
    del hf["quantization_config"]["modules_to_not_convert"]
    assert linears(engine_from_hf(hf))["gate"] == (128, 2048, 48, "fp8")


def test_mixtral_gate_stays_unquantized_under_fp8():
    # vLLM builds Mixtral's (and Qwen2-MoE's, DeepSeek's) gate with quant_config=None
    hf = load("mixtral-8x7b")
    hf["quantization_config"] = dict(load("qwen3-30b-a3b-fp8")["quantization_config"])
    assert linears(engine_from_hf(hf, EngineRequest(tp=2)))["gate"][3] == "none"


def test_qwen3_moe_tp2_and_expert_parallel():
    e = engine("qwen3-30b-a3b-fp8", tp=2)
    assert only(e["model"]["moe"])[("num_experts")] == 128
    assert only(e["model"]["moe"])["intermediate_size"] == 384
    assert linears(e)["qkv_proj"][:2] == ((16 + 4) * 128, 2048)
    ep = engine("qwen3-30b-a3b-fp8", tp=4, enable_expert_parallel=True)
    moe = only(ep["model"]["moe"])
    assert (moe["num_experts"], moe["intermediate_size"]) == (32, 768)   # 128/4 experts, unsplit
    assert ep["parallel"]["enable_expert_parallel"] is True
    ep8 = engine("qwen3-30b-a3b-fp8", tp=4, dp=2, enable_expert_parallel=True)
    assert only(ep8["model"]["moe"])["num_experts"] == 16                 # 128/(4*2)


def test_qwen3_moe_fp8_block_shard_refused_like_vllm_025():
    # 768 / 4 = 192 is not a multiple of the 128 block (vLLM issue #25292); vLLM 0.33.0 refines the
    # blocks instead (tests/planner/test_hf_vllm_rules.py)
    with pytest.raises(HFConfigError, match=r"moe_intermediate_size = 192 .*block_n 128.*--vllm-release 0.33.0"):
        engine_from_hf(load("qwen3-30b-a3b-fp8"), EngineRequest(tp=4, vllm_release="0.25.0"))


def test_qwen3_moe_mlp_only_layers_and_sparse_step():
    hf = load("qwen3-30b-a3b-fp8")
    hf["mlp_only_layers"] = [0, 47]
    e = engine_from_hf(hf)
    lin = linears(e)
    assert lin["gate_up_proj"] == (2 * 6144, 2048, 2, "fp8")
    assert lin["down_proj"] == (2048, 6144, 2, "fp8")
    assert lin["gate"][2] == 46
    assert only(e["model"]["moe"])["count"] == 46
    hf = load("qwen3-30b-a3b-fp8")
    hf["decoder_sparse_step"] = 2            # MoE where (i + 1) % 2 == 0
    e = engine_from_hf(hf)
    assert only(e["model"]["moe"])["count"] == 24
    assert linears(e)["gate_up_proj"][2] == 24


# ----------------------------------------------------------------------------
# Mixtral

def test_mixtral_8x7b_tp2():
    e = engine("mixtral-8x7b", tp=2)
    assert linears(e) == {
        "qkv_proj": ((16 + 2 * 4) * 128, 4096, 32, "none"),   # 3072
        "o_proj": (4096, 2048, 32, "none"),
        "gate": (8, 4096, 32, "none"),
        "lm_head": (16000, 4096, 1, "none"),                   # 32000 = 64*500, / 2
    }
    assert only(e["model"]["moe"]) == {"name": "experts", "num_experts": 8, "top_k": 2, "hidden_size": 4096,
                                       "intermediate_size": 7168, "count": 32, "quant": NONE}
    ep = engine("mixtral-8x7b", tp=2, enable_expert_parallel=True)
    moe = only(ep["model"]["moe"])
    assert (moe["num_experts"], moe["intermediate_size"]) == (4, 14336)


def test_data_parallel_without_ep_flattens_moe_tp_like_vllm():
    # vLLM's FusedMoE shards over tp * dp ranks when expert parallelism is off
    e = engine("mixtral-8x7b", tp=2, dp=2)
    moe = only(e["model"]["moe"])
    assert (moe["num_experts"], moe["intermediate_size"]) == (8, 14336 // 4)
    assert linears(e)["qkv_proj"][:2] == (3072, 4096)          # attention stays tp-only
    assert e["parallel"]["data_parallel_size"] == 2
    assert e["name"] == "mixtral-tp2-dp2-h100"


def test_sliding_window_on_every_layer_for_llama_family():
    hf = load("mixtral-8x7b")
    hf["sliding_window"] = 4096
    e = engine_from_hf(hf, EngineRequest(tp=2))
    assert not list(VALIDATOR.iter_errors(e))
    attn = only(e["model"]["attention"])
    assert (attn["count"], attn["sliding_window"]) == (32, [4095, 0])
    assert e["kv_cache"]["groups"] == [{"block_size": 16, "kind": "sliding_window"}]


def test_expert_parallel_divisibility():
    with pytest.raises(HFConfigError, match=r"num_local_experts \(8\) is not divisible by --tp 16"):
        engine_from_hf(load("mixtral-8x7b"), EngineRequest(tp=16, enable_expert_parallel=True))


# ----------------------------------------------------------------------------
# DeepSeek-V3

def test_deepseek_v3_tp8():
    e = engine("deepseek-v3", tp=8, gpu="H200", block_size=64, num_blocks=65536,
               max_num_seqs=1024, max_num_batched_tokens=8192)
    # H=128 -> 16 per rank; qk_head = 128 + 64 = 192; v_head 128
    assert linears(e) == {
        "fused_qkv_a_proj": (1536 + 512 + 64, 7168, 61, "fp8"),   # 2112, replicated
        "q_b_proj": (16 * 192, 1536, 61, "fp8"),                   # 3072
        "kv_b_proj": (16 * (128 + 128), 512, 61, "fp8"),           # 4096
        "o_proj": (7168, 16 * 128, 61, "fp8"),                     # k 2048
        "gate_up_proj": (2 * 18432 // 8, 7168, 3, "fp8"),          # first_k_dense_replace 3
        "down_proj": (7168, 18432 // 8, 3, "fp8"),
        "gate": (256, 7168, 58, "none"),
        "shared_experts.gate_up_proj": (2 * 2048 // 8, 7168, 58, "fp8"),
        "shared_experts.down_proj": (7168, 2048 // 8, 58, "fp8"),
        "lm_head": (129280 // 8, 7168, 1, "none"),                 # 129280 = 64*2020
    }
    assert only(e["model"]["moe"]) == {"name": "experts", "num_experts": 256, "top_k": 8, "hidden_size": 7168,
                                       "intermediate_size": 256, "count": 58, "quant": FP8_BLOCK}
    attn = only(e["model"]["attention"])
    mscale = 0.1 * 1.0 * math.log(40) + 1.0
    assert attn["scale"] == pytest.approx(192 ** -0.5 * mscale ** 2)
    assert attn["scale"] == pytest.approx(0.1352, abs=1e-4)
    assert (attn["num_heads"], attn["num_kv_heads"], attn["head_size"], attn["head_size_v"], attn["count"],
            attn["backend"]) == (16, 1, 576, 512, 61, "FLASH_ATTN_MLA")   # a 64-token page is a multiple of 16
    assert e["kv_cache"] == {"num_blocks": 65536, "groups": [{"block_size": 64, "kind": "full_attention"}]}
    assert e["scheduler"] == {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}
    assert e["device"] == {"name": "H200", "num_sms": 132, "capability": "9.0"}
    assert e["model"]["max_model_len"] == 163840


def test_deepseek_v3_defaults_and_expert_parallel():
    e = engine("deepseek-v3", tp=8, gpu="H200", enable_expert_parallel=True)
    # vLLM's page: FLASH_ATTN_MLA, first on SM 9.0, takes its default 16 (part AE's live vLLM picked it)
    assert e["kv_cache"]["groups"] == [{"block_size": 16, "kind": "full_attention"}]
    assert only(e["model"]["attention"])["backend"] == "FLASH_ATTN_MLA"
    moe = only(e["model"]["moe"])
    assert (moe["num_experts"], moe["intermediate_size"]) == (32, 2048)
    # shared experts stay tensor-parallel
    assert linears(e)["shared_experts.gate_up_proj"][:2] == (512, 7168)


def test_deepseek_scale_without_rope_scaling():
    hf = load("deepseek-v3")
    del hf["rope_scaling"]
    attn = only(engine_from_hf(hf, EngineRequest(tp=8, gpu="H200"))["model"]["attention"])
    assert attn["scale"] == pytest.approx(192 ** -0.5)


# ----------------------------------------------------------------------------
# quantization

def test_quant_ignored_layers():
    # fp8's ignored_layers name modules exactly (vLLM's is_layer_skipped, match_mode "exact"): a fused
    # linear by its own vLLM name (layer 2's gate_up_proj) or by all the checkpoint modules it loads
    # (layer 1's gate_proj and up_proj); a `re:` entry is no pattern to fp8 (compressed-tensors takes
    # them: tests/planner/test_hf_quantization.py)
    hf = load("llama-3.1-8b-instruct-fp8-block")
    hf["quantization_config"]["ignored_layers"] = [
        "lm_head",
        "model.layers.0.self_attn.o_proj",
        "model.layers.1.mlp.gate_proj", "model.layers.1.mlp.up_proj", "model.layers.1.mlp.down_proj",
        "model.layers.2.mlp.gate_up_proj", "model.layers.2.mlp.down_proj",
        r"re:model\.layers\.3\.mlp\..*",
    ]
    e = engine_from_hf(hf)
    assert not list(VALIDATOR.iter_errors(e))
    lin = linears(e)
    assert lin["o_proj"] == (4096, 4096, 31, "fp8")
    assert lin["o_proj.unquantized"] == (4096, 4096, 1, "none")
    assert lin["gate_up_proj"] == (28672, 4096, 30, "fp8")
    assert lin["gate_up_proj.unquantized"] == (28672, 4096, 2, "none")
    assert lin["down_proj.unquantized"][2] == 2
    assert lin["qkv_proj"] == (6144, 4096, 32, "fp8")


def test_quant_ignoring_part_of_a_fused_layer_is_refused():
    hf = load("llama-3.1-8b-instruct-fp8-block")
    hf["quantization_config"]["ignored_layers"] = ["model.layers.0.self_attn.q_proj"]
    with pytest.raises(HFConfigError, match="qkv_proj"):
        engine_from_hf(hf)


def test_quant_modules_to_not_convert_on_moe():
    hf = load("qwen3-30b-a3b-fp8")
    hf["quantization_config"]["modules_to_not_convert"] = ["lm_head", "mlp.gate", "model.layers.5.mlp.experts",
                                                           "model.layers.7.mlp.gate"]
    e = engine_from_hf(hf)
    assert not list(VALIDATOR.iter_errors(e))
    moes = {m["name"]: (m["count"], m["quant"]["method"]) for m in e["model"]["moe"]}
    assert moes == {"experts": (47, "fp8"), "experts.unquantized": (1, "none")}
    # fp8 names modules exactly (vLLM's is_layer_skipped): "mlp.gate" names no module, layer 7's gate is named
    assert linears(e)["gate"] == (128, 2048, 47, "fp8")
    assert linears(e)["gate.unquantized"] == (128, 2048, 1, "none")


def test_quant_fp8_per_tensor_and_unsupported():
    hf = load("llama-3.1-8b-instruct-fp8-block")
    del hf["quantization_config"]["weight_block_size"]
    e = engine_from_hf(hf, EngineRequest(tp=2))
    assert {x["quant"]["method"] for x in e["model"]["linear"] if x["name"] != "lm_head"} == {"fp8_per_tensor"}
    hf["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    with pytest.raises(HFConfigError, match="quant_method 'bitsandbytes' is not planned by --from-hf"):
        engine_from_hf(hf)


# ----------------------------------------------------------------------------
# errors

def test_tp_divisibility_error_names_the_key():
    hf = load("qwen3-8b")
    hf["num_attention_heads"] = 40
    with pytest.raises(HFConfigError) as info:
        engine_from_hf(hf, EngineRequest(tp=16))
    assert str(info.value) == "config.json: num_attention_heads (40) is not divisible by --tp 16"
    assert isinstance(info.value, ValueError)
    with pytest.raises(HFConfigError, match=r"num_attention_heads \(28\) is not divisible by --tp 8"):
        engine_from_hf(load("qwen2-7b-instruct"), EngineRequest(tp=8, source="qwen2.json"))
    hf = load("qwen3-8b")
    hf["num_key_value_heads"] = 6
    hf["num_attention_heads"] = 48
    with pytest.raises(HFConfigError, match=r"num_key_value_heads \(6\) is not divisible by --tp 4"):
        engine_from_hf(hf, EngineRequest(tp=4))
    hf = load("llama-3.1-8b-instruct-fp8-block")
    del hf["quantization_config"]
    hf["intermediate_size"] = 14340
    with pytest.raises(HFConfigError, match=r"intermediate_size \(14340\) is not divisible by --tp 8"):
        engine_from_hf(hf, EngineRequest(tp=8))


def test_unknown_architecture():
    hf = load("qwen3-8b")
    hf["architectures"] = ["GPT2LMHeadModel"]
    with pytest.raises(HFConfigError) as info:
        engine_from_hf(hf, EngineRequest(source="gpt2/config.json"))
    message = str(info.value)
    assert message.startswith("gpt2/config.json: architectures: GPT2LMHeadModel is not planned by --from-hf: "
                              "no module layout of vLLM's is declared for it")
    assert "write the engine YAML by hand" in message and "warmup engine --from-vllm" in message
    for arch in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
                 "MixtralForCausalLM", "DeepseekV3ForCausalLM"):
        assert arch in message
    del hf["architectures"]
    with pytest.raises(HFConfigError, match="architectures is missing"):
        engine_from_hf(hf)


def test_unknown_gpu_and_bad_flags():
    with pytest.raises(HFConfigError) as info:
        engine_from_hf(load("qwen3-8b"), EngineRequest(gpu="V100"))
    assert "V100" in str(info.value) and all(name in str(info.value) for name in GPUS)
    with pytest.raises(HFConfigError, match="--max-model-len 200000 exceeds max_position_embeddings"):
        engine_from_hf(load("qwen3-8b"), EngineRequest(max_model_len=200000))
    with pytest.raises(HFConfigError, match="--tp"):
        engine_from_hf(load("qwen3-8b"), EngineRequest(tp=0))
    with pytest.raises(HFConfigError, match="hidden_size is missing"):
        engine_from_hf({k: v for k, v in load("qwen3-8b").items() if k != "hidden_size"})


# ----------------------------------------------------------------------------
# KV estimate, scheduler, names

def test_num_blocks_estimate_llama():
    e = engine("llama-3.1-8b-instruct-fp8-block")
    weights = 32 * 4096 * (6144 + 4096 + 28672 + 14336) * 1 + 2 * 128256 * 4096 * 2   # fp8 layers, bf16 lm_head+embed
    free = 0.9 * 80 * 2 ** 30 - weights
    per_block = 32 * 16 * 2 * 8 * 128 * 2
    assert e["kv_cache"]["num_blocks"] == int(free // per_block) // 16 * 16
    assert e["kv_cache"]["num_blocks"] % 16 == 0
    assert "estimate" in e["description"]
    # MLA: 61 layers * 16 tokens * 576 * 2 bytes per block
    ds = engine("deepseek-v3", tp=8, gpu="H200")
    assert 32000 < ds["kv_cache"]["num_blocks"] < 64000
    # does not fit: refused (it used to get 16 blocks and pass every check); see test_memory_fit.py
    with pytest.raises(HFConfigError, match="the weights do not fit: 626.8 GiB per rank"):
        engine("deepseek-v3", tp=1, gpu="L40S")
    assert engine("qwen3-8b", num_blocks=1000)["kv_cache"]["num_blocks"] == 1000


@pytest.mark.parametrize("gpu, tokens, seqs", [
    ("H100", 8192, 1024), ("H200", 8192, 1024), ("H20", 8192, 1024), ("B200", 16384, 1024),
    ("A100", 2048, 256), ("L40S", 2048, 256), ("h200", 8192, 1024),
])
def test_scheduler_defaults_by_gpu(gpu, tokens, seqs):
    e = engine("qwen3-8b", gpu=gpu)
    assert e["scheduler"] == {"max_num_seqs": seqs, "max_num_batched_tokens": tokens}
    assert e["device"]["name"] == gpu.upper()
    assert e["device"]["num_sms"] == GPUS[gpu.upper()]["num_sms"]


def test_scheduler_overrides():
    e = engine("qwen3-8b", max_num_seqs=64, max_num_batched_tokens=4096)
    assert e["scheduler"] == {"max_num_seqs": 64, "max_num_batched_tokens": 4096}
    with pytest.raises(HFConfigError, match="--max-num-batched-tokens"):
        engine_from_hf(load("qwen3-8b"), EngineRequest(max_num_seqs=512, max_num_batched_tokens=256))


def test_names_and_description():
    hf = load("qwen3-8b")
    e = engine_from_hf(hf, EngineRequest(tp=2, gpu="H200"))
    assert e["name"] == "qwen3-tp2-h200"                       # model_type when source is config.json
    assert e["description"].startswith("Generated by `warmup engine --from-hf config.json --tp 2 --gpu H200`")
    e = engine_from_hf(hf, EngineRequest(source="tests/fixtures/hf/qwen3-8b.json"))
    assert e["name"] == "qwen3-8b-tp1-h100"
    hf["_name_or_path"] = "Qwen/Qwen3-8B"
    assert engine_from_hf(hf, EngineRequest(tp=2))["name"] == "Qwen3-8B-tp2-h100"
    assert engine_from_hf(hf, EngineRequest(name="mine"))["name"] == "mine"


@pytest.mark.parametrize("gpu, block_size, backend, page", [
    ("H200", None, "FLASH_ATTN_MLA", 16), ("H200", 64, "FLASH_ATTN_MLA", 64), ("H200", 8, "TRITON_MLA", 8),
    ("B200", None, "FLASHINFER_MLA", 32), ("B200", 64, "FLASHINFER_MLA", 64), ("B200", 16, "TRITON_MLA", 16)])
def test_the_mla_backend_and_page_are_vllms_first_that_takes_them(gpu, block_size, backend, page):
    """vLLM 0.25.0's and 0.33.0's order for dense MLA (platforms/cuda.py): FLASHINFER_MLA first on SM 10.x
    (pages of 32 or 64; with none given vLLM takes its smallest, 32), FLASH_ATTN_MLA on SM 9.x (multiples
    of 16; none given: vLLM's 16), TRITON_MLA where neither takes the page."""
    e = engine("deepseek-v3", tp=8, gpu=gpu, **({"block_size": block_size} if block_size else {}))
    assert (only(e["model"]["attention"])["backend"], e["kv_cache"]["groups"][0]["block_size"]) == (backend, page)


def test_key_order():
    e = engine("deepseek-v3", tp=8, gpu="H200")
    assert list(e) == ["name", "description", "model", "kv_cache", "scheduler", "speculative", "parallel", "device"]
    assert list(e["model"]) == ["architecture", "vocab_size", "max_model_len", "runner", "dtype", "hidden_size",
                                "num_layers", "linear", "moe", "attention"]
    pinned = engine("deepseek-v3", tp=8, gpu="H200", model_runner="v1")["model"]
    assert list(pinned)[:6] == ["architecture", "vocab_size", "max_model_len", "runner", "model_runner", "dtype"]
    assert pinned["model_runner"] == "v1"


# ----------------------------------------------------------------------------
# YAML, determinism, shipped files

ALL = [("llama-3.1-8b-instruct-fp8-block", {}), ("qwen3-30b-a3b-fp8", {}), ("deepseek-v3", {"tp": 8, "gpu": "H200"}),
       ("mixtral-8x7b", {"tp": 2}), ("qwen2-7b-instruct", {}), ("qwen3-8b", {"tp": 4})]


@pytest.mark.parametrize("fixture, kwargs", ALL)
def test_yaml_round_trip_and_determinism(fixture, kwargs):
    e = engine(fixture, **kwargs)
    text = engine_to_yaml(e)
    assert text == engine_to_yaml(engine(fixture, **kwargs))
    assert yaml.safe_load(text) == e
    lines = text.splitlines()
    for key in ("linear", "attention", "groups"):
        start = lines.index(next(line for line in lines if line.strip() == f"{key}:"))
        item = lines[start + 1]
        assert item.lstrip().startswith("- {") and item.endswith("}"), item


def test_yaml_quotes_what_would_not_read_back():
    e = engine("qwen3-8b")
    e["name"] = "yes"
    e["description"] = 'a: "b" # c\n'
    text = engine_to_yaml(e)
    back = yaml.safe_load(text)
    assert back["name"] == "yes" and back["description"] == 'a: "b" # c\n'
    assert back["device"]["capability"] == "9.0"
    assert engine_to_yaml({"x": 1e-05, "y": []}) == "x: 1.0e-05\ny: []\n"
    assert yaml.safe_load(engine_to_yaml({"x": 1e-05}))["x"] == 1e-05


HF_PACKAGE = os.path.join(ROOT, "planner", "engine", "hf")


def imported_names(path: str) -> set[str]:
    """What a module imports, anywhere in it: a top-level package, or a relative module as written (`..x`)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or "") if node.level else (node.module or "").split(".")[0])
    return imported


def test_hf_module_imports_only_stdlib_and_the_planner():
    modules = sorted(f[:-3] for f in os.listdir(HF_PACKAGE) if f.endswith(".py"))
    assert {"__init__", "source", "assemble", "decoder", "layouts"} <= set(modules)  # the package, not an empty folder
    # Each module of the package imports its siblings (.source, .layers ...) and, besides:
    # ...yamlio: the planner's YAML codec (its writer is pure stdlib; PyYAML is imported on a load);
    # ...limits: constants only (the engine schema's bounds); ...errors: PlanError, for
    # HFConfigError.as_plan_error; ..vllm_choices: the release defaults --from-hf writes (stdlib
    # only, checked below), through .facts: the typed engine record and a layer's quantization
    # (stdlib only too); kernel_model: its arith module's cdiv, the one ceiling division (stdlib
    # only; the package __init__ is a docstring) and its device module's parse_capability, the one
    # reading of a capability's text (stdlib only, checked below); ..releases: the release table,
    # whose rows say what each release's model code builds (stdlib and ..vllm_choices only, checked below)
    outside = {"__future__", "dataclasses", "math", "os", "re", "...yamlio", "...limits", "...errors",
               "..vllm_choices", "..releases", "kernel_model"}
    siblings = {"." + module for module in modules if module != "__init__"}
    for module in modules:
        imported = imported_names(os.path.join(HF_PACKAGE, module + ".py")) - siblings
        assert imported <= outside, (module, imported - outside)
    stdlib_only = {"vllm_choices": {"__future__", ".facts", "kernel_model.device"},
                   "facts": {"__future__", "typing", "kernel_model.device"},
                   "queries": {"__future__", "typing", ".facts"}}
    for module, allowed in stdlib_only.items():
        with open(os.path.join(ROOT, "planner", "engine", module + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        imports = {"." * node.level + (node.module or "") for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom)}
        assert imports <= allowed and not [node for node in ast.walk(tree) if isinstance(node, ast.Import)], module
    assert imported_names(os.path.join(ROOT, "planner", "engine", "releases.py")) == {
        "__future__", "re", "sys", "typing", ".vllm_choices"}
    assert imported_names(os.path.join(ROOT, "kernel_model", "device.py")) == {"__future__", "re"}


def test_shipped_engines_match_regen_script():
    path = os.path.join(FIXTURES, "regen_engines.py")
    spec = importlib.util.spec_from_file_location("regen_engines", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rendered = module.render_all()
    assert sorted(rendered) == sorted(f"plans/engines/{stem}.yaml" for stem in (
        "llama-3.1-8b-fp8-h100", "qwen3-30b-a3b-fp8-h100", "deepseek-v3-fp8-tp8-h200", "mixtral-8x7b-tp2-h100"))
    for rel, text in rendered.items():
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            assert f.read() == text, f"{rel} is stale: run python tests/fixtures/hf/regen_engines.py"
        e = yaml.safe_load(text)
        assert not list(VALIDATOR.iter_errors(e)), rel
    ds = yaml.safe_load(rendered["plans/engines/deepseek-v3-fp8-tp8-h200.yaml"])
    assert ds["kv_cache"]["num_blocks"] == 11264
    assert ds["kv_cache"]["groups"][0]["block_size"] == 64


def test_qwen3_moe_experts_under_transformers_5_name():
    """transformers 5 loads Qwen3-MoE's num_experts as num_local_experts (the dict `--from-vllm`
    reads); the engine is the same, and a bad count names that key."""
    config = load("qwen3-30b-a3b-fp8")
    renamed = {k: v for k, v in config.items() if k != "num_experts"} | {"num_local_experts": config["num_experts"]}
    assert engine_from_hf(renamed, EngineRequest(tp=2)) == engine_from_hf(config, EngineRequest(tp=2))
    with pytest.raises(HFConfigError) as e:
        engine_from_hf({**renamed, "num_local_experts": 129}, EngineRequest(tp=2, enable_expert_parallel=True))
    assert e.value.reason == "num_local_experts (129) is not divisible by --tp 2 with --enable-expert-parallel"


@pytest.mark.parametrize("full, sliding, groups, full_groups", [
    (8, 24, [8, 8, 8, 8], 1),           # Cohere2's 3:1: the fewest layers of a kind make a group
    (8, 40, [8] * 6, 1),                # Gemma 3's 5:1
    (21, 21, [21, 21], 1),              # Gemma 2's 1:1
    (13, 12, [13, 12], 1),              # under 1.5 times the fewest: the most make a group
    (20, 8, [7, 7, 6, 8], 3),           # layers[i::3] of 20
    (0, 32, [32], 0), (32, 0, [32], 1),
])
def test_kv_cache_groups_split_as_vllm_splits_them(full, sliding, groups, full_groups):
    from planner.engine.hf.attention import _kv_cache_groups

    made = _kv_cache_groups(4096, [False] * full + [True] * sliding)
    assert [g.num_layers for g in made] == groups
    assert [g.kind for g in made] == ["full_attention"] * full_groups + ["sliding_window"] * (len(groups) - full_groups)
