"""`warmup engine --from-hf` against the layers vLLM itself builds, for every architecture --from-hf
plans, in vLLM 0.25 and 0.33 (WARMUP_VLLM_ENVS, as tests/integration/vllm_parity).

For each release, one subprocess (layers_oracle.py) builds vLLM's own model class for each fixture
of tests/fixtures/hf on the meta device, at tensor-parallel sizes 1 and 2 (and 4 for the DeepSeek fixtures, TP4), and reports every
parallel linear (output and input size per partition, quant method), fused-MoE layer (experts,
top_k, width, quant method, the FP8 blocks it runs and its FP8 MoE backend), attention layer (heads, KV heads, head size, scale, soft cap, sliding
window, backend, sinks) and the vocabulary of the LM head. The engine --from-hf derives from the
same config.json must list exactly those: every linear entry's N, K, count and quantization, the
experts, and one attention entry per kind of layer. VARIANTS give fixtures ignore lists, so that each
quantization method's rule for the modules it leaves unquantized meets vLLM's on each layout's names.
The engine is derived for the release that builds the layers (--vllm-release): where the releases'
model code differs (Cohere2's window, FP8 experts a shard splits: RELEASE_SHARDS), each release's is
checked. The config dict vLLM loaded (what `--from-vllm` and the plugin derive from) must give the same engine.
A layout declaration (planner/engine/hf/layouts.py) or a shape rule that disagrees with vLLM's model
code fails here, by name.

Where vLLM's view cannot come from the config.json alone the probe's copy says what the server
would read, and the test says so: remote-code config classes (InternLM2, EXAONE) are stand-ins
holding the keys (REMOTE_CODE), and a GPTQ checkpoint's quantized modules, which vLLM reads from
the safetensors headers, are listed (GPTQ_MODULES). The differences that are vLLM's, not the
planner's, are KNOWN below, each with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest

from planner.engine.hf import EngineRequest, HFConfigError, engine_from_hf
from planner.engine.hf.layouts import LAYOUTS, role
from tests.integration.from_vllm.test_from_vllm import without_flashinfer
from planner.engine.releases import supported
from tests.integration.vllm_parity.test_parity import RELEASES

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf")

# fixture -> what it proves (one or more per architecture --from-hf plans; tp 1 and 2 each)
FIXTURES_BY_ARCHITECTURE = {
    "llama-3.1-8b-instruct-fp8-block": "Llama, fp8 by block",
    "llama-3.1-8b-instruct-fp8-static": "compressed-tensors FP8 per tensor, static activations",
    "mistral-7b-v0.1": "Mistral, sliding window on every layer",
    "mistral-nemo-instruct-2407-fp8-dynamic": "head_dim != hidden / heads, compressed-tensors FP8 per channel",
    "qwen2-7b-instruct": "Qwen2, sliding_window without use_sliding_window",
    "qwen2.5-7b-instruct-awq": "AWQ (Machete / Marlin)",
    "qwen2.5-7b-instruct-gptq-int4": "GPTQ (Machete / Marlin)",
    "qwen3-8b": "Qwen3",
    "qwen3-8b-fp8-block-ct": "compressed-tensors FP8 by block",
    "qwen1.5-moe-a2.7b-chat": "Qwen2-MoE, shared expert and its gate",
    "qwen1.5-moe-a2.7b-chat-gptq-int4": "GPTQ MoE: the router left in 16 bits; experts on Marlin at tp 1, on "
                                        "MoeWNA16 at tp 2 (704 per rank is not whole groups of 128)",
    "qwen3-30b-a3b-fp8": "Qwen3-MoE, its quantized router left out by the checkpoint",
    "mixtral-8x7b": "Mixtral, block_sparse_moe",
    "deepseek-v2-lite-chat": "DeepSeek-V2, MLA without q compression, shared experts",
    "deepseek-v3": "DeepSeek-V3, MLA, first dense layers",
    "deepseek-v3-5l": "DeepSeek-V3 cut to 3 dense + 2 MoE layers (issue 48's start-up fixture)",
    "gemma-7b-it": "Gemma, head_dim 256 != hidden / heads, tied head",
    "gemma-2-9b-it": "Gemma-2, soft cap, alternating sliding windows",
    "gemma-2-27b-it": "Gemma-2, query_pre_attn_scalar 144 != head_dim 128",
    "gemma-3-1b-it": "Gemma-3 text, sliding_window_pattern 6",
    "gemma-3-12b-it": "Gemma-3 multimodal: the language model from text_config and its class defaults",
    "gemma-3-27b-it": "Gemma-3 multimodal, query_pre_attn_scalar 168",
    "phi-4": "Phi-3 layout (fused checkpoint qkv_proj and gate_up_proj), Phi-4",
    "phi-3-mini-4k-instruct": "Phi-3, head size 96, sliding window 2047 on every layer",
    "granite-3.1-8b-instruct": "Granite, attention_multiplier as the scale",
    "c4ai-command-r-v01": "Cohere, head_dim from hidden / heads",
    "c4ai-command-r7b-12-2024": "Cohere2, sliding_window_pattern 4",
    "olmo-2-1124-7b-instruct": "OLMo-2",
    "internlm2_5-7b-chat": "InternLM2, wqkv / w2",
    "glm-4-9b-0414": "GLM-4, 2 KV heads replicated at tp > 2",
    "starcoder2-15b": "Starcoder2 on the Transformers backend, non-gated c_fc / c_proj",
    "gpt-oss-20b": "GPT-OSS, MXFP4 experts, sinks, alternating sliding windows",
    "exaone-3.5-7.8b-instruct": "EXAONE, transformer.h layers, num_layers",
    "granite-3.0-3b-a800m-instruct": "GraniteMoE, block_sparse_moe, head_dim from hidden / heads, attention_multiplier",
    "phi-3.5-moe-instruct": "PhiMoE, block_sparse_moe, CacheConfig's window on every layer (its longrope factor "
                            "lists left out: they shape no layer)",
    "qwen3-coder-30b-a3b-instruct-fp8": "Qwen3-Coder FP8 (Qwen3-MoE), block FP8 experts in whole blocks at tp 1, 2",
}
# fixture -> what it proves, built at tp 1 only (9 heads: no tp 2)
TP1_ONLY = {"smollm-135m": "a float32 checkpoint, served in bfloat16 by --dtype auto (_resolve_auto_dtype)"}
# case -> (fixture, tp, dp, what it proves): expert parallelism over tp x dp ranks, sequence-parallel MoE
SEQUENCE_PARALLEL = {
    "deepseek-v2-lite-chat-dp2-ep": ("deepseek-v2-lite-chat", 2, 2, "DeepSeek's shared experts whole on every rank"),
    "qwen1.5-moe-a2.7b-chat-dp2-ep": ("qwen1.5-moe-a2.7b-chat", 2, 2, "Qwen2-MoE's shared expert still split over tp"),
}
AWQ_G128 = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
GPTQ_G128 = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}
# case -> (fixture, quantization_config, tp, refused, what): Granite's down_proj at tp 8 has K = 1600, not
# whole groups of 128
GROUPS = {
    "granite-3.1-8b-awq-tp8": ("granite-3.1-8b-instruct", AWQ_G128, 8, True,
                               "AWQ whose per-rank K is not whole groups: AutoAWQLinearMethod refuses it"),
    "granite-3.1-8b-gptq-tp8": ("granite-3.1-8b-instruct", GPTQ_G128, 8, False,
                                "GPTQ whose per-rank K is not whole groups: Machete takes it on SM 9.0"),
}
TPS = (1, 2)
# MLA and 256 experts at the TP of issue 48's start-up (vllm serve on four GPUs): 32 heads, 64-wide experts
TP4 = ("deepseek-v2-lite-chat", "deepseek-v3", "deepseek-v3-5l")
# (fixture, tp) -> {release: the blocks its FP8 experts run, None where vLLM refuses the shard}: 768 / 4 = 192
# per rank, not whole 128-blocks; 0.33.0's refine_fp8_moe_block_shape (fused_moe/oracle/fp8.py) takes 64x64
RELEASE_SHARDS = {("qwen3-coder-30b-a3b-instruct-fp8", 4): {"0.25": None, "0.33": [64, 64]}}

FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
# variant -> (fixture, the quantization_config it is given, what it proves): which modules each
# method's ignore list leaves unquantized, on each layout's names (the fused names above all)
VARIANTS = {
    "phi-4-fp8-ignored": ("phi-4", {**FP8_BLOCK, "ignored_layers": [
        "model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj", "model.layers.39.mlp.down_proj"]},
        "Phi-3's fused checkpoint modules, named by an fp8 ignore list"),
    "phi-4-gptq": ("phi-4", {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False,
                             "modules_in_block_to_quantize": [["self_attn.qkv_proj"], ["self_attn.o_proj"],
                                                              ["mlp.gate_up_proj"], ["mlp.down_proj"]]},
        "Phi-3's fused checkpoint modules, named by a GPTQ list of quantized modules"),
    "llama-fp8-ignored": ("llama-3.1-8b-instruct-fp8-block", {**FP8_BLOCK, "ignored_layers": [
        "model.layers.1.mlp.gate_proj", "model.layers.1.mlp.up_proj", "model.layers.2.self_attn.qkv_proj",
        "mlp.down_proj", "lm_head"]},
        "fp8 by exact name: the shards of a fused linear, its own name; a suffix names nothing"),
    "internlm2-fp8-ignored": ("internlm2_5-7b-chat", {**FP8_BLOCK, "ignored_layers": [
        "model.layers.0.attention.wqkv", "model.layers.0.feed_forward.w1", "model.layers.0.feed_forward.w3"]},
        "InternLM2's wqkv loaded whole, gate_up_proj from w1 and w3"),
    "exaone-fp8-ignored": ("exaone-3.5-7.8b-instruct", {**FP8_BLOCK, "ignored_layers": [
        "transformer.h.0.attn.attention.q_proj", "transformer.h.0.attn.attention.k_proj",
        "transformer.h.0.attn.attention.v_proj", "model.h.5.mlp.c_proj"]},
        "EXAONE's layers, which vLLM's quant method sees as model.h.N (not the checkpoint's transformer.h.N)"),
    "qwen3-moe-fp8-router": ("qwen3-30b-a3b-fp8", {**FP8_BLOCK, "modules_to_not_convert": [
        "model.layers.0.mlp.gate", "model.layers.3.mlp.experts"]},
        "Qwen3-MoE's router quantized where the checkpoint does not leave it out; experts left out"),
    "qwen2.5-awq-not-converted": ("qwen2.5-7b-instruct-awq", {
        "bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm", "zero_point": True,
        "modules_to_not_convert": ["layers.3.mlp"]}, "awq by substring"),
    "llama-ct-ignore-regex": ("llama-3.1-8b-instruct-fp8-static", None, "compressed-tensors by `re:`"),
    "qwen3-moe-gptq": ("qwen3-30b-a3b-fp8", GPTQ_G128,
                       "GPTQ leaves Qwen3-MoE's router, which vLLM hands the quant_config, in 16 bits"),
}

# Remote-code config classes (the Hub repositories' configuration_*.py): stand-ins that hold the
# config.json's keys with the class's defaults, so that vLLM's own model class reads them.
REMOTE_CODE = {
    "internlm2_5-7b-chat": ("configuration_internlm2.py", '''
from transformers import PretrainedConfig


class InternLM2Config(PretrainedConfig):
    model_type = "internlm2"

    def __init__(self, vocab_size=103168, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, max_position_embeddings=2048, bias=True,
                 rope_theta=10000, rope_scaling=None, tie_word_embeddings=False, **kwargs):
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads = num_key_value_heads or num_attention_heads
        self.max_position_embeddings, self.bias = max_position_embeddings, bias
        self.rope_theta, self.rope_scaling = rope_theta, rope_scaling
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
'''),
    "exaone-3.5-7.8b-instruct": ("configuration_exaone.py", '''
from transformers import PretrainedConfig


class ExaoneConfig(PretrainedConfig):
    model_type = "exaone"
    attribute_map = {"num_hidden_layers": "num_layers"}

    def __init__(self, vocab_size=102400, max_position_embeddings=2048, hidden_size=2048, num_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, intermediate_size=None, rope_theta=10000.0,
                 rope_scaling=None, layer_norm_epsilon=1e-5, tie_word_embeddings=True, **kwargs):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.num_layers, self.num_attention_heads = num_layers, num_attention_heads
        self.num_key_value_heads = num_key_value_heads or num_attention_heads
        self.intermediate_size = intermediate_size or hidden_size * 4
        self.rope_theta, self.rope_scaling, self.layer_norm_epsilon = rope_theta, rope_scaling, layer_norm_epsilon
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
'''),
}
# vLLM reads which modules a GPTQ checkpoint quantized from its safetensors headers where the config
# does not list them (AutoGPTQConfig.maybe_update_config); the probe has no weights, so its copy lists
# what the checkpoint quantizes: every linear of the decoder layers (what --from-hf assumes).
GPTQ_MODULES = [["self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"], ["self_attn.o_proj"],
                ["mlp.up_proj", "mlp.gate_proj"], ["mlp.down_proj"],
                # an MoE checkpoint's experts and shared expert; its router (mlp.gate) and shared_expert_gate
                # stay in 16 bits
                ["mlp.experts"], ["mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj"],
                ["mlp.shared_expert.down_proj"]]

# (release, fixture, what) -> why vLLM's layer differs from the engine derived for that release.
KNOWN = {
    ("0.33", "gemma-3-12b-it", "backend"):
        "vLLM 0.33.0 picks TRITON_FLASH_ATTN for the multimodal prefix, a backend the engine schema does not name",
    ("0.33", "gemma-3-27b-it", "backend"):
        "vLLM 0.33.0 picks TRITON_FLASH_ATTN for the multimodal prefix, a backend the engine schema does not name",
}
# MLA layers: vLLM 0.25.0 and 0.33.0 take FLASH_ATTN_MLA first on SM 9.0 (platforms/cuda.py), and so does
# --from-hf (planner/engine/hf/attention.py mla_backend); its kernels are ahead of time in vLLM's wheel.
MLA_BACKENDS: dict = {}

needs_vllm = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")
pytestmark = needs_vllm


def load(fixture: str) -> dict:
    """A fixture's config.json, or a variant's: its fixture with the variant's quantization_config."""
    if fixture in SEQUENCE_PARALLEL:
        return load(SEQUENCE_PARALLEL[fixture][0])
    if fixture in GROUPS:
        return {**load(GROUPS[fixture][0]), "quantization_config": dict(GROUPS[fixture][1])}
    if fixture in VARIANTS:
        base, quant, _ = VARIANTS[fixture]
        config = load(base)
        if quant is None:  # compressed-tensors: its own config, another ignore list
            config["quantization_config"]["ignore"] = ["lm_head", r"re:.*layers\.0\..*", "model.layers.7.mlp.down_proj"]
        else:
            config["quantization_config"] = quant
        return config
    with open(os.path.join(FIXTURES, fixture + ".json"), encoding="utf-8") as f:
        return json.load(f)


def remote_code(fixture: str):
    return REMOTE_CODE.get(VARIANTS[fixture][0] if fixture in VARIANTS else fixture)


def parallel(fixture: str) -> dict:
    """The data parallelism and expert parallelism a case runs with (SEQUENCE_PARALLEL), else none."""
    if fixture in SEQUENCE_PARALLEL:
        return {"dp": SEQUENCE_PARALLEL[fixture][2], "enable_expert_parallel": True}
    return {}


def max_len(fixture: str) -> int:
    """4096 tokens, or the model's own limit where shorter (SmolLM-135M's 2048)."""
    return min(4096, load(fixture).get("max_position_embeddings") or 4096)


def full_version(release: str) -> str:
    """'0.33' (WARMUP_VLLM_ENVS) -> '0.33.0', its row of planner/engine/releases.py."""
    return next(v for v in supported() if v.startswith(release + "."))


def engine(fixture: str, tp: int, release: str) -> dict:
    """The engine --from-hf derives for the vLLM `release` ('0.25', '0.33') that built the layers."""
    return engine_from_hf(load(fixture), EngineRequest(tp=tp, num_blocks=1024, max_model_len=max_len(fixture),
                                                       source=fixture + ".json", vllm_release=full_version(release),
                                                       **parallel(fixture)))


def model_dir(tmp: str, fixture: str) -> str:
    """The fixture as a model directory vLLM reads (module docstring: what the probe's copy adds)."""
    path = os.path.join(tmp, fixture)
    os.makedirs(path, exist_ok=True)
    config = load(fixture)
    quant = config.get("quantization_config", {})
    if quant.get("quant_method") == "gptq" and not quant.get("modules_in_block_to_quantize"):
        config["quantization_config"]["modules_in_block_to_quantize"] = GPTQ_MODULES
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    if remote_code(fixture):
        name, text = remote_code(fixture)
        with open(os.path.join(path, name), "w", encoding="utf-8") as f:
            f.write(text)
    return path


@pytest.fixture(scope="module", params=sorted(RELEASES) or ["none"])
def built(request, tmp_path_factory):
    """(release, {(fixture, tp): vLLM's layers}) for one release, from one oracle subprocess."""
    version, tmp = request.param, str(tmp_path_factory.mktemp("layers"))
    keys = cases() + refused_cases() + list(RELEASE_SHARDS)
    # --dtype auto, as `vllm serve` resolves it (test_dtype_is_vllms compares the dtype)
    probes = [{"dir": model_dir(tmp, fixture), "tp": tp, "max_model_len": max_len(fixture), "dtype": "auto",
               "dp": parallel(fixture).get("dp", 1), "ep": bool(parallel(fixture)),
               "trust_remote_code": remote_code(fixture) is not None}
              for fixture, tp in keys]
    out = os.path.join(tmp, "layers.json")
    # without FlashInfer, whose allreduce fusion asserts libcudart at tp > 1 (test_from_vllm.without_flashinfer)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, without_flashinfer(RELEASES[version])]),
           "VLLM_LOGGING_LEVEL": "ERROR"}
    run = subprocess.run([sys.executable, os.path.join(HERE, "layers_oracle.py"), out], input=json.dumps(probes),
                         capture_output=True, text=True, env=env, timeout=1800, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    with open(out, encoding="utf-8") as f:
        layers = json.load(f)
    shutil.rmtree(tmp, ignore_errors=True)
    return version, dict(zip(keys, layers))


# vLLM's quant method of a layer (layers_oracle.quant_of) -> the engine's quant method
_QUANT = (("Unquantized", "none"), ("Fp8LinearMethod/block", "fp8"), ("Fp8MoEMethod/block", "fp8"),
          ("W8A8Fp8/block", "fp8"), ("W8A8Fp8/channel", "fp8_per_channel"), ("W8A8Fp8/tensor", "fp8_per_tensor"),
          ("Fp8LinearMethod", "fp8_per_tensor"), ("AutoAWQ", "awq"), ("AutoGPTQ", "gptq"), ("MoeWNA16", "moe_wna16"),
          ("Mxfp4", "mxfp4"))


def quant(vllm_method: str) -> str:
    return next((method for word, method in _QUANT if word in vllm_method), vllm_method)


# The linears of the decoder layers (model.layers.N, transformer.h.N, language_model.model.layers.N),
# not a vision tower's
DECODER_LINEAR = re.compile(r"^(?!vision_tower\.)(?:.*\.)?(?:layers|h)\.\d+\.(.+)$")


def decoder_linears(layers: dict) -> Counter:
    """(engine name, n, k, quant) -> layers, of the linears of the decoder layers."""
    pattern = DECODER_LINEAR
    found = Counter()
    for name, _, n, k, method in layers["linears"]:
        match = pattern.match(name)
        if match:
            found[(role(match.group(1)), n, k, quant(method))] += 1
    return found


def engine_linears(e: dict) -> Counter:
    return Counter({(x["name"].removesuffix(".unquantized"), x["n"], x["k"], x["quant"]["method"]): x["count"]
                    for x in e["model"]["linear"] if x["name"] != "lm_head"})


def cases():
    """(case, tp) of every case that vLLM builds and --from-hf plans."""
    return ([(f, tp) for f in [*FIXTURES_BY_ARCHITECTURE, *VARIANTS] for tp in TPS] + [(f, 4) for f in TP4]
            + [(f, 1) for f in TP1_ONLY] + [(f, SEQUENCE_PARALLEL[f][1]) for f in SEQUENCE_PARALLEL]
            + [(f, GROUPS[f][2]) for f in GROUPS if not GROUPS[f][3]])


def refused_cases():
    """(case, tp) of the cases vLLM refuses to build, and --from-hf too."""
    return [(f, GROUPS[f][2]) for f in GROUPS if GROUPS[f][3]]


def test_every_layout_has_a_fixture_here():
    """Each architecture --from-hf plans is checked against vLLM below."""
    planned = {load(f)["architectures"][0] for f in FIXTURES_BY_ARCHITECTURE}
    assert planned == set(LAYOUTS)


@pytest.mark.parametrize("fixture, tp", cases(), ids=[f"{f}-tp{tp}" for f, tp in cases()])
def test_linears_are_vllms(built, fixture, tp):
    version, layers = built
    got = layers[(fixture, tp)]
    assert "error" not in got, got.get("traceback")
    e = engine(fixture, tp, version)
    assert engine_linears(e) == decoder_linears(got), (version, fixture, tp)
    head = next(x for x in e["model"]["linear"] if x["name"] == "lm_head")
    vocab = {n for name, kind, n, k in got["vocab"] if k == head["k"]}
    assert head["n"] in vocab, (head, got["vocab"])


@pytest.mark.parametrize("fixture, tp", cases(), ids=[f"{f}-tp{tp}" for f, tp in cases()])
def test_experts_are_vllms(built, fixture, tp):
    version, layers = built
    assert engine_experts(engine(fixture, tp, version)) == vllm_experts(layers[(fixture, tp)])


def vllm_experts(got: dict) -> Counter:
    """(experts, top_k, hidden, width, quant, FP8 blocks) -> layers, of vLLM's fused-MoE layers."""
    return Counter((e, top_k, h, i, quant(m), block and tuple(block)) for _, e, top_k, h, i, m, block, _ in got["moes"])


def engine_experts(e: dict) -> Counter:
    return Counter({(m["num_experts"], m["top_k"], m["hidden_size"], m["intermediate_size"], m["quant"]["method"],
                     tuple(m["quant"].get("weight_block_size", ())) or None): m["count"] for m in e["model"]["moe"]})


@pytest.mark.parametrize("fixture, tp", list(RELEASE_SHARDS), ids=[f"{f}-tp{tp}" for f, tp in RELEASE_SHARDS])
def test_fp8_experts_a_shard_splits_are_each_releases(built, fixture, tp):
    """0.25.0 refuses block-FP8 experts whose per-rank width is not whole blocks, and --from-hf for it
    too; 0.33.0 refines the blocks and runs them on Triton, and the engine for it has those blocks."""
    version, layers = built
    got, blocks = layers[(fixture, tp)], RELEASE_SHARDS[(fixture, tp)][version]
    if blocks is None:
        assert "not divisible by weight quantization block_n = 128" in got["error"], got.get("moes")
        with pytest.raises(HFConfigError, match=r"moe_intermediate_size = \d+ per rank is not divisible") as e:
            engine(fixture, tp, version)
        assert "\n" not in str(e.value)
        return
    assert "error" not in got, got.get("traceback")
    assert {(tuple(block), backend) for *_, block, backend in got["moes"]} == {(tuple(blocks), "TRITON")}
    e = engine(fixture, tp, version)
    assert engine_experts(e) == vllm_experts(got)
    assert engine_linears(e) == decoder_linears(got)


@pytest.mark.parametrize("fixture, tp", cases(), ids=[f"{f}-tp{tp}" for f, tp in cases()])
def test_attention_is_vllms(built, fixture, tp):
    """Heads, KV heads, head size, scale, soft cap, sliding window and backend of every layer kind."""
    version, layers = built
    got = layers[(fixture, tp)]
    vllm = Counter()
    for _, heads, kv, size, scale, cap, window, backend, _ in got["attention"]:
        if (version, fixture, "backend") in KNOWN:
            backend = "TRITON_ATTN"
        vllm[(heads, kv, size, round(scale, 9), cap, -1 if window is None else window - 1, backend)] += 1
    ours = Counter()
    for a in engine(fixture, tp, version)["model"]["attention"]:
        backend = MLA_BACKENDS.get(a["backend"], a["backend"])
        ours[(a["num_heads"], a["num_kv_heads"], a["head_size"], round(a["scale"], 9), a["logits_soft_cap"],
              a["sliding_window"][0], backend)] += a["count"]
    assert ours == vllm, (version, fixture, tp)


@pytest.mark.parametrize("fixture", [*FIXTURES_BY_ARCHITECTURE, *VARIANTS])
def test_from_vllm_config_gives_the_engine_of_the_config_json(built, fixture):
    """`--from-vllm` and the plugin derive the engine from the config vLLM loaded (transformers' to_dict,
    every default filled in, layer_types computed): the same model as --from-hf's from the file."""
    version, layers = built
    loaded = layers[(fixture, 2)]["hf_config"]
    ours = engine(fixture, 2, version)["model"]
    theirs = engine_from_hf(loaded, EngineRequest(tp=2, num_blocks=1024, max_model_len=4096,
                                                  vllm_release=full_version(version)))["model"]
    assert theirs == ours


def test_gpt_oss_attention_has_sinks_in_vllm(built):
    """The layout's sinks (GPT-OSS) are vLLM's: every attention layer has them, no other model's does."""
    _, layers = built
    for key in cases():  # the refused cases built nothing
        fixture, got = key[0], layers[key]
        sinks = {row[-1] for row in got["attention"]}
        assert sinks == {LAYOUTS[load(fixture)["architectures"][0]].sinks}, fixture


def test_multimodal_model_builds_a_vision_tower(built):
    """Gemma3ForConditionalGeneration: vLLM builds the vision tower beside the language model; the
    engine holds the language model only (the plan's not-modelled list names the tower)."""
    _, layers = built
    for fixture in ("gemma-3-12b-it", "gemma-3-27b-it"):
        got = layers[(fixture, 1)]
        assert {"vision_tower", "multi_modal_projector", "language_model"} <= set(got["children"])
        tower = [row for row in got["linears"] if row[0].startswith("vision_tower.")]
        assert tower and not decoder_linears({"linears": tower})


@pytest.mark.parametrize("fixture, tp", cases(), ids=[f"{f}-tp{tp}" for f, tp in cases()])
def test_dtype_is_vllms(built, fixture, tp):
    """The model dtype is the one `--dtype auto` resolves (a float32 checkpoint in bfloat16)."""
    version, layers = built
    assert engine(fixture, tp, version)["model"]["dtype"] == layers[(fixture, tp)]["hf_config"]["torch_dtype"]


@pytest.mark.parametrize("fixture, tp", refused_cases(), ids=[f"{f}-tp{tp}" for f, tp in refused_cases()])
def test_what_vllm_refuses_from_hf_refuses(built, fixture, tp):
    """vLLM fails to build the model, and --from-hf refuses it in one line naming the layer."""
    version, layers = built
    assert "error" in layers[(fixture, tp)], layers[(fixture, tp)].get("linears")
    with pytest.raises(HFConfigError, match=r"down_proj in layer \d+ has K = 1600 per rank") as e:
        engine(fixture, tp, version)
    assert "\n" not in str(e.value)

