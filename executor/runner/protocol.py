"""The protocol between the executor and a model runner, shaped like vLLM's worker.

The executor hands each batch step of an expanded plan to a runner exactly as the
plan wrote it, as the typed steps of planner.plan.steps:

- ``execute_model(step)`` for ``Prefill``, ``Decode`` and ``Cleanup`` steps, which all
  read as a scheduler step: ``requests`` (``NewRequest``: prompt tokens and block ids
  per KV group; ``CachedRequest``: computed-token count, draft tokens, new block ids),
  ``total_num_scheduled_tokens``, ``prompt_token_ids`` (the prompt of every new request,
  where the step has one) and ``finished_req_ids``;
- ``sample_tokens(step)`` for ``Sample`` steps, whose ``grammar_bitmask`` is a
  ``GrammarBitmask`` or None and whose ``sampling_params`` apply to every request of
  the batch;
- ``capture_cudagraphs(step)`` for the ``CudaGraph`` step (sizes largest first);
- ``close()`` frees everything the runner allocated.

Each step names the method that runs it (``runner_method``).

Optional: ``warmup_scope()``, a context manager around the batch steps of one plan
stage. A runner with a KV connector (or other serving-side state) turns it off inside
and must restore it, and free every request the stage added, in a ``finally``: also
when a step fails. Executors call it when the runner has it.

Serving traces (executor.runner.trace) hand the runner steps of the same shape that a
plan never needs: a step's ``requests`` may mix new and running requests and come with
``finished_req_ids``; a new request may carry its own ``prompt_token_ids`` and
``sampling_params`` (then a sample step's ``sampling_params`` is ``{}``: every request
keeps its own); a grammar bitmask may name the ``req_ids`` of its rows.

An adapter for a real engine is a thin translation of these records into the
engine's own scheduler output; the reference runner (executor.runner.reference)
is a small real paged-KV decoder that implements it directly.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class ModelRunner(Protocol):
    def execute_model(self, step) -> None: ...

    def sample_tokens(self, step) -> None: ...

    def capture_cudagraphs(self, step) -> None: ...

    def close(self) -> None: ...
