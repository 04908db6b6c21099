"""Engine config from a Hugging Face ``config.json``.

``engine_from_hf(hf, EngineRequest(tp=..., gpu=...))`` turns the dict of a model's
``config.json`` into an engine config (schemas/engine.schema.json): the GEMM
shapes, fused-MoE layers and attention layers that one rank of a vLLM server
runs, after tensor-parallel (and expert-parallel) sharding, plus KV-cache,
scheduler, parallel and device facts. ``engine_to_yaml`` writes it as YAML.

Which architectures: those with a layout declaration (layouts.LAYOUTS, checked against vLLM's
own model built on the meta device by tests/integration/from_vllm/test_model_layers.py); their shapes come from
the config's keys by rule (MoE from the expert counts, MLA from kv_lora_rank, head_dim, sliding
windows from layer_types or the interleave rule, soft caps, query_pre_attn_scalar,
attention_multiplier, tied embeddings). Any other architecture or quantization is refused in one
line that says what to do instead (refusal.py).

This package imports only the standard library and the planner's YAML codec, whose
writer needs nothing else (besides the engine schema's bounds, planner.errors for an
error's line, kernel_model.arith's cdiv and the rules of planner/engine/vllm_choices.py:
tests/planner/test_hf.py checks each module): ``warmup`` must start fast, and ``warmup plan``
never imports it (planner/__init__.py).

Modules, in the order engine_from_hf uses them
----------------------------------------------
::

    source.py        the config.json being read: typed lookups, HFConfigError, each key's bound
    flags.py         vLLM's flags: one row each, EngineRequest (the builder's one argument), checked into Flags
    device.py        the GPUs the planner knows (GPUS) and the one --gpu names
    layouts.py       one declaration per module layout vLLM builds (names, fused shards, what keys cannot say)
    refusal.py       what is not planned, and what to do instead (an engine YAML, --from-vllm)
    model.py         vLLM's ModelConfig: architecture and layout, the language model's config, dtype, max_model_len
    speculative.py   the speculative section, with vLLM's SpeculativeConfig defaults (mtp, suffix)
    layers.py        one decoder layer's GEMMs, experts and attention shape per rank, as vLLM shards them
    decoder.py       which layers a model stacks, by rule from the config's keys (dense, MoE, shared experts)
    deepseek.py      multi-head latent attention (a kv_lora_rank: DeepSeek-V2, -V3)
    quantization.py  quantization_config: none, fp8, awq, gptq, mxfp4; vLLM's rules for ignored modules
    compressed_tensors.py  compressed-tensors' FP8 W8A8 schemes (by tensor, channel or block)
    wna16.py         AWQ and GPTQ groups split by tp: linears vLLM refuses, experts on MoeWNA16 (`moe_wna16`)
    entries.py       the engine's linear and moe entries, counted over the layers; lm_head
    attention.py     attention entries and KV-cache groups: sliding windows, the attention backend
    memory.py        one rank's weights and the KV-cache size estimate (num_blocks); what does not fit
    scheduler.py     the scheduler's defaults by GPU memory
    assemble.py      engine_from_hf: the steps in order; the config's name, description and sections
    choices.py       what vLLM decides at start-up: the block-FP8 linear kernel, model runner, sampler
    writer.py        the schema's key order (insert_after) and the YAML (engine_to_yaml)

Sharding follows vLLM
---------------------
* Column-parallel layers split N (``qkv_proj``, ``gate_up_proj``, ``q_b_proj``,
  ``kv_b_proj``, the shared experts' ``gate_up_proj``, ``lm_head``);
  row-parallel layers split K (``o_proj``, ``down_proj``); replicated layers
  (the MoE router ``gate``, DeepSeek's ``fused_qkv_a_proj``) are whole
  (layers.py, deepseek.py).
* KV heads are replicated when there are fewer of them than ``tp``:
  per rank ``max(1, num_key_value_heads // tp)`` (layers.py).
* ``lm_head``: vLLM pads the vocabulary to a multiple of 64, then splits it
  over ``tp`` (``VocabParallelEmbedding``): ``n = pad64(vocab_size) / tp``
  (entries.py).
* Fused MoE: without expert parallelism every rank holds every expert with
  ``moe_intermediate_size / (tp * dp)`` (vLLM flattens TP across DP for MoE;
  with ``dp == 1`` that is ``/ tp``); with ``enable_expert_parallel`` a rank
  holds ``num_experts / (tp * dp)`` whole experts (layers.py).
* FP8 block quantization: vLLM refuses a sharded N (or K) that is not a
  multiple of the block (e.g. Qwen3-30B-A3B-FP8 at tp 4: 768 / 4 = 192); so
  does this package, with an HFConfigError (quantization.py).
* Embeddings, ``lm_head`` and router gates stay unquantized, except Qwen3-MoE's gate, which
  vLLM (0.25.0 and 0.33.0) builds with the model's quant_config.
  The modules a checkpoint leaves unquantized are matched by vLLM's rule for its method
  (quantization.py): fp8's ``ignored_layers`` / ``modules_to_not_convert`` by full name
  (``model.layers.3.self_attn.o_proj``), awq's ``modules_to_not_convert`` by substring,
  compressed-tensors' ``ignore`` by full name or ``re:`` regular expression; a fused linear
  by its own vLLM name or all of the checkpoint modules it loads (layouts.py). A role that is
  ignored in some layers only is split in two entries, the unquantized one named
  ``<role>.unquantized`` (entries.py).
* Linear entries are named after vLLM's module inside the layer's attention or MLP block
  (``qkv_proj``, ``wqkv``, ``c_fc``, ``shared_experts.down_proj``: layouts.role).
* The DeepSeek MTP layer (``num_nextn_predict_layers``) is not part of the
  main model and is left out of its layers (deepseek.py).
* Speculative decoding (``speculative``) is what the flags say, as vLLM's
  SpeculativeConfig takes it: a method of the engine schema and a number of
  draft tokens (1 to 256), required except where vLLM has a default (``mtp``:
  the model's ``num_nextn_predict_layers``, which it needs; ``suffix``: 24,
  vLLM's suffix_decoding_max_tree_depth). ``none`` (the default) is no
  speculation. The drafter's weights and KV cache are not in the estimate below
  (flags.py, speculative.py).
* ``--kv-cache-dtype`` (vLLM's CacheConfig.cache_dtype, the engine schema's
  values) is every attention layer's ``kv_cache_dtype``; ``auto`` is the model
  dtype (model.py, attention.py).
* What vLLM decides at start-up is its defaults as a user installs it
  (planner/engine/vllm_choices.py): every block-FP8 linear's ``kernel`` is what vLLM's
  kernel selection picks with FlashInfer installed (``pip install vllm==0.25.0``
  brings it): FlashInferFp8DeepGEMMDynamicBlockScaledKernel on SM 9.0, which the
  engine loader fills in, so it is not written; ``--fp8-linear-kernel deep_gemm``
  says FlashInfer is absent or VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER=0 (DeepGEMM's
  kernel, written on each layer). ``model_runner`` is
  ``auto`` (not written), each release's own choice for the model, decided for the plan of
  that release; ``--model-runner v1|v2`` pins it (VLLM_USE_V2_MODEL_RUNNER) (choices.py).

* Where the releases' model code differs, the shapes follow ``--vllm-release`` (``vllm_release``:
  a row of planner/engine/releases.py, default the newest; ``--from-vllm`` and the plugin pass the
  installed vLLM's): vLLM 0.33.0 gives Cohere2's sliding layers ``sliding_window + 1`` tokens
  (commandr.py; attention.py), and refines the blocks of block-FP8 experts whose per-rank width is
  not whole blocks (refine_fp8_moe_block_shape; quantization.py), which 0.25.0 refuses.

KV-cache size estimate (when ``num_blocks`` is not given)
---------------------------------------------------------
A rough upper bound of what vLLM's memory profiling finds, with
``--gpu-memory-utilization 0.9``: the blocks that fit in 90% of the GPU's memory
beside one rank's weights (memory.py gives the formula). It ignores activation
memory, CUDA graphs and the sampler, so a real server finds somewhat fewer blocks;
pass ``num_blocks`` to pin the number. Where vLLM would refuse to start (no free
memory, or fewer blocks than one request of max_model_len needs: its
check_enough_kv_cache_memory), the config is refused with the numbers and what to
change; ``ignore_memory`` writes it anyway, with room for one max_model_len
request, and a warning.
"""

from __future__ import annotations

from .assemble import engine_from_hf
from .device import GPUS, gpu_name
from .entries import VOCAB_PADDING
from .flags import FROM_HF_FLAGS, NOT_FLAGS, EngineRequest
from .layouts import LAYOUTS
from .memory import GPU_MEMORY_UTILIZATION
from .model import DEFAULT_BLOCK_SIZE
from .refusal import WAY_OUT, unplanned
from .source import HFConfigError, key_line
from .speculative import SUFFIX_TREE_DEPTH
from .writer import engine_to_yaml, insert_after

__all__ = ["DEFAULT_BLOCK_SIZE", "FROM_HF_FLAGS", "GPUS", "GPU_MEMORY_UTILIZATION", "LAYOUTS", "NOT_FLAGS",
           "SUFFIX_TREE_DEPTH", "VOCAB_PADDING", "WAY_OUT", "EngineRequest", "HFConfigError", "engine_from_hf",
           "engine_to_yaml", "gpu_name", "insert_after", "key_line", "unplanned"]
