"""The engine's `scheduler` section: vLLM's `vllm serve` defaults by GPU memory, unless the flags
set them.
"""

from __future__ import annotations

from .device import Gpu
from .flags import Flags
from .source import config_error


def scheduler_config(flags: Flags, gpu: Gpu, source: str) -> dict:
    """vLLM `vllm serve` defaults by GPU memory (`EngineArgs`, vllm/engine/arg_utils.py lines
    2590-2620, vLLM @ 017e9f4448b7), unless the flags set them."""
    if gpu.memory_gib >= 160:
        default_tokens, default_seqs = 16384, 1024
    elif gpu.memory_gib >= 70 and gpu.name != "A100":
        default_tokens, default_seqs = 8192, 1024
    else:
        default_tokens, default_seqs = 2048, 256
    seqs = flags.max_num_seqs if flags.max_num_seqs is not None else default_seqs
    tokens = flags.max_num_batched_tokens if flags.max_num_batched_tokens is not None else default_tokens
    if tokens < seqs:
        raise config_error(source, f"--max-num-batched-tokens ({tokens}) is smaller than "
                                   f"--max-num-seqs ({seqs}); vLLM refuses that")
    return {"max_num_seqs": seqs, "max_num_batched_tokens": tokens}
