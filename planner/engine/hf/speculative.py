"""The engine's `speculative` section: the flags as vLLM's SpeculativeConfig takes them, with
vLLM's defaults where it has them (`mtp`: the model's num_nextn_predict_layers, which it needs;
`suffix`: suffix_decoding_max_tree_depth). The drafter's weights and KV cache are not in
memory.py's estimate.
"""

from __future__ import annotations

from ...limits import MAX_SPECULATIVE_TOKENS
from .flags import Flags
from .source import HFConfig, short_repr


SUFFIX_TREE_DEPTH = 24  # vLLM's suffix_decoding_max_tree_depth: suffix decoding's default draft tokens


def speculative_config(ctx: HFConfig, flags: Flags) -> dict:
    """The engine's `speculative` section: the flags, with vLLM's defaults where it has them."""
    method, k = flags.speculative_method or "none", flags.num_speculative_tokens
    if method == "mtp":
        k = _mtp_draft_tokens(ctx, k)
    elif method == "suffix" and k is None:
        k = SUFFIX_TREE_DEPTH
    elif method != "none" and k is None:
        raise ctx.fail(f"--speculative-method {method} needs --num-speculative-tokens N (1 to "
                       f"{MAX_SPECULATIVE_TOKENS}): vLLM has no default for it")
    return {"method": method, "num_speculative_tokens": k or 0}


def _mtp_draft_tokens(ctx: HFConfig, k: int | None) -> int:
    """MTP drafts with the model's own next-token layers: vLLM needs them, defaults k to their
    number, and refuses a larger k that is not a multiple of it (SpeculativeConfig)."""
    layers = ctx.get("num_nextn_predict_layers")
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise ctx.fail("--speculative-method mtp needs a model with MTP layers (num_nextn_predict_layers >= 1, "
                       f"as DeepSeek-V3 has), got num_nextn_predict_layers = {short_repr(layers)}",
                       "num_nextn_predict_layers")
    layers = ctx.pos_int("num_nextn_predict_layers")
    if k is not None and k > layers and k % layers:
        raise ctx.fail(f"--num-speculative-tokens {k} with --speculative-method mtp must be at most "
                       f"num_nextn_predict_layers = {layers} or a multiple of it (vLLM refuses it)",
                       "num_nextn_predict_layers")
    return layers if k is None else k
