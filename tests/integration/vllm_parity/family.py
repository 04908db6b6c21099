"""The generated family of engines the parity tests compare on (issue 16): speculative methods
with 1-4 draft tokens, every CUDA-graph mode, max_num_seqs off the power-of-two grid, small
max_num_batched_tokens, a pooling model, TP and EP MoE, MLA, a linear whose N is a multiple of 64
but not of 128, and a Blackwell device; and for the start-up choices (issue 24): the MoE
architectures of the shipped engines (V1 under vLLM 0.25) and one 0.25 keeps on V2, V1 with
speculative decoding (capture sizes rounded to 1 + k), a model runner pinned either way, a world of
more than one rank (0.25's FlashInfer autotune in memory), a linear no DeepGEMM kernel takes
(N % 64), and fp16 weights."""

from __future__ import annotations

from tests.factories import BASE_ENGINE, merge

FP8 = {"method": "fp8", "weight_block_size": [128, 128]}
H100 = {"scheduler": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}}
MOE = {"model": {"moe": [{"name": "experts", "num_experts": 128, "top_k": 8, "hidden_size": 2048,
                          "intermediate_size": 768, "count": 48, "quant": FP8}]}}
MLA = {"model": {"linear": [{"name": "fused_qkv_a_proj", "n": 2112, "k": 7168, "count": 61, "quant": FP8},
                            {"name": "q_b_proj", "n": 3072, "k": 1536, "count": 61, "quant": FP8},
                            {"name": "o_proj", "n": 7168, "k": 2048, "count": 61, "quant": FP8}],
                 "attention": [{"name": "mla", "num_heads": 16, "num_kv_heads": 1, "head_size": 576,
                                "head_size_v": 512, "count": 61, "backend": "FLASHMLA"}]},
       "device": {"name": "H200", "num_sms": 132}}


def family() -> dict:
    """name -> engine config (a plain dict, as an engine file holds it)."""
    out = {"base": merge(BASE_ENGINE, H100)}
    for method in ("eagle", "eagle3", "mtp", "ngram", "suffix"):
        for k in (1, 2, 3, 4):
            out[f"{method}-k{k}"] = merge(BASE_ENGINE, {**H100, "speculative": {
                "method": method, "num_speculative_tokens": k}})
    for mode in ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        for k in (0, 2):
            spec = {"method": "eagle" if k else "none", "num_speculative_tokens": k}
            out[f"graphs-{mode.lower()}-k{k}"] = merge(BASE_ENGINE, {
                **H100, "speculative": spec, "compilation": {"cudagraph_mode": mode}})
    out["eager"] = merge(BASE_ENGINE, {**H100, "compilation": {"enforce_eager": True}})
    for seqs in (37, 100, 300):
        out[f"seqs-{seqs}"] = merge(BASE_ENGINE, {"scheduler": {"max_num_seqs": seqs, "max_num_batched_tokens": 8192}})
        out[f"seqs-{seqs}-eagle3-k3"] = merge(out[f"seqs-{seqs}"], {"speculative": {
            "method": "eagle3", "num_speculative_tokens": 3}})
    for tokens in (16, 64, 256, 1000):
        out[f"tokens-{tokens}"] = merge(BASE_ENGINE, {"scheduler": {"max_num_seqs": min(tokens, 256),
                                                                     "max_num_batched_tokens": tokens}})
    out["pooling"] = merge(BASE_ENGINE, {**H100, "model": {"runner": "pooling"}})
    out["moe-tp2"] = merge(BASE_ENGINE, {**H100, **MOE, "parallel": {"tensor_parallel_size": 2}})
    out["moe-ep4"] = merge(BASE_ENGINE, {**H100, **MOE, "parallel": {
        "tensor_parallel_size": 4, "enable_expert_parallel": True}})
    out["mla-n2112"] = merge(BASE_ENGINE, {**H100, **MLA})
    out["mla-mtp-k1"] = merge(out["mla-n2112"], {"speculative": {"method": "mtp", "num_speculative_tokens": 1}})
    out["b200"] = merge(BASE_ENGINE, {**H100, "device": {"name": "B200", "num_sms": 148, "capability": "10.0"}})
    out["few-blocks"] = merge(BASE_ENGINE, {**H100, "kv_cache": {"num_blocks": 64, "groups": [{"block_size": 16}]},
                                            "speculative": {"method": "eagle", "num_speculative_tokens": 2}})
    out.update(start_up_choices(out))
    for name, data in out.items():
        data["name"] = name
    return out


def start_up_choices(out: dict) -> dict:
    """Engines whose model runner, linear kernels or autotune cache vLLM decides differently."""
    more = {}
    for arch in ("Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM", "MixtralForCausalLM", "DeepseekV2ForCausalLM"):
        more[f"moe-{arch}"] = merge(out["moe-tp2"], {"model": {"architecture": arch}})
        more[f"moe-{arch}-eagle-k2"] = merge(more[f"moe-{arch}"], {"speculative": {
            "method": "eagle", "num_speculative_tokens": 2}})
    more["moe-DeepseekV3ForCausalLM-mtp-k3-full"] = merge(more["moe-DeepseekV3ForCausalLM"], {
        "speculative": {"method": "mtp", "num_speculative_tokens": 3}, "compilation": {"cudagraph_mode": "FULL"}})
    more["moe-Qwen3MoeForCausalLM-decode-only-k1"] = merge(more["moe-Qwen3MoeForCausalLM"], {
        "speculative": {"method": "eagle3", "num_speculative_tokens": 1},
        "compilation": {"cudagraph_mode": "FULL_DECODE_ONLY"}, "scheduler": {"max_num_seqs": 100}})
    for k in (2, 3):
        more[f"draft_model-k{k}"] = merge(out["base"], {"speculative": {"method": "draft_model",
                                                                         "num_speculative_tokens": k}})
    more["pinned-v1-eagle-k3"] = merge(out["eagle-k3"], {"model": {"model_runner": "v1"}})
    more["pinned-v2-moe"] = merge(more["moe-Qwen3MoeForCausalLM"], {"model": {"model_runner": "v2"}})
    more["tp4-dense"] = merge(out["base"], {"parallel": {"tensor_parallel_size": 4}})
    more["dp2-dense"] = merge(out["base"], {"parallel": {"data_parallel_size": 2}})
    more["n-off-64"] = merge(out["base"], {"model": {"linear": [
        {"name": "odd_proj", "n": 4160 + 32, "k": 4096, "count": 4, "quant": FP8},
        {"name": "o_proj", "n": 4096, "k": 4096, "count": 32, "quant": FP8}]}})
    more["fp16"] = merge(out["base"], {"model": {"dtype": "float16"}})
    return more
