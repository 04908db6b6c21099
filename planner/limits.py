"""Sane bounds: a plan that would exceed them is refused before anything is built.

A warmup that schedules millions of requests or GEMM calls is a typo, not a plan,
and building it would only run the machine out of memory.
"""

MAX_REQUESTS_PER_STEP = 1 << 16      # synthetic requests in one batch
MAX_VALUES_PER_LIST = 1 << 20        # M-values, sizes, block ids, token ids in one list
MAX_TOTAL_VALUES = 1 << 23           # all integers of the expanded plan together
MAX_STEPS = 1 << 16

# The engine schema's bounds (schemas/engine.schema.json $defs, where the reasons are written; a
# test checks the two agree). `warmup engine --from-hf` refuses flags and config.json values past
# them at the flag or key, rather than writing an engine config that does not validate.
MAX_TOKENS = 1 << 24                 # num_tokens: max_model_len, max_num_batched_tokens, block size
MAX_SEQS = 1 << 16                   # num_seqs: max_num_seqs
MAX_BLOCKS = 1 << 24                 # num_blocks
MAX_VOCAB = 1 << 21                  # vocab_size
MAX_SPECULATIVE_TOKENS = 256         # speculative.num_speculative_tokens
# The engine schema's enums behind `warmup engine --from-hf`'s flags (a test checks them too: each flag
# row's bound and choices are the schema's at the row's field, tests/planner/test_engine_declarations.py).
SPECULATIVE_METHODS = ("none", "ngram", "eagle", "eagle3", "draft_model", "mtp", "dflash", "dspark", "suffix")
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4")
# `warmup engine --from-hf --fp8-linear-kernel`: the kernel vLLM picks for the block-FP8 linears
# DeepGEMM can take, with FlashInfer (vLLM's dependency) or without it (or with
# VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER=0); `--model-runner`: the engine schema's model.model_runner.
FP8_LINEAR_KERNEL_CHOICES = ("flashinfer_deep_gemm", "deep_gemm")
MODEL_RUNNERS = ("auto", "v1", "v2")
SAMPLERS = ("auto", "flashinfer", "triton")  # the engine's model.sampler
