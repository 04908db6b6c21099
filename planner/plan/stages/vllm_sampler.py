"""vllm_sampler_kernels: compile-only launches of vLLM 0.25's Triton top-k/top-p sampler kernel.

vLLM 0.25.0 warms neither this kernel nor the batches that reach it, so each combination of
filters compiles at the first batch of 8 or more rows that uses it, after the server is ready.
kernel_model.vllm_sampler enumerates its compile keys from the engine alone: the vocabulary
and the largest batch the sampler sees, one row per sampled position, so
max_num_seqs x (1 + num_speculative_tokens). One Kernel step holds them, each key with the
launch that reaches it. Its backend, `vllm_triton`, says that the kernel is vLLM's own (the
variants compile vLLM's function), not one of the executor's Triton kernels.

Only a rank that samples launches it: none on a pooling model, and under pipeline
parallelism only the last stage samples.
"""

from __future__ import annotations

from kernel_model import vllm_sampler as sampler

from ...engine.facts import EngineFacts
from ..steps import Kernel, Variant
from .scope import Scope


def max_rows(engine: EngineFacts) -> int:
    """The most logits rows one sampler call sees: every sequence with all its draft positions."""
    return engine.scheduler.max_num_seqs * engine.speculative.decode_query_len


def expand(scope: Scope) -> list:
    if scope.names["is_pooling_model"] or not scope.names["is_last_pp_rank"]:
        return []
    facts = scope.engine.facts
    launches = sampler.topk_topp_variants(facts.model.vocab_size, max_rows(facts))
    if not launches:
        return []
    return [scope.new(Kernel, "topk_topp", backend="vllm_triton", kernel=sampler.KERNEL,
                      variants=tuple(Variant(launch.key(), launch) for launch in launches))]
