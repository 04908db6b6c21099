"""The module layout vLLM builds for each architecture: one small declaration per layout.

Shapes are not declared here: they come from the config's keys, by rule, for every architecture
(decoder.py, layers.py, deepseek.py, attention.py). A layout says only what the keys cannot, each
item read from vLLM's model code (vllm/model_executor/models/<module>.py, the same in 0.25.0 and
0.33.0 unless a comment says otherwise) and checked by tests/integration/from_vllm/test_model_layers.py, which
builds vLLM's own model on the meta device and compares every linear, MoE and attention layer:

* the names vLLM gives the linears of a decoder layer, and the checkpoint modules each fused one
  loads (the model's packed_modules_mapping): a quantization_config's ignore list names checkpoint
  modules, and vLLM skips a fused layer when its own name or all of its shards are listed
  (quantization.py). Phi-3 and InternLM2 load qkv_proj / wqkv as one checkpoint module, Llama
  three; naming Phi-3's shards q_proj, k_proj, v_proj would miss an ignored qkv_proj;
* whether the MLP is gated (gate_up_proj, 2 x intermediate_size wide) or not (Starcoder2's c_fc);
* whether vLLM reads head_dim from the config or computes hidden_size / num_attention_heads
  (Cohere, OLMo-2, InternLM2 compute it);
* the interleave rule of sliding-window layers where the config.json has neither layer_types nor
  sliding_window_pattern (Gemma-2: every other layer slides, as transformers' Gemma2Config computes);
* attention sinks (GPT-OSS: a learned sink per head, which only some attention backends take);
* the defaults of the transformers config class for keys that Hub configs leave out (Gemma-3's
  text_config gives hidden_size but not head_dim), and the keys it renames (Exaone's num_layers);
* where the language model's config is: text_config for Gemma3ForConditionalGeneration, whose
  vision tower the engine config does not describe (the plan's not-modelled list names it);
* the MoE block: its prefix, the router's name and whether vLLM quantizes it, the shared experts'.

An architecture with no declaration is refused with what to do instead (refusal.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Fused:
    """A linear of the decoder layer as vLLM names it (relative to the layer), and the checkpoint
    modules vLLM loads into it (its packed_modules_mapping; one module: the linear itself)."""

    name: str
    shards: tuple[str, ...] = ()

    @property
    def modules(self) -> tuple[str, ...]:
        return self.shards or (self.name,)


def _qkv(block: str) -> Fused:
    return Fused(f"{block}.qkv_proj", (f"{block}.q_proj", f"{block}.k_proj", f"{block}.v_proj"))


SELF_ATTN_QKV = _qkv("self_attn")  # Llama's: q_proj, k_proj, v_proj loaded into qkv_proj
GATE_UP = Fused("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj"))


@dataclass(frozen=True)
class MoeLayout:
    """An MoE block's names: vLLM's FusedMoE at <block>.experts, its router, its shared experts."""

    block: str = "mlp"
    router: str = "gate"
    router_quantized: bool = False  # the model hands the router its quant_config (Qwen3-MoE does)
    shared: str = "shared_experts"  # DeepSeek's shared_experts, Qwen2-MoE's shared_expert
    # the shared experts are whole on every rank under sequence-parallel MoE (Parallel.sequence_parallel_moe):
    # deepseek_v2.py builds DeepseekV2MLP with is_sequence_parallel (disable_tp); qwen2_moe.py does not
    shared_sequence_parallel: bool = False


@dataclass(frozen=True)
class Layout:
    """What vLLM builds for one architecture that the config's keys do not say (module docstring)."""

    module: str                                   # vLLM's model file, the source of each item
    qkv: Fused = SELF_ATTN_QKV
    o_proj: str = "self_attn.o_proj"
    mlp_in: Fused = GATE_UP
    mlp_out: str = "mlp.down_proj"
    gated: bool = True                            # gate_up_proj (2 x I) or one up-projection (I)
    head_dim_key: bool = True                     # vLLM reads config.head_dim (else hidden / heads)
    sliding_pattern: int | None = None            # every pattern-th layer full, where the config says not
    sinks: bool = False                           # attention sinks (GPT-OSS)
    moe: MoeLayout | None = None
    layers: str = "model.layers"                  # the prefix vLLM's quant method sees the layers under
    text_config: bool = False                     # the language model's config is text_config
    defaults: dict = field(default_factory=dict)  # the transformers config class's defaults
    aliases: dict = field(default_factory=dict)   # key -> the key the config.json writes it under


LLAMA = Layout("llama.py")
# gemma3.py: Gemma3TextConfig's defaults for what the Hub's text_config leaves out (transformers
# 4.50+; vLLM reads the config object, where they are filled in)
GEMMA3_TEXT = {"head_dim": 256, "query_pre_attn_scalar": 256, "vocab_size": 262208, "num_attention_heads": 8,
               "num_key_value_heads": 4, "max_position_embeddings": 131072, "sliding_window": 4096,
               "tie_word_embeddings": True}
# transformers' Qwen2Config (and Qwen3's, Qwen2-MoE's, Qwen3-MoE's): no sliding window unless asked
QWEN = {"use_sliding_window": False, "max_window_layers": 28}
# GemmaConfig, Gemma2Config: the LM head is the embedding (the models assert it)
GEMMA = {"tie_word_embeddings": True, "head_dim": 256}

LAYOUTS: dict[str, Layout] = {
    "LlamaForCausalLM": LLAMA,
    "MistralForCausalLM": Layout("mistral.py (MistralForCausalLM on llama.py's LlamaModel)"),
    "Qwen2ForCausalLM": Layout("qwen2.py", defaults=QWEN),
    "Qwen3ForCausalLM": Layout("qwen3.py", defaults=QWEN),
    # granite.py scales by config.attention_multiplier, GraniteConfig's default 1.0
    "GraniteForCausalLM": Layout("granite.py", defaults={"attention_multiplier": 1.0}),
    "Glm4ForCausalLM": Layout("glm4.py"),
    "GemmaForCausalLM": Layout("gemma.py", defaults=GEMMA),
    # transformers' Gemma2Config: layer i slides where (i + 1) % 2; gemma2.py reads layer_types
    "Gemma2ForCausalLM": Layout("gemma2.py", sliding_pattern=2, defaults={**GEMMA, "query_pre_attn_scalar": 256}),
    # Gemma3TextConfig: every sliding_window_pattern-th (6th) layer is full
    "Gemma3ForCausalLM": Layout("gemma3.py", sliding_pattern=6, defaults=GEMMA3_TEXT),
    # gemma3_mm.py builds Gemma3ForCausalLM from text_config beside a SigLIP vision tower
    "Gemma3ForConditionalGeneration": Layout("gemma3_mm.py", layers="language_model.model.layers",
                                             sliding_pattern=6, text_config=True, defaults=GEMMA3_TEXT),
    # commandr.py serves both; head_dim = hidden_size // num_attention_heads; the head is tied;
    # Cohere2Config: every sliding_window_pattern-th (4th) layer is full
    "CohereForCausalLM": Layout("commandr.py", head_dim_key=False, defaults={"tie_word_embeddings": True}),
    "Cohere2ForCausalLM": Layout("commandr.py", head_dim_key=False, sliding_pattern=4,
                                 defaults={"tie_word_embeddings": True}),
    # olmo2.py (0.25.0; 0.33.0 serves it on the Transformers backend, the same layers)
    "Olmo2ForCausalLM": Layout("olmo2.py", head_dim_key=False),
    # phi3.py: packed_modules_mapping {"qkv_proj": ["qkv_proj"], "gate_up_proj": ["gate_up_proj"]}
    "Phi3ForCausalLM": Layout("phi3.py", qkv=Fused("self_attn.qkv_proj"), mlp_in=Fused("mlp.gate_up_proj")),
    # internlm2.py: wqkv loaded whole, gate_up_proj from w1 and w3; the head is `output`
    "InternLM2ForCausalLM": Layout("internlm2.py", qkv=Fused("attention.wqkv"), o_proj="attention.wo",
                                   mlp_in=Fused("feed_forward.gate_up_proj", ("feed_forward.w1", "feed_forward.w3")),
                                   mlp_out="feed_forward.w2", head_dim_key=False),
    # exaone.py: h.N.attn.attention.*, gate_up_proj from c_fc_0 and c_fc_1, built under the prefix
    # "model" (ExaoneForCausalLM hands its `transformer` maybe_prefix(prefix, "model")): vLLM's quant
    # method sees model.h.N.*, so an ignore list must name those, not the checkpoint's transformer.h.N.*.
    # ExaoneConfig (remote code) maps num_hidden_layers to num_layers and ties the head by default
    "ExaoneForCausalLM": Layout("exaone.py", layers="model.h", qkv=_qkv("attn.attention"),
                                o_proj="attn.attention.out_proj",
                                mlp_in=Fused("mlp.gate_up_proj", ("mlp.c_fc_0", "mlp.c_fc_1")), mlp_out="mlp.c_proj",
                                aliases={"num_hidden_layers": "num_layers"}, defaults={"tie_word_embeddings": True}),
    # the Transformers modeling backend (transformers/base.py): the base_model_tp_plan's colwise
    # q/k/v are fused into one QKVParallelLinear (transformers/fusers/qkv.py), c_fc colwise, c_proj
    # rowwise; Starcoder2Config ties the head by default
    "Starcoder2ForCausalLM": Layout("transformers/ (Transformers modeling backend)", mlp_in=Fused("mlp.c_fc"),
                                    mlp_out="mlp.c_proj", gated=False, defaults={"tie_word_embeddings": True}),
    "Qwen2MoeForCausalLM": Layout("qwen2_moe.py", moe=MoeLayout(shared="shared_expert"), defaults=QWEN),
    # qwen3_moe.py: Qwen3MoeSparseMoeBlock builds its gate with the model's quant_config
    "Qwen3MoeForCausalLM": Layout("qwen3_moe.py", moe=MoeLayout(router_quantized=True, shared="shared_expert"),
                                  defaults=QWEN),
    "MixtralForCausalLM": Layout("mixtral.py", moe=MoeLayout(block="block_sparse_moe")),
    # granitemoe.py: GraniteMoeMoE at block_sparse_moe in every layer, its gate unquantized (0.25.0's
    # ReplicatedLinear with quant_config=None, 0.33.0's GateLinear); head_dim = hidden_size // heads;
    # the scale is config.attention_multiplier (GraniteMoeConfig's default 1.0)
    "GraniteMoeForCausalLM": Layout("granitemoe.py", head_dim_key=False, moe=MoeLayout(block="block_sparse_moe"),
                                    defaults={"attention_multiplier": 1.0}),
    # phimoe.py: PhiMoE at block_sparse_moe in every layer, its gate unquantized; head_dim from the config
    # (PhiMoEConfig: hidden_size // heads where not given); no per-layer window: CacheConfig.sliding_window
    "PhiMoEForCausalLM": Layout("phimoe.py", moe=MoeLayout(block="block_sparse_moe")),
    # deepseek_v2.py serves both; kv_lora_rank makes the attention MLA (deepseek.py)
    "DeepseekV2ForCausalLM": Layout("deepseek_v2.py", moe=MoeLayout(shared_sequence_parallel=True)),
    "DeepseekV3ForCausalLM": Layout("deepseek_v2.py", moe=MoeLayout(shared_sequence_parallel=True)),
    # gpt_oss.py: attn.qkv_proj / attn.o_proj with sinks, a router beside the experts in every layer
    "GptOssForCausalLM": Layout("gpt_oss.py", qkv=_qkv("attn"), o_proj="attn.o_proj", sinks=True,
                                moe=MoeLayout(router="router")),
}


def role(name: str) -> str:
    """The engine entry's name of a linear: vLLM's module name inside the layer's attention or MLP
    block (self_attn.qkv_proj -> qkv_proj, mlp.shared_experts.down_proj -> shared_experts.down_proj)."""
    return name.split(".", 1)[1] if "." in name else name


def with_defaults(config: dict, layout: Layout) -> dict:
    """The config as vLLM's config object reads it: renamed keys under their names, the config
    class's defaults where the config.json leaves a key out."""
    out = {**layout.defaults, **config}
    for key, written in layout.aliases.items():
        if key not in config and written in config:
            out[key] = config[written]
    return out
