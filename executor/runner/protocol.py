"""The protocol between the executor and a model runner, shaped like vLLM's worker.

The executor hands each batch step of an expanded plan to a runner exactly as the
plan wrote it (plain dicts; schemas/expanded-plan.schema.json):

- ``execute_model(step)`` for ``prefill``, ``decode`` and ``cleanup`` steps: new
  requests with prompt tokens and block ids per KV group, cached requests with
  computed-token counts, draft tokens and new block ids, finished request ids;
- ``sample_tokens(step)`` for ``sample`` steps, whose ``grammar_bitmask`` is
  ``{num_rows, width, fill}`` or None and whose ``sampling_params`` apply to every
  request of the batch;
- ``capture_cudagraphs(step)`` for the ``cudagraph`` step (sizes largest first);
- ``close()`` frees everything the runner allocated.

Optional: ``warmup_scope()``, a context manager around the batch steps of one plan
stage. A runner with a KV connector (or other serving-side state) turns it off inside
and must restore it, and free every request the stage added, in a ``finally``: also
when a step fails. Executors call it when the runner has it.

Serving traces (executor.runner.trace) use the same dicts, with extensions a plan
never needs: a step's ``requests`` may mix new entries (``block_ids``) and cached
ones (``num_computed_tokens``) and come with ``finished_req_ids``; a new entry may
carry its own ``prompt_token_ids`` and ``sampling_params`` (then a sample step's
``sampling_params`` is ``{}``: every request keeps its own); a grammar bitmask may
name the ``req_ids`` of its rows.

An adapter for a real engine is a thin translation of these dicts into the
engine's own scheduler output; the reference runner (executor.runner.reference)
is a small real paged-KV decoder that implements it directly.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class ModelRunner(Protocol):
    def execute_model(self, step: dict) -> None: ...

    def sample_tokens(self, step: dict) -> None: ...

    def capture_cudagraphs(self, step: dict) -> None: ...

    def close(self) -> None: ...
