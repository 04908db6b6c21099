"""prefill_attention: direct calls of a prefill attention kernel, one per layer key.

NOTE: vLLM's `_warmup_triton_nvfp4_prefill_kernels`
(vllm/model_executor/warmup/kernel_warmup.py of a vLLM release or fork build; not on vLLM
main as of 017e9f4448b7, and no upstream commit, tag or PR is known for it): the
NVFP4 Triton path calls context_attention_fwd directly for pure prefill, so each
distinct (num_heads, num_kv_heads, head_size, scale, logits_soft_cap,
sliding_window, dtype) needs its own call; a token count <= 0 skips the stage.
"""

from __future__ import annotations

from kernel_model import triton_kernels as dispatch

from ...engine.facts import EngineFacts
from ..steps import Attention, Variant
from .scope import Scope

KEY_FIELDS = ("num_heads", "num_kv_heads", "head_size", "scale", "logits_soft_cap", "sliding_window")
# The executor backend that implements each prefill attention kernel a plan may name.
KERNEL_BACKENDS = {"context_attention_fwd": "triton", "prefill_attention": "triton"}


def layer_keys(engine: EngineFacts, backend: str | None, kv_cache_dtype: str | None) -> dict:
    """Distinct attention keys of the matching layers -> names of the layers sharing each."""
    keys: dict = {}
    for attn in engine.model.attention:
        if backend is not None and attn.backend != backend:
            continue
        if kv_cache_dtype is not None and attn.kv_cache_dtype != kv_cache_dtype:
            continue
        key = (attn.num_heads, attn.num_kv_heads, attn.head_size, attn.softmax_scale,
               attn.logits_soft_cap, attn.sliding_window, engine.model.dtype)
        keys.setdefault(key, []).append(attn.name)
    return keys


def expand(scope: Scope) -> list:
    token_counts = []
    for raw in scope.params["num_tokens"]:
        n = scope.integer("num_tokens", minimum=-(1 << 62), raw=raw)
        if n > 0 and n not in token_counts:
            token_counts.append(n)
    steps = []
    for key, layers in layer_keys(scope.engine.facts, scope.params["backend"], scope.params["kv_cache_dtype"]).items():
        steps += layer_steps(scope, key, tuple(layers), token_counts)
    return steps


def layer_steps(scope: Scope, key: tuple, layers: tuple, token_counts: list[int]) -> list:
    """The steps of one layer key: one per token count (`listed`), or one per compile key over
    1..the largest count, with `max_value` keeping the range (`exact`)."""
    fields = dict(zip(KEY_FIELDS, key[:6]), sliding_window=key[5], dtype=key[6])
    base = "attention-h{}-kv{}-d{}".format(*key[:3]) + ("" if key[5] == (-1, -1) else f"-sw{key[5][0]}")

    def key_of(n):
        return dispatch.attention_key(n, fields["num_heads"], fields["num_kv_heads"], fields["head_size"],
                                      fields["dtype"], True, fields["sliding_window"], fields["logits_soft_cap"])

    counts, max_value = token_counts, None
    if scope.params["mode"] == "exact" and token_counts:
        scope.count_limit("num_tokens", "token counts", max(token_counts))
        max_value = max(token_counts)
        counts = dispatch.first_value_per_key(range(1, max_value + 1), key_of)[0]
    kernel = scope.params["kernel"]
    return [scope.new(Attention, f"{base}-t{n}", kernel=kernel, backend=KERNEL_BACKENDS.get(kernel, "triton"),
                      **fields, num_tokens=n, is_causal=True, layers=layers, variants=(Variant(key_of(n), n),),
                      exact=True, max_value=max_value)
            for n in counts]
