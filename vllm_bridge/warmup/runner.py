"""VllmWorkerRunner: the executor's ModelRunner protocol (executor.runner.protocol) on vLLM's worker.

Each batch step of the plan becomes the scheduler output vLLM's own scheduler would send, built
with vLLM's classes (vllm.v1.core.sched.output): a Prefill step is ``scheduled_new_reqs``
(NewRequestData with the plan's block ids and num_computed_tokens: a prefix-cache hit's cached
tokens, as the scheduler's NewRequestData.from_request takes them from the request; the whole
prompt in prompt_token_ids and prefill_token_ids, so a prompt longer than the scheduled tokens is a
chunked prefill the runner continues), a Decode step ``scheduled_cached_reqs``
(CachedRequestData: computed tokens, new block ids) with ``scheduled_spec_decode_tokens``, a
Cleanup step ``finished_req_ids``. They go through the worker's ``execute_model`` (as vLLM's own
warmup_kernels does, so pipeline parallelism is handled by vLLM), a Sample step through
``sample_tokens`` with a GrammarOutput where the plan has a bitmask. The CUDA-graph step sets the
plan's capture sizes on vLLM's compilation config and calls the model runner's capture_model.

vLLM is imported inside the methods: vllm_bridge is importable without it.
"""

from __future__ import annotations

import contextlib
import logging

from planner.plan.steps import Cleanup, Decode, Prefill, Sample

log = logging.getLogger("vllm.warmup_planner")

# The plan writes SamplingParams as plain data; vLLM's constructor spells two of them differently.
PARAM_NAMES = {"bad_words_token_ids": "_bad_words_token_ids"}


def sampling_params_by_prefill(steps) -> dict:
    """step id of each Prefill -> the sampling params of the Sample step after it (vLLM takes a
    request's params when the request is added, the plan writes them on the sample step)."""
    out, pending = {}, []
    for step in steps:
        if isinstance(step, Prefill):
            pending.append(step.id)
        elif isinstance(step, Sample) and pending:
            for step_id in pending:
                out[step_id] = dict(step.sampling_params)
            pending = []
    return out


def vllm_sampling_params(params: dict | None):
    """vLLM's SamplingParams from the plan's plain dict (logit_bias keys are token ids)."""
    from vllm import SamplingParams

    kwargs = {PARAM_NAMES.get(k, k): v for k, v in (params or {}).items()}
    if "logit_bias" in kwargs:
        kwargs["logit_bias"] = {int(t): float(b) for t, b in kwargs["logit_bias"].items()}
    if "_bad_words_token_ids" in kwargs:
        kwargs["_bad_words_token_ids"] = [list(ids) for ids in kwargs["_bad_words_token_ids"]]
    return SamplingParams(**kwargs)


def _lists(groups) -> tuple:
    """Block ids per KV-cache group as vLLM holds them: a tuple of lists."""
    return tuple(list(ids) for ids in groups)


class VllmWorkerRunner:
    """Runs a plan's batch and CUDA-graph steps on a live vLLM worker."""

    def __init__(self, worker, steps=()):
        self.worker = worker
        self.model_runner = worker.model_runner
        self._params = sampling_params_by_prefill(steps)
        self._last_req_ids: list[str] = []
        self._prompts: dict[str, list[int]] = {}   # req_id -> its prompt's token ids
        self._scheduled_before: set[str] = set()    # what the previous step scheduled (vLLM's prev_step_scheduled_req_ids)
        self.cudagraph_memory_bytes: int | None = None  # what capture_model returned, for vLLM's log

    # --- execute_model: Prefill, Decode, Cleanup -------------------------------------------------------

    def execute_model(self, step) -> None:
        self.worker.execute_model(self.scheduler_output(step))

    def scheduler_output(self, step):
        """The SchedulerOutput vLLM's scheduler would send for this step."""
        from vllm.v1.core.sched.output import SchedulerOutput

        out = SchedulerOutput.make_empty()
        if isinstance(step, Prefill):
            self._new_requests(out, step)
        elif isinstance(step, Decode):
            self._cached_requests(out, step)
        elif isinstance(step, Cleanup):
            out.finished_req_ids = set(step.finished_req_ids)
        else:
            raise TypeError(f"execute_model does not run {step.kind} steps")
        out.total_num_scheduled_tokens = step.total_num_scheduled_tokens
        if step.num_common_prefix_blocks is not None:
            out.num_common_prefix_blocks = list(step.num_common_prefix_blocks)
        if hasattr(out, "num_spec_tokens_to_schedule"):
            out.num_spec_tokens_to_schedule = self._num_spec_steps()
        self._scheduled_before = set(out.num_scheduled_tokens)  # as the scheduler keeps it for the next step
        return out

    def _new_requests(self, out, step) -> None:
        from vllm.v1.core.sched.output import NewRequestData

        params = vllm_sampling_params(self._params.get(step.id))
        reqs = []
        for r in step.requests:
            prompt = list(r.prompt_token_ids or step.prompt_token_ids)
            own = vllm_sampling_params(r.sampling_params) if r.sampling_params else params
            self._prompts[r.req_id] = prompt
            reqs.append(NewRequestData(req_id=r.req_id, prompt_token_ids=prompt, mm_features=[],
                                       sampling_params=own, pooling_params=None,
                                       block_ids=_lists(r.block_ids), num_computed_tokens=r.num_computed_tokens,
                                       lora_request=None, prefill_token_ids=prompt))
        out.scheduled_new_reqs = reqs
        out.num_scheduled_tokens = {r.req_id: r.num_scheduled_tokens for r in step.requests}
        self._last_req_ids = [r.req_id for r in step.requests]

    def _cached_requests(self, out, step) -> None:
        from vllm.v1.core.sched.output import CachedRequestData

        cached = CachedRequestData.make_empty()
        reqs = step.requests
        cached.req_ids = [r.req_id for r in reqs]
        cached.num_computed_tokens = [r.num_computed_tokens for r in reqs]
        cached.num_output_tokens = [1 if r.num_output_tokens is None else r.num_output_tokens for r in reqs]
        cached.new_block_ids = [None if r.new_block_ids is None else _lists(r.new_block_ids) for r in reqs]
        if hasattr(cached, "all_token_ids") and not self._v2_model_runner():
            cached.all_token_ids = self._all_token_ids(reqs, cached.num_output_tokens)
        out.scheduled_cached_reqs = cached
        out.num_scheduled_tokens = {r.req_id: r.num_scheduled_tokens for r in reqs}
        # Draft tokens are placeholders, as in vLLM's own warmup: [0] * num_spec_tokens.
        out.scheduled_spec_decode_tokens = {r.req_id: [0] * r.num_spec_tokens for r in reqs if r.num_spec_tokens}
        self._last_req_ids = list(cached.req_ids)

    def _all_token_ids(self, reqs, num_output_tokens) -> dict:
        """What vLLM's scheduler sends the V1 runner for a running request the previous step did not
        schedule (Scheduler._make_cached_request_data: req.all_token_ids, prompt and outputs): the V1
        runner re-adds it to its batch from them (with async scheduling it reads them, a KeyError
        without). A prefix-cache hit scheduled alone leaves its donor out of a step: serving_paths
        has such a step. The outputs are placeholders, as the plan's prompts are."""
        return {r.req_id: self._prompts.get(r.req_id, []) + [0] * n
                for r, n in zip(reqs, num_output_tokens) if r.req_id not in self._scheduled_before}

    def _v2_model_runner(self) -> bool:
        return bool(getattr(self.worker.vllm_config, "use_v2_model_runner", False))

    def _num_spec_steps(self) -> int:
        spec = getattr(self.worker.vllm_config, "speculative_config", None)
        return int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0

    # --- sample_tokens ----------------------------------------------------------------------------------

    def sample_tokens(self, step) -> None:
        self.worker.sample_tokens(self.grammar_output(step))

    def grammar_output(self, step):
        """vLLM's GrammarOutput for the step's bitmask (rows x words, filled), or None."""
        g = step.grammar_bitmask
        if g is None:
            return None
        import numpy as np
        from vllm.v1.core.sched.output import GrammarOutput

        req_ids = list(g.req_ids) if g.req_ids else list(self._last_req_ids)
        bitmask = np.full((g.num_rows, g.width), -1 if g.fill is None else g.fill, dtype=np.int32)
        return GrammarOutput(structured_output_request_ids=req_ids, grammar_bitmask=bitmask)

    # --- capture_cudagraphs -------------------------------------------------------------------------------

    def capture_cudagraphs(self, step) -> None:
        """vLLM captures at the plan's sizes: they become the compilation config's capture sizes
        (vLLM keeps them ascending), then the model runner's own capture_model runs."""
        config = self.worker.vllm_config.compilation_config
        # FULL_DECODE_ONLY has no mixed sizes: vLLM's capture sizes are then the decode sizes.
        sizes = sorted(set(step.sizes or step.uniform_decode_sizes))
        had = sorted(config.cudagraph_capture_sizes or [])
        if had != sizes:
            log.warning("warmup-planner: capturing the plan's %d CUDA-graph sizes instead of vLLM's %d",
                        len(sizes), len(had))
        config.cudagraph_capture_sizes = sizes
        config.max_cudagraph_capture_size = max(sizes)
        self.cudagraph_memory_bytes = self.model_runner.capture_model() or 0

    @contextlib.contextmanager
    def warmup_scope(self):
        """The KV connector is off for synthetic batches (as vLLM's warmup_kernels does), and back on after."""
        connector = getattr(self.model_runner, "kv_connector", None)
        setter = getattr(connector, "set_disabled", None)
        if setter is not None:
            setter(True)
        try:
            yield
        finally:
            if setter is not None:
                setter(False)

    def close(self) -> None:
        self._last_req_ids = []
        self._prompts.clear()
        self._scheduled_before = set()
