"""vLLM's command-line flags as engine_from_hf takes them, each checked against the engine
schema's bound of the field it sets: the parallelism (tp, dp, expert parallelism), the scheduler's
and the cache's sizes, max_model_len, the speculative method and its draft tokens, the KV-cache dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...limits import KV_CACHE_DTYPES, MAX_BLOCKS, MAX_SEQS, MAX_SPECULATIVE_TOKENS, MAX_TOKENS, SPECULATIVE_METHODS
from .source import config_error, short_repr


@dataclass
class Parallel:
    """vLLM's ParallelConfig, as far as sharding goes."""

    tp: int
    dp: int
    ep: bool  # --enable-expert-parallel


@dataclass
class Flags:
    """The command-line flags, checked; None where a flag was not given."""

    parallel: Parallel
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    num_blocks: int | None
    block_size: int | None
    max_model_len: int | None
    speculative_method: str | None = None
    num_speculative_tokens: int | None = None
    kv_cache_dtype: str = "auto"


# Each flag's bound: the engine schema's, for the field the flag sets.
_FLAG_BOUNDS = {"--tp": MAX_SEQS, "--dp": MAX_SEQS, "--max-num-seqs": MAX_SEQS,
                "--max-num-batched-tokens": MAX_TOKENS, "--num-blocks": MAX_BLOCKS, "--block-size": MAX_TOKENS,
                "--max-model-len": MAX_TOKENS, "--num-speculative-tokens": MAX_SPECULATIVE_TOKENS}


# Each flag that takes a name: the engine schema's values for the field it sets.
_FLAG_CHOICES = {"--speculative-method": SPECULATIVE_METHODS, "--kv-cache-dtype": KV_CACHE_DTYPES}


def _flag_int(value, flag: str, source: str, *, allow_none: bool = True):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise config_error(source, f"{flag} must be a positive integer, got {short_repr(value)}")
    if value > _FLAG_BOUNDS[flag]:
        raise config_error(source, f"{flag} {value} is over the bound of {_FLAG_BOUNDS[flag]:,} "
                                   "(schemas/engine.schema.json says why)")
    return value


def _flag_choice(value, flag: str, source: str):
    if value is None or (isinstance(value, str) and value in _FLAG_CHOICES[flag]):
        return value
    raise config_error(source, f"{flag} {short_repr(value)} is not one of {', '.join(_FLAG_CHOICES[flag])} "
                               "(schemas/engine.schema.json)")


def check_flags(source: str, *, tp, dp, ep, max_num_seqs, max_num_batched_tokens, num_blocks,
                block_size, max_model_len, speculative_method=None, num_speculative_tokens=None,
                kv_cache_dtype=None) -> Flags:
    """The flags, each checked (`ep`: --enable-expert-parallel); the KV-cache dtype `auto` where not given."""
    parallel = Parallel(_flag_int(tp, "--tp", source, allow_none=False),
                        _flag_int(dp, "--dp", source, allow_none=False), bool(ep))
    return Flags(parallel,
                 _flag_int(max_num_seqs, "--max-num-seqs", source),
                 _flag_int(max_num_batched_tokens, "--max-num-batched-tokens", source),
                 _flag_int(num_blocks, "--num-blocks", source),
                 _flag_int(block_size, "--block-size", source),
                 _flag_int(max_model_len, "--max-model-len", source),
                 _flag_choice(speculative_method, "--speculative-method", source),
                 _draft_tokens(speculative_method, num_speculative_tokens, source),
                 _flag_choice(kv_cache_dtype, "--kv-cache-dtype", source) or "auto")


def _draft_tokens(method, k, source: str) -> int | None:
    """--num-speculative-tokens, checked against --speculative-method (0 goes with `none` only)."""
    if k is None:
        return None
    if method is None:
        raise config_error(source, f"--num-speculative-tokens {short_repr(k)} needs --speculative-method (one of "
                                   f"{', '.join(m for m in SPECULATIVE_METHODS if m != 'none')})")
    if method == "none":
        if k == 0 and not isinstance(k, bool):
            return 0
        raise config_error(source, "--speculative-method none takes no draft tokens: --num-speculative-tokens "
                                   f"must be 0 or left out, got {short_repr(k)}")
    return _flag_int(k, "--num-speculative-tokens", source)
