"""The config.json being read: typed lookups whose errors name the file and the key, and the
bound of every count and size read from it.

An HFConfigError carries the config.json key at fault, so that `warmup engine` points at its line
(key_line): the same one-line errors as every other bad input.
"""

from __future__ import annotations

import math
import re

from ...limits import MAX_TOKENS, MAX_VOCAB


class HFConfigError(ValueError):
    """A config.json (or a flag next to it) that cannot become an engine config.

    `key` is the config.json key at fault where there is one (so that `warmup engine` can
    point at its line), and `reason` the message without the file in front."""

    def __init__(self, message: str, key: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.key, self.reason = key, reason

    def as_plan_error(self, file: str, text: str | None):
        """The one-line error of the config.json `file` (its `text`), at the key's line where known."""
        from ...errors import PlanError

        line = key_line(text, self.key) if text is not None and self.key is not None else None
        return PlanError(self.reason or str(self), file=file, line=line)


def key_line(text: str, key: str) -> int | None:
    """The line of the first `"key":` in a JSON text (json keeps no positions)."""
    match = re.search(r'"%s"\s*:' % re.escape(key), text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def config_error(source: str, message: str, key: str | None = None) -> HFConfigError:
    """The error of the config.json `source` (or a flag next to it), at `key` where one is at fault."""
    return HFConfigError(f"{source}: {message}", key, message)


def short_repr(value) -> str:
    """A value for an error message, cut short (a typo may be thousands of digits long)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# The keys a config.json may give its context limit under; model.py takes the first one given.
MAX_LEN_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")

# The largest value read from each config.json key, and why. Every count and size is bounded
# at its key before anything is built from it: the layers and experts are built in loops, so a
# num_hidden_layers of 10^7 (a typo) used to run for minutes and 10^30 out of memory.
_LAYERS = (1 << 12, "no model has more than a few hundred decoder layers")
_HEADS = (1 << 12, "no model has more than a few hundred attention heads")
_EXPERTS = (1 << 14, "no model has more than a few hundred experts")
_BOUNDS: dict[str, tuple[int, str]] = {
    "num_hidden_layers": _LAYERS, "first_k_dense_replace": _LAYERS, "max_window_layers": _LAYERS,
    "decoder_sparse_step": _LAYERS, "moe_layer_freq": _LAYERS,
    "num_attention_heads": _HEADS, "num_key_value_heads": _HEADS,
    "num_experts": _EXPERTS, "num_local_experts": _EXPERTS, "n_routed_experts": _EXPERTS,
    "num_experts_per_tok": _EXPERTS, "n_shared_experts": _EXPERTS,
    "vocab_size": (MAX_VOCAB, "the engine schema's vocab_size bound"),
    "sliding_window": (MAX_TOKENS, "a token count, bounded as max_model_len"),
}
# Widths (hidden, intermediate, head and LoRA ranks): the largest real ones are tens of thousands.
_WIDTH = (1 << 20, "no model has a hidden, intermediate or head dimension past 2^20")
# The config's own context limit may exceed what a server runs (--max-model-len lowers it).
_CONTEXT = (1 << 62, "a context length")


class HFConfig:
    """The config.json being read: typed lookups whose errors name the file and the key."""

    def __init__(self, hf: dict, source: str):
        self.hf = hf
        self.source = source

    def fail(self, message: str, key: str | None = None) -> HFConfigError:
        return config_error(self.source, message, key)

    def get(self, key: str, default=None):
        return self.hf.get(key, default)

    def pos_int(self, key: str, default=None) -> int:
        return self._int(key, default, 1, "a positive integer")

    def nonneg_int(self, key: str, default=None) -> int:
        return self._int(key, default, 0, "a non-negative integer")

    def _int(self, key: str, default, minimum: int, what: str) -> int:
        value = self.hf.get(key, default)
        if value is None:
            raise self.fail(f"{key} is missing")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"{key} must be {what}, got {short_repr(value)}", key)
        maximum, why = _BOUNDS.get(key, _CONTEXT if key in MAX_LEN_KEYS else _WIDTH)
        if value > maximum:
            raise self.fail(f"{key} = {short_repr(value)} is over the bound of {maximum:,} ({why})", key)
        return value

    def number(self, value, key: str) -> float:
        """A finite JSON number (not a bool, a string or 10^400)."""
        try:
            ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        except OverflowError:
            ok = False
        if not ok:
            raise self.fail(f"{key} must be a finite number, got {short_repr(value)}", key.split(".")[0])
        return float(value)

    def div(self, value: int, key: str, by: int, flag: str) -> int:
        """value / by, or an error naming the config key and the flag."""
        if value % by:
            raise self.fail(f"{key} ({value}) is not divisible by {flag}")
        return value // by
