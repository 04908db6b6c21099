"""`warmup engine --from-hf` follows vLLM (issue 53 item 5): the dtype `--dtype auto` serves, GPTQ's
router, AWQ and GPTQ groups split by tensor parallelism (linears refused, experts on MoeWNA16),
sequence-parallel MoE's shared experts, and what differs between the releases' model code
(--vllm-release: block-FP8 experts a shard splits, refined on 0.33.0; Cohere2's window is in
test_hf_architectures.py). Each rule is also checked against vLLM 0.25's and 0.33's own model classes
on the meta device (tests/integration/from_vllm/test_model_layers.py); these run without vLLM."""

from __future__ import annotations

import json
import os

import pytest

from planner import cli
from planner.engine.hf import EngineRequest, HFConfigError, engine_from_hf
from planner.engine.hf.model import auto_dtype

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "hf")
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}


def load(name: str, **over) -> dict:
    with open(os.path.join(FIXTURES, name + ".json"), encoding="utf-8") as f:
        return {**json.load(f), **over}


def engine(hf: dict, **kwargs) -> dict:
    return engine_from_hf(hf, EngineRequest(num_blocks=1024, max_model_len=4096, **kwargs))


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


# --------------------------------------------------------------------------------------------
# What differs between the releases' model code: --vllm-release (default the newest)

CODER = "qwen3-coder-30b-a3b-instruct-fp8"


def experts(e: dict) -> list:
    return [(m["num_experts"], m["intermediate_size"], m["quant"]) for m in e["model"]["moe"]]


def test_qwen3_coder_fp8_at_tp4_runs_64x64_blocks_on_033():
    # fused_moe/oracle/fp8.py refine_fp8_moe_block_shape: 768 / 4 = 192 per rank, gcd(128, 128, 192, 2048) = 64
    e = engine(load(CODER), tp=4, vllm_release="0.33.0")
    assert experts(e) == [(128, 192, {"method": "fp8", "weight_block_size": [64, 64]})]
    assert by_name(e)["qkv_proj"]["quant"] == {"method": "fp8", "weight_block_size": [128, 128]}  # linears keep theirs
    assert e == engine(load(CODER), tp=4)  # the newest release by default
    assert "--vllm-release" not in e["description"]


def test_qwen3_coder_fp8_at_tp4_is_refused_on_025_with_the_release_that_takes_it():
    with pytest.raises(HFConfigError, match=r"moe_intermediate_size = 192 per rank is not divisible by block_n 128; "
                                            r"vLLM refuses this shard \(try --enable-expert-parallel, or "
                                            r"--vllm-release 0\.33\.0, whose Fp8MoEMethod refines the blocks\)") as e:
        engine(load(CODER), tp=4, vllm_release="0.25.0")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("release", ["0.25.0", "0.33.0"])
def test_whole_blocks_are_the_checkpoints_in_both_releases(release):
    for kwargs in (dict(tp=2), dict(tp=4, enable_expert_parallel=True)):  # 384 wide; 768 whole under EP
        assert experts(engine(load(CODER), vllm_release=release, **kwargs))[0][2]["weight_block_size"] == [128, 128]


@pytest.mark.parametrize("block, width, hidden, moe_tp, refined", [
    ([128, 128], 192, 2048, 4, [64, 64]),    # Qwen3-30B-A3B / Qwen3-Coder at tp 4
    ([128, 128], 384, 2048, 2, None),        # whole blocks: nothing to refine
    ([128, 128], 96, 2048, 8, [32, 32]),     # tp 8: gcd 32, the finest vLLM takes
    ([128, 128], 48, 2048, 16, None),        # gcd 16 < 32: vLLM refuses
    ([128, 128], 192, 2048, 1, [64, 64]),    # one rank: K need not be whole blocks, but N is not either
    ([128, 64], 128, 2048, 2, None),         # N whole blocks of 128, K of 64: nothing to refine
])
def test_refine_fp8_moe_block_shape_is_vllms(block, width, hidden, moe_tp, refined):
    from planner.engine.hf.quantization import refine_fp8_moe_block_shape

    assert refine_fp8_moe_block_shape(block, width, hidden, moe_tp) == refined


def test_what_033_cannot_refine_it_refuses_and_compressed_tensors_never_refines():
    with pytest.raises(HFConfigError, match="moe_intermediate_size = 48 per rank"):  # 768 / 16: gcd 16 < 32
        engine(load(CODER), tp=16, vllm_release="0.33.0")
    ct = load("qwen3-8b-fp8-block-ct")["quantization_config"]
    with pytest.raises(HFConfigError, match=r"moe_intermediate_size = 192 .*enable-expert-parallel\)$"):
        engine(load(CODER, quantization_config=ct), tp=4, vllm_release="0.33.0")


def test_the_033_engine_plans_and_names_the_refined_experts():
    from planner.engine.config import engine_from_document
    from planner.plan.authored import load_plan
    from planner.plan.expand import expand
    from planner.yamlio import Document

    data = engine_from_hf(load(CODER), EngineRequest(tp=4, vllm_release="0.33.0", source=CODER + ".json"))
    expanded = expand(load_plan("vllm-0.33"), engine_from_document(Document(data=data, file="coder.yaml")))
    assert expanded.steps
    gap = next(g for g in expanded.not_modelled if g["family"].startswith("fused MoE of a quantization"))
    assert "experts (E=128, N=192, fp8)" in gap["why"]


def test_vllm_release_flag_reaches_the_engine_and_its_description(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(load("c4ai-command-r7b-12-2024")))
    assert cli.main(["engine", "--from-hf", str(path), "--vllm-release", "0.25.0", "--num-blocks", "1024",
                     "--max-model-len", "4096"]) == 0
    out = capsys.readouterr().out
    assert "--vllm-release 0.25.0` from Cohere2ForCausalLM" in out and "[4095, 0]" in out and "[4096, 0]" not in out
    assert cli.main(["engine", "--from-hf", str(path), "--num-blocks", "1024", "--max-model-len", "4096"]) == 0
    out = capsys.readouterr().out
    assert "--vllm-release" not in out and "[4096, 0]" in out


@pytest.mark.parametrize("argv, message", [
    (["--vllm-release", "0.30.0"], "argument --vllm-release: invalid choice: '0.30.0'"),
    (["--tp", "4", "--vllm-release", "0.25.0"], "moe_intermediate_size = 192 per rank"),
])
def test_bad_release_and_what_it_refuses_are_one_line_at_exit_2(tmp_path, capsys, argv, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(load(CODER)))
    try:
        code = cli.main(["engine", "--from-hf", str(path), *argv])
    except SystemExit as e:  # argparse refuses a choice itself
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err


def test_the_library_checks_the_release_and_from_vllm_refuses_the_flag(capsys):
    with pytest.raises(HFConfigError, match=r"--vllm-release '0\.33\.1' is not one of 0\.25\.0, 0\.33\.0 "
                                            r"\(planner/engine/releases\.py\)"):
        engine(load(CODER), vllm_release="0.33.1")
    assert cli.main(["engine", "--from-vllm", "--vllm-release", "0.25.0", "--", "/m"]) == 2
    err = capsys.readouterr().err
    assert "--vllm-release belong to --from-hf" in err and "installed vLLM's release" in err
