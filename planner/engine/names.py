"""The names plans use for engine facts (vLLM's vocabulary), each declared once: the engine fields
it reads and how its value follows from the engine record.

Before this table a name lived in two places, its value in `expression_names` and its fields in
EXPRESSION_FIELDS (for errors that point at the line that set it), kept in step by hand; now a name
is one row, and both views are read off the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .facts import EngineFacts
from .releases import model_runner, sampler

Path = tuple[str, ...]


class ExpressionName(NamedTuple):
    """One name of plan expressions: the engine fields behind it and its value."""

    fields: tuple[Path, ...]
    value: Callable[[EngineFacts, str | None], object]  # (engine, the plan's vLLM release) -> value


def num_lookahead_tokens(method: str, k: int) -> int:
    """Tokens the speculator writes past the scheduled range (VllmConfig.num_lookahead_tokens)."""
    if k == 0 or method == "none":
        return 0
    if method == "dflash":
        return k + 1
    # MTP drafts through the EAGLE path (SpeculativeConfig.use_eagle() at vLLM 0.25 and 0.33),
    # so it reserves k slots too (tests/integration/vllm_parity checks this against vLLM 0.33's property).
    if method in ("eagle", "eagle3", "mtp", "draft_model", "dspark"):
        return k
    return 0  # ngram, suffix


_TP, _PP, _DP = (("parallel", "tensor_parallel_size"), ("parallel", "pipeline_parallel_size"),
                  ("parallel", "data_parallel_size"))
_METHOD, _K = ("speculative", "method"), ("speculative", "num_speculative_tokens")
_RUNNER = ("model", "runner")

# `release` resolves the start-up choices an engine leaves to vLLM (`auto`): another release gives the
# same model another runner or sampler (planner/engine/vllm_choices.py).
EXPRESSION_NAMES: dict[str, ExpressionName] = {
    "vocab_size": ExpressionName((("model", "vocab_size"),), lambda e, r: e.model.vocab_size),
    "max_model_len": ExpressionName((("model", "max_model_len"),), lambda e, r: e.model.max_model_len),
    "max_encoder_len": ExpressionName((("model", "max_encoder_len"),), lambda e, r: e.model.max_encoder_len),
    "runner": ExpressionName((_RUNNER,), lambda e, r: e.model.runner),
    "dtype": ExpressionName((("model", "dtype"),), lambda e, r: e.model.dtype),
    "is_pooling_model": ExpressionName((_RUNNER,), lambda e, r: e.model.runner == "pooling"),
    "model_runner": ExpressionName((("model", "model_runner"),), lambda e, r: model_runner(r, e)[0]),
    "sampler": ExpressionName((("model", "sampler"), ("device", "capability"), ("device", "num_sms")),
                              lambda e, r: sampler(r, e)[0]),
    "max_num_seqs": ExpressionName((("scheduler", "max_num_seqs"),), lambda e, r: e.scheduler.max_num_seqs),
    "max_num_batched_tokens": ExpressionName((("scheduler", "max_num_batched_tokens"),),
                                             lambda e, r: e.scheduler.max_num_batched_tokens),
    "speculative_method": ExpressionName((_METHOD,), lambda e, r: e.speculative.method),
    "num_speculative_tokens": ExpressionName((_K,), lambda e, r: e.speculative.num_speculative_tokens),
    "num_speculative_steps": ExpressionName((_K,), lambda e, r: e.speculative.num_speculative_tokens),
    # A uniform decode step schedules one verified token plus the drafts.
    "decode_query_len": ExpressionName((_K,), lambda e, r: e.speculative.decode_query_len),
    "num_lookahead_tokens": ExpressionName(
        (_METHOD, _K), lambda e, r: num_lookahead_tokens(e.speculative.method, e.speculative.num_speculative_tokens)),
    "num_blocks": ExpressionName((("kv_cache", "num_blocks"),), lambda e, r: e.kv_cache.num_blocks),
    "num_kv_cache_groups": ExpressionName((("kv_cache", "groups"),), lambda e, r: len(e.kv_cache.groups)),
    "tensor_parallel_size": ExpressionName((_TP,), lambda e, r: e.parallel.tensor_parallel_size),
    "data_parallel_size": ExpressionName((_DP,), lambda e, r: e.parallel.data_parallel_size),
    "pipeline_parallel_size": ExpressionName((_PP,), lambda e, r: e.parallel.pipeline_parallel_size),
    "pipeline_rank": ExpressionName((("parallel", "pipeline_rank"),), lambda e, r: e.parallel.pipeline_rank),
    # vLLM's world group: every rank of TP x PP x DP (parallel_state.init_distributed_environment)
    "world_size": ExpressionName((_TP, _PP, _DP), lambda e, r: (e.parallel.tensor_parallel_size
                                                                * e.parallel.pipeline_parallel_size
                                                                * e.parallel.data_parallel_size)),
    "is_last_pp_rank": ExpressionName((("parallel", "pipeline_rank"), _PP),
                                      lambda e, r: e.parallel.pipeline_rank == e.parallel.pipeline_parallel_size - 1),
    "num_sms": ExpressionName((("device", "num_sms"),), lambda e, r: e.device.num_sms),
    "device_capability": ExpressionName((("device", "capability"),), lambda e, r: e.device.capability_number),
    "device_name": ExpressionName((("device", "name"),), lambda e, r: e.device.name),
}

# The engine fields behind each name, so an error caused by a name's value can point at the line that set it.
EXPRESSION_FIELDS: dict[str, tuple[Path, ...]] = {name: row.fields for name, row in EXPRESSION_NAMES.items()}


def expression_names(engine: EngineFacts, release: str | None = None) -> dict:
    """Flat engine names usable in plan expressions; `release` is the vLLM release of the plan."""
    return {name: row.value(engine, release) for name, row in EXPRESSION_NAMES.items()}
