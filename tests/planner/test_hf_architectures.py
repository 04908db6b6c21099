"""`warmup engine --from-hf` on every architecture it plans (planner/engine/hf/layouts.py), by hand.

Each expected shape below is computed from the fixture's config.json with vLLM's rules, the vLLM
0.25.0 model file that builds it named beside it: column-parallel linears split N over tp,
row-parallel ones split K, QKVParallelLinear is (heads + 2 * kv_heads) * head_dim wide, a gated
MLP's gate_up_proj 2 * intermediate_size, the vocabulary is padded to a multiple of 64. The same
engines are compared with the layers vLLM 0.25 and 0.33 build themselves in
tests/integration/from_vllm/test_model_layers.py (where WARMUP_VLLM_ENVS is set); these tests run everywhere.
Each architecture's engine is planned by vllm-0.25 and vllm-0.33, and the architectures
--from-hf does not plan are refused with what to do instead.
"""

from __future__ import annotations

import json
import os

import pytest
from jsonschema import Draft202012Validator

from planner.engine.config import engine_from_document
from planner.engine.hf import LAYOUTS, EngineRequest, HFConfigError, engine_from_hf
from planner.engine.releases import VLLM_RELEASES
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.stages.gaps import MULTIMODAL_ENCODER
from planner.yamlio import Document

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf")
with open(os.path.join(ROOT, "schemas", "engine.schema.json"), encoding="utf-8") as _f:
    VALIDATOR = Draft202012Validator(json.load(_f))


def load(name: str) -> dict:
    with open(os.path.join(FIXTURES, name + ".json"), encoding="utf-8") as f:
        return json.load(f)


def engine(fixture: str, **kwargs) -> dict:
    """The engine of a fixture (num_blocks pinned: the shapes, not the memory estimate, are under test)."""
    e = engine_from_hf(load(fixture), EngineRequest(**{"num_blocks": 4096, **kwargs}))
    errors = sorted(VALIDATOR.iter_errors(e), key=lambda err: list(err.path))
    assert not errors, [f"{list(err.path)}: {err.message}" for err in errors]
    return e


def linears(e: dict) -> dict:
    """name -> (n, k, count, quant method)"""
    return {x["name"]: (x["n"], x["k"], x["count"], x["quant"]["method"]) for x in e["model"]["linear"]}


def attention(e: dict) -> list:
    """(heads, kv heads, head size, scale (rounded), soft cap, sliding window, count, backend) per entry."""
    return [(a["num_heads"], a["num_kv_heads"], a["head_size"], round(a["scale"], 6), a["logits_soft_cap"],
             a["sliding_window"], a["count"], a["backend"]) for a in e["model"]["attention"]]


FULL, NONE = [-1, -1], "none"


# --------------------------------------------------------------------------------------------
# Dense models on vLLM's Llama layout (llama.py, mistral.py, qwen2.py, qwen3.py, granite.py, glm4.py)

def test_mistral_7b_slides_every_layer():
    # llama.py: no layer_types, so vLLM hands every layer CacheConfig.sliding_window (engine/arg_utils.py)
    e = engine("mistral-7b-v0.1")
    assert linears(e) == {"qkv_proj": ((32 + 2 * 8) * 128, 4096, 32, NONE), "o_proj": (4096, 4096, 32, NONE),
                          "gate_up_proj": (2 * 14336, 4096, 32, NONE), "down_proj": (4096, 14336, 32, NONE),
                          "lm_head": (32000, 4096, 1, NONE)}
    assert attention(e) == [(32, 8, 128, round(128 ** -0.5, 6), 0.0, [4095, 0], 32, "FLASH_ATTN")]
    assert e["kv_cache"]["groups"] == [{"block_size": 16, "kind": "sliding_window"}]


def test_mistral_nemo_head_dim_is_the_configs():
    # llama.py: head_dim = config.head_dim (128), not hidden_size / heads (5120 / 32 = 160)
    lin = linears(engine("mistral-nemo-instruct-2407-fp8-dynamic", tp=2))
    assert lin["qkv_proj"][:2] == ((16 + 2 * 4) * 128, 5120)
    assert lin["o_proj"][:2] == (5120, 16 * 128)
    assert lin["lm_head"] == (131072 // 2, 5120, 1, NONE)


def test_granite_scales_by_attention_multiplier():
    # granite.py: self.scaling = config.attention_multiplier (1/128, not head_dim 128 ** -0.5)
    e = engine("granite-3.1-8b-instruct")
    assert attention(e) == [(32, 8, 128, round(1 / 128, 6), 0.0, FULL, 40, "FLASH_ATTN")]
    assert linears(e)["gate_up_proj"] == (2 * 12800, 4096, 40, NONE)
    assert linears(e)["lm_head"][0] == 49216  # 49155 padded to a multiple of 64


def test_glm4_replicates_its_two_kv_heads():
    # glm4.py: QKVParallelLinear with 2 KV heads: at tp 4 each rank holds one, replicated
    e = engine("glm-4-9b-0414", tp=4)
    assert linears(e)["qkv_proj"][:2] == ((32 // 4 + 2 * 1) * 128, 4096)
    assert attention(e) == [(8, 1, 128, round(128 ** -0.5, 6), 0.0, FULL, 40, "FLASH_ATTN")]
    assert linears(e)["gate_up_proj"][:2] == (2 * 13696 // 4, 4096)


def test_olmo2_and_cohere_compute_head_dim():
    # olmo2.py and commandr.py: head_dim = hidden_size // num_attention_heads
    assert linears(engine("olmo-2-1124-7b-instruct"))["qkv_proj"][:2] == ((32 + 2 * 32) * 128, 4096)
    cohere = engine("c4ai-command-r-v01", tp=4)
    assert linears(cohere)["qkv_proj"][:2] == ((16 + 2 * 16) * 128, 8192)
    assert linears(cohere)["down_proj"][:2] == (8192, 22528 // 4)
    hf = load("olmo-2-1124-7b-instruct")
    hf["head_dim"] = 64  # not read by vLLM's OLMo-2 (it computes 4096 / 32 = 128)
    assert linears(engine_from_hf(hf, EngineRequest(num_blocks=64)))["qkv_proj"][0] == 96 * 128


@pytest.mark.parametrize("release, left", [("0.25.0", 4095), ("0.33.0", 4096)])
def test_cohere2_every_fourth_layer_is_full(release, left):
    # transformers' Cohere2Config: layer i slides where (i + 1) % sliding_window_pattern (4); vLLM 0.25.0's
    # commandr.py gives those layers sliding_window (4096 tokens: (4095, 0)), 0.33.0's sliding_window + 1
    e = engine("c4ai-command-r7b-12-2024", vllm_release=release)
    scale = round(128 ** -0.5, 6)
    # vLLM's KV-cache groups hold as many layers as the smaller kind: 8 full, then 24 sliding in three
    # groups of 8 (kv_cache_utils.py, _get_kv_cache_groups_uniform_page_size), each its own block table
    assert attention(e) == [(32, 8, 128, scale, 0.0, FULL, 8, "FLASH_ATTN")] + \
        [(32, 8, 128, scale, 0.0, [left, 0], 8, "FLASH_ATTN")] * 3
    assert [g["kind"] for g in e["kv_cache"]["groups"]] == ["full_attention"] + ["sliding_window"] * 3


def test_cohere2_window_is_the_newest_releases_by_default_and_other_models_keep_theirs():
    assert engine("c4ai-command-r7b-12-2024") == engine("c4ai-command-r7b-12-2024", vllm_release="0.33.0")
    for fixture in ("mistral-7b-v0.1", "gemma-2-9b-it"):  # no release adds a token to their windows
        assert engine(fixture, vllm_release="0.25.0")["model"] == engine(fixture, vllm_release="0.33.0")["model"]


# --------------------------------------------------------------------------------------------
# Gemma (gemma.py, gemma2.py, gemma3.py, gemma3_mm.py)

def test_gemma_head_dim_256():
    # gemma.py: head_dim 256 from the config (16 * 256 = 4096 > hidden 3072); the head is tied
    e = engine("gemma-7b-it")
    assert linears(e) == {"qkv_proj": ((16 + 2 * 16) * 256, 3072, 28, NONE), "o_proj": (3072, 16 * 256, 28, NONE),
                          "gate_up_proj": (2 * 24576, 3072, 28, NONE), "down_proj": (3072, 24576, 28, NONE),
                          "lm_head": (256000, 3072, 1, NONE)}
    assert attention(e) == [(16, 16, 256, 0.0625, 0.0, FULL, 28, "FLASH_ATTN")]


def test_gemma2_alternates_sliding_windows_and_soft_caps():
    # gemma2.py: scale query_pre_attn_scalar ** -0.5, logits_soft_cap attn_logit_softcapping, layer_types
    # from transformers' Gemma2Config: even layers slide (the config.json has no layer_types)
    e = engine("gemma-2-9b-it")
    assert attention(e) == [(16, 8, 256, 0.0625, 50.0, FULL, 21, "FLASH_ATTN"),
                            (16, 8, 256, 0.0625, 50.0, [4095, 0], 21, "FLASH_ATTN")]
    assert linears(e)["qkv_proj"][:2] == ((16 + 2 * 8) * 256, 3584)


def test_gemma2_27b_scale_is_query_pre_attn_scalar_not_head_dim():
    # query_pre_attn_scalar 144 = hidden 4608 / 32 heads, while head_dim is 128: 144 ** -0.5 = 1/12
    e = engine("gemma-2-27b-it", tp=2)
    assert attention(e) == [(16, 8, 128, round(1 / 12, 6), 50.0, FULL, 23, "FLASH_ATTN"),
                            (16, 8, 128, round(1 / 12, 6), 50.0, [4095, 0], 23, "FLASH_ATTN")]
    assert linears(e)["o_proj"][:2] == (4608, 16 * 128)


def test_gemma3_text_every_sixth_layer_is_full():
    e = engine("gemma-3-1b-it")
    # 26 layers: (i + 1) % 6 == 0 for i = 5, 11, 17, 23 are full
    # 22 sliding layers in groups of the 4 full ones: layers[i::6], 4, 4, 4, 4, 3, 3
    assert attention(e) == [(4, 1, 256, 0.0625, 0.0, FULL, 4, "FLASH_ATTN")] + \
        [(4, 1, 256, 0.0625, 0.0, [511, 0], n, "FLASH_ATTN") for n in (4, 4, 4, 4, 3, 3)]
    assert linears(e)["qkv_proj"][:2] == ((4 + 2 * 1) * 256, 1152)


def test_gemma3_multimodal_plans_its_language_model_from_text_config():
    # gemma3_mm.py builds Gemma3ForCausalLM from text_config: the keys the Hub's text_config leaves out are
    # Gemma3TextConfig's defaults (head_dim 256, query_pre_attn_scalar 256, vocab 262208, 131072 positions).
    # Its image tokens attend bidirectionally (vLLM's MM_PREFIX_LM_MODELS has "gemma3"): FlashAttention 2/3
    # cannot, and vLLM 0.25 runs Triton's attention.
    e = engine("gemma-3-12b-it")
    assert e["model"]["architecture"] == "Gemma3ForConditionalGeneration"
    assert (e["model"]["vocab_size"], e["model"]["max_model_len"], e["model"]["dtype"]) == (262208, 131072, "bfloat16")
    assert linears(e) == {"qkv_proj": ((16 + 2 * 8) * 256, 3840, 48, NONE), "o_proj": (3840, 16 * 256, 48, NONE),
                          "gate_up_proj": (2 * 15360, 3840, 48, NONE), "down_proj": (3840, 15360, 48, NONE),
                          "lm_head": (262208, 3840, 1, NONE)}
    assert attention(e) == [(16, 8, 256, 0.0625, 0.0, FULL, 8, "TRITON_ATTN")] + \
        [(16, 8, 256, 0.0625, 0.0, [1023, 0], 8, "TRITON_ATTN")] * 5
    big = engine("gemma-3-27b-it", tp=2)  # query_pre_attn_scalar 168, head_dim 128
    assert {a[3] for a in attention(big)} == {round(168 ** -0.5, 6)}


def test_multimodal_without_text_config_is_refused():
    hf = load("gemma-3-12b-it")
    del hf["text_config"]
    with pytest.raises(HFConfigError, match="text_config is missing"):
        engine_from_hf(hf)


# --------------------------------------------------------------------------------------------
# Layouts whose names differ (phi3.py, internlm2.py, exaone.py, the Transformers backend)

def test_phi4_on_the_phi3_layout():
    e = engine("phi-4", tp=2)
    assert linears(e) == {"qkv_proj": ((20 + 2 * 5) * 128, 5120, 40, NONE), "o_proj": (5120, 20 * 128, 40, NONE),
                          "gate_up_proj": (17920, 5120, 40, NONE), "down_proj": (5120, 17920 // 2, 40, NONE),
                          "lm_head": (100352 // 2, 5120, 1, NONE)}
    mini = engine("phi-3-mini-4k-instruct")  # head size 96, sliding window 2047 on every layer
    assert attention(mini) == [(32, 32, 96, round(96 ** -0.5, 6), 0.0, [2046, 0], 32, "FLASH_ATTN")]


def test_phi3_checkpoint_names_its_fused_linears():
    # phi3.py: packed_modules_mapping {"qkv_proj": ["qkv_proj"], "gate_up_proj": ["gate_up_proj"]}: the
    # checkpoint holds qkv_proj and gate_up_proj, and an fp8 ignore list names them so
    hf = load("phi-4")
    hf["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
                                 "ignored_layers": ["model.layers.0.self_attn.qkv_proj",
                                                    "model.layers.0.mlp.gate_up_proj"]}
    lin = linears(engine_from_hf(hf, EngineRequest(num_blocks=64)))
    assert lin["qkv_proj"][2:] == (39, "fp8") and lin["qkv_proj.unquantized"][2:] == (1, NONE)
    assert lin["gate_up_proj"][2:] == (39, "fp8") and lin["gate_up_proj.unquantized"][2:] == (1, NONE)
    # a GPTQ list of quantized modules names them so too (no fused-name rule there: is_layer_gptq_quantized)
    hf["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True,
                                 "modules_in_block_to_quantize": [["self_attn.qkv_proj"], ["mlp.gate_up_proj"]]}
    lin = linears(engine_from_hf(hf, EngineRequest(num_blocks=64)))
    assert (lin["qkv_proj"][3], lin["gate_up_proj"][3], lin["o_proj"][3]) == ("gptq", "gptq", NONE)
    # Llama's checkpoint splits them: naming q_proj, k_proj and v_proj leaves its qkv_proj unquantized
    llama = load("llama-3.1-8b-instruct-fp8-block")
    llama["quantization_config"]["ignored_layers"] = [f"model.layers.0.self_attn.{p}_proj" for p in "qkv"]
    assert linears(engine_from_hf(llama, EngineRequest(num_blocks=64)))["qkv_proj.unquantized"][2] == 1


def test_internlm2_wqkv_and_feed_forward():
    e = engine("internlm2_5-7b-chat", tp=2)
    assert linears(e) == {"wqkv": ((16 + 2 * 4) * 128, 4096, 32, NONE), "wo": (4096, 16 * 128, 32, NONE),
                          "gate_up_proj": (14336, 4096, 32, NONE), "w2": (4096, 7168, 32, NONE),
                          "lm_head": (92544 // 2, 4096, 1, NONE)}


def test_exaone_num_layers_and_its_names():
    # exaone.py: transformer.h.N.attn.attention.{qkv_proj,out_proj}, mlp.{gate_up_proj,c_proj}; ExaoneConfig
    # reads num_hidden_layers from num_layers
    e = engine("exaone-3.5-7.8b-instruct")
    assert e["model"]["num_layers"] == 32
    assert linears(e) == {"attention.qkv_proj": (6144, 4096, 32, NONE), "attention.out_proj": (4096, 4096, 32, NONE),
                          "gate_up_proj": (28672, 4096, 32, NONE), "c_proj": (4096, 14336, 32, NONE),
                          "lm_head": (102400, 4096, 1, NONE)}


def test_exaone_quant_names_are_vllms_model_h():
    # vLLM builds EXAONE's layers under the prefix model.h (exaone.py): an fp8 ignore list naming the
    # checkpoint's transformer.h.N modules leaves them quantized, one naming model.h.N does not
    hf = load("exaone-3.5-7.8b-instruct")
    hf["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
                                 "ignored_layers": ["transformer.h.0.mlp.c_proj", "transformer.h.1.mlp.c_proj",
                                                    "model.h.5.mlp.c_proj"]}
    lin = linears(engine_from_hf(hf, EngineRequest(num_blocks=64)))
    assert lin["c_proj"][2:] == (31, "fp8") and lin["c_proj.unquantized"][2:] == (1, NONE)


def test_starcoder2_mlp_is_not_gated():
    # the Transformers backend: q/k/v fused into qkv_proj, c_fc (intermediate_size wide) and c_proj
    e = engine("starcoder2-15b", tp=2)
    assert linears(e) == {"qkv_proj": ((24 + 2 * 2) * 128, 6144, 40, NONE), "o_proj": (6144, 24 * 128, 40, NONE),
                          "c_fc": (24576 // 2, 6144, 40, NONE), "c_proj": (6144, 24576 // 2, 40, NONE),
                          "lm_head": (49152 // 2, 6144, 1, NONE)}
    assert attention(e) == [(24, 2, 128, round(128 ** -0.5, 6), 0.0, [4095, 0], 40, "FLASH_ATTN")]


# --------------------------------------------------------------------------------------------
# MoE (qwen2_moe.py, deepseek_v2.py, gpt_oss.py; Mixtral and Qwen3-MoE: tests/planner/test_hf.py)

def test_qwen2_moe_shared_expert_and_its_gate():
    e = engine("qwen1.5-moe-a2.7b-chat", tp=2)
    assert linears(e) == {"qkv_proj": ((8 + 2 * 8) * 128, 2048, 24, NONE), "o_proj": (2048, 1024, 24, NONE),
                          "gate": (60, 2048, 24, NONE), "shared_expert.gate_up_proj": (5632, 2048, 24, NONE),
                          "shared_expert.down_proj": (2048, 2816, 24, NONE), "shared_expert_gate": (1, 2048, 24, NONE),
                          "lm_head": (151936 // 2, 2048, 1, NONE)}
    assert e["model"]["moe"] == [{"name": "experts", "num_experts": 60, "top_k": 4, "hidden_size": 2048,
                                  "intermediate_size": 1408 // 2, "count": 24, "quant": {"method": NONE}}]


def test_granite_moe_experts_in_block_sparse_moe():
    # granitemoe.py: GraniteMoeMoE in every layer, 40 experts 512 wide split over tp, the gate unquantized;
    # head_dim = 1536 // 24 = 64, the scale config.attention_multiplier (1/64)
    e = engine("granite-3.0-3b-a800m-instruct", tp=2)
    assert linears(e) == {"qkv_proj": ((12 + 2 * 4) * 64, 1536, 32, NONE), "o_proj": (1536, 12 * 64, 32, NONE),
                          "gate": (40, 1536, 32, NONE), "lm_head": (49216 // 2, 1536, 1, NONE)}
    assert [(m["num_experts"], m["top_k"], m["hidden_size"], m["intermediate_size"], m["count"])
            for m in e["model"]["moe"]] == [(40, 8, 1536, 256, 32)]
    assert attention(e) == [(12, 4, 64, 0.015625, 0.0, FULL, 32, "FLASH_ATTN")]


def test_granite_moe_scale_defaults_to_granitemoeconfigs():
    hf = {k: v for k, v in load("granite-3.0-3b-a800m-instruct").items() if k != "attention_multiplier"}
    assert engine_from_hf(hf, EngineRequest(num_blocks=4096))["model"]["attention"][0]["scale"] == 1.0


def test_phimoe_experts_and_its_window_on_every_layer():
    # phimoe.py: PhiMoE in every layer, 16 experts 6400 wide (top 2), head_dim 4096 // 32; no per-layer
    # window, so every layer takes CacheConfig.sliding_window (131072 tokens)
    e = engine("phi-3.5-moe-instruct", tp=2, max_model_len=4096)
    assert linears(e) == {"qkv_proj": ((16 + 2 * 4) * 128, 4096, 32, NONE), "o_proj": (4096, 16 * 128, 32, NONE),
                          "gate": (16, 4096, 32, NONE), "lm_head": (32064 // 2, 4096, 1, NONE)}
    assert [(m["num_experts"], m["top_k"], m["intermediate_size"]) for m in e["model"]["moe"]] == [(16, 2, 3200)]
    assert attention(e) == [(16, 4, 128, round(128 ** -0.5, 6), 0.0, [131071, 0], 32, "FLASH_ATTN")]


def test_deepseek_v2_lite_mla_without_q_compression():
    e = engine("deepseek-v2-lite-chat")
    assert linears(e) == {
        "q_proj": (16 * (128 + 64), 2048, 27, NONE), "kv_a_proj_with_mqa": (512 + 64, 2048, 27, NONE),
        "kv_b_proj": (16 * (128 + 128), 512, 27, NONE), "o_proj": (2048, 16 * 128, 27, NONE),
        "gate_up_proj": (2 * 10944, 2048, 1, NONE), "down_proj": (2048, 10944, 1, NONE),  # first_k_dense_replace 1
        "gate": (64, 2048, 26, NONE), "shared_experts.gate_up_proj": (2 * 2 * 1408, 2048, 26, NONE),
        "shared_experts.down_proj": (2048, 2 * 1408, 26, NONE), "lm_head": (102400, 2048, 1, NONE)}
    mscale = 0.1 * 0.707 * __import__("math").log(40) + 1  # yarn_get_mscale(40, mscale_all_dim 0.707)
    assert attention(e) == [(16, 1, 576, round(192 ** -0.5 * mscale ** 2, 6), 0.0, FULL, 27, "FLASH_ATTN_MLA")]


def test_gpt_oss_mxfp4_experts_sinks_and_alternating_windows():
    e = engine("gpt-oss-20b")
    # Mxfp4Config leaves every linear in bf16; the router is a replicated linear beside the experts
    assert linears(e) == {"qkv_proj": ((64 + 2 * 8) * 64, 2880, 24, NONE), "o_proj": (2880, 64 * 64, 24, NONE),
                          "router": (32, 2880, 24, NONE), "lm_head": (201088, 2880, 1, NONE)}
    assert e["model"]["moe"] == [{"name": "experts", "num_experts": 32, "top_k": 4, "hidden_size": 2880,
                                  "intermediate_size": 2880, "count": 24, "quant": {"method": "mxfp4"}}]
    assert attention(e) == [(64, 8, 64, 0.125, 0.0, FULL, 12, "FLASH_ATTN"),
                            (64, 8, 64, 0.125, 0.0, [127, 0], 12, "FLASH_ATTN")]
    # at tp 2 vLLM pads the experts' 1440 per rank to Triton matmul_ogs's 64 (fused_moe/oracle/mxfp4.py)
    assert engine("gpt-oss-20b", tp=2)["model"]["moe"][0]["intermediate_size"] == 1472
    # sinks need FlashAttention 3: below SM 9.0 vLLM takes Triton's attention (FlashInfer has none off SM 10)
    assert {a[-1] for a in attention(engine("gpt-oss-20b", gpu="A100"))} == {"TRITON_ATTN"}


# --------------------------------------------------------------------------------------------
# Every architecture plans under both release plans; the multimodal encoder is named

# fixture -> engine_from_hf arguments (a tp the weights fit at: the estimate is not under test here)
PLANNED = {f: {} for f in (
    "llama-3.1-8b-instruct-fp8-block", "mistral-7b-v0.1", "llama-3.1-8b-instruct-fp8-static", "qwen2-7b-instruct",
    "qwen2.5-7b-instruct-awq", "qwen2.5-7b-instruct-gptq-int4", "qwen3-8b", "qwen3-8b-fp8-block-ct",
    "qwen1.5-moe-a2.7b-chat", "qwen3-30b-a3b-fp8", "deepseek-v2-lite-chat", "gemma-7b-it", "gemma-2-9b-it",
    "gemma-3-1b-it", "gemma-3-12b-it", "phi-4", "phi-3-mini-4k-instruct", "granite-3.1-8b-instruct",
    "c4ai-command-r7b-12-2024", "olmo-2-1124-7b-instruct", "internlm2_5-7b-chat", "glm-4-9b-0414", "gpt-oss-20b",
    "exaone-3.5-7.8b-instruct", "granite-3.0-3b-a800m-instruct")}
PLANNED.update({"mixtral-8x7b": {"tp": 2}, "deepseek-v3": {"tp": 8, "gpu": "H200"}, "gemma-2-27b-it": {"tp": 2},
                "gemma-3-27b-it": {"tp": 2}, "c4ai-command-r-v01": {"tp": 4}, "starcoder2-15b": {"tp": 2},
                "mistral-nemo-instruct-2407-fp8-dynamic": {"max_model_len": 32768}, "phi-3.5-moe-instruct": {"tp": 2}})
# the release each plan mirrors: the engine follows its model code
RELEASE_OF = {row.plan: version for version, row in VLLM_RELEASES.items()}


def test_every_layout_is_planned_here():
    assert {load(f)["architectures"][0] for f in PLANNED} == set(LAYOUTS)
    assert len(LAYOUTS) >= 20


@pytest.mark.parametrize("fixture", sorted(PLANNED))
@pytest.mark.parametrize("plan", ["vllm-0.25", "vllm-0.33"])
def test_each_architecture_plans(fixture, plan):
    request = EngineRequest(source=f"{fixture}.json", vllm_release=RELEASE_OF[plan], **PLANNED[fixture])
    data = engine_from_hf(load(fixture), request)
    expanded = expand(load_plan(plan), engine_from_document(Document(data=data, file=f"{fixture}.yaml")))
    assert expanded.steps
    families = [gap["family"] for gap in expanded.not_modelled]
    multimodal = data["model"]["architecture"].endswith("ForConditionalGeneration")
    assert (MULTIMODAL_ENCODER in families) == multimodal
    unmodelled_moe = "fused MoE of a quantization the fused_moe stage does not model"
    assert (unmodelled_moe in families) == (fixture == "gpt-oss-20b"), families


def test_mxfp4_gap_names_the_layers_and_awq_moe_is_ahead_of_time():
    data = engine_from_hf(load("gpt-oss-20b"), EngineRequest(num_blocks=4096))
    gaps = expand(load_plan("vllm-0.25"), engine_from_document(Document(data=data, file="e.yaml"))).not_modelled
    gap = next(g for g in gaps if g["family"].startswith("fused MoE of a quantization"))
    assert "experts (E=32, N=2880, mxfp4)" in gap["why"]
    hf = load("qwen1.5-moe-a2.7b-chat")  # AWQ experts run Marlin's MoE GEMM, compiled ahead: no gap
    hf["quantization_config"] = {"bits": 4, "group_size": 128, "quant_method": "awq", "zero_point": True}
    data = engine_from_hf(hf, EngineRequest(num_blocks=4096))
    assert data["model"]["moe"][0]["quant"] == {"method": "awq"}
    gaps = expand(load_plan("vllm-0.25"), engine_from_document(Document(data=data, file="e.yaml"))).not_modelled
    assert not [g for g in gaps if g["family"].startswith("fused MoE of a quantization")]


# --------------------------------------------------------------------------------------------
# Refused, with what to do instead

REFUSED = {
    "mamba-2.8b": "a state-space (Mamba) model",
    "mamba-codestral-7b-v0.1": "a state-space (Mamba) model",  # Mamba2, time_step_limit [0.0, Infinity]
    "bert-base-uncased": "not a text-generation model",
    "t5-base": "an encoder-decoder model",
}


@pytest.mark.parametrize("fixture", sorted(REFUSED))
def test_unplanned_architectures_are_refused_with_a_way_out(fixture):
    with pytest.raises(HFConfigError) as info:
        engine_from_hf(load(fixture), EngineRequest(source=f"{fixture}/config.json"))
    message = str(info.value)
    architecture = load(fixture)["architectures"][0]
    assert message.startswith(f"{fixture}/config.json: architectures: {architecture} is not planned by --from-hf: "
                              f"{REFUSED[fixture]}")
    assert "write the engine YAML by hand (model.linear, model.moe and model.attention" in message
    assert "warmup engine --from-vllm" in message
    assert info.value.key == "architectures" and "\n" not in message


def test_a_multimodal_model_without_a_layout_is_refused():
    hf = load("gemma-3-12b-it")
    hf["architectures"] = ["LlavaForConditionalGeneration"]
    with pytest.raises(HFConfigError, match="a multimodal model whose language model --from-hf has no layout"):
        engine_from_hf(hf)


def test_an_moe_count_on_a_dense_layout_is_refused():
    hf = load("qwen3-8b")
    hf["num_experts"] = 8
    with pytest.raises(HFConfigError, match=r"num_experts = 8, but vLLM's qwen3.py builds no MoE block"):
        engine_from_hf(hf)


# --------------------------------------------------------------------------------------------
# A new architecture is one row of layouts.py (issue 56)

FICTITIOUS = "FictitiousForCausalLM"


def test_a_fictitious_architecture_is_one_row(monkeypatch, tmp_path):
    """A made-up architecture on Llama's layout, added to LAYOUTS for one test: refused without its row;
    with it, `warmup engine --from-hf` writes the engine a Llama config gets (only the architecture's
    name differs), the refusal's list of what --from-hf plans names it, and both release plans expand it."""
    from planner.cli import main
    from planner.engine.hf import unplanned

    hf = load("codellama-7b-hf")
    llama = engine_from_hf(hf, EngineRequest(num_blocks=4096, source="codellama-7b-hf.json"))
    hf["architectures"] = [FICTITIOUS]
    with pytest.raises(HFConfigError, match=f"{FICTITIOUS} is not planned by --from-hf"):
        engine_from_hf(hf, EngineRequest(num_blocks=4096))
    assert unplanned(hf, "config.json") is not None

    monkeypatch.setitem(LAYOUTS, FICTITIOUS, LAYOUTS["LlamaForCausalLM"])
    assert unplanned(hf, "config.json") is None  # the check before the strict reading reads the row too
    data = engine_from_hf(hf, EngineRequest(num_blocks=4096, source="codellama-7b-hf.json"))
    assert data["model"]["architecture"] == FICTITIOUS
    renamed = json.loads(json.dumps(data).replace(FICTITIOUS, "LlamaForCausalLM"))
    assert renamed == llama

    config = tmp_path / "config.json"
    config.write_text(json.dumps(hf))
    out = tmp_path / "engine.yaml"
    assert main(["engine", "--from-hf", str(config), "--num-blocks", "4096", "-o", str(out)]) == 0
    assert f"architecture: {FICTITIOUS}" in out.read_text()
    with pytest.raises(HFConfigError, match=f"--from-hf plans .*{FICTITIOUS}"):  # the refusal's list
        engine_from_hf({**hf, "architectures": ["NoLayoutForCausalLM"]})

    for plan in ("vllm-0.25", "vllm-0.33"):
        request = EngineRequest(num_blocks=4096, source="config.json", vllm_release=RELEASE_OF[plan])
        ours = expand(load_plan(plan), engine_from_document(Document(data=engine_from_hf(hf, request), file="e.yaml")))
        llama_hf = {**hf, "architectures": ["LlamaForCausalLM"]}
        theirs = expand(load_plan(plan), engine_from_document(
            Document(data=engine_from_hf(llama_hf, request), file="e.yaml")))
        assert ours.steps and [s.id for s in ours.steps] == [s.id for s in theirs.steps], plan
