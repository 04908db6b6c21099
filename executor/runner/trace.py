"""A seeded serving trace: Poisson arrivals, a minimal scheduler, steps in the plan's format.

``TraceScheduler(engine, TraceConfig(...))`` yields ``(execute_step, sample_step)``
pairs that any runner of the protocol executes exactly like the plan's batch steps: a
``TraceBatch`` (a scheduler step whose requests may mix new and running ones) and a
plan ``Sample`` step.
It schedules as vLLM's v1 scheduler does, in miniature: running requests first
(decodes of ``1 + num_speculative_tokens`` tokens, or the next prefill chunk), then
waiting ones, within ``max_num_seqs`` and a token budget of
``max_num_batched_tokens`` (chunked prefill), so steps mix prefill and decode.
Blocks come from a free list of ``num_blocks`` (block 0 is the null block); a request
is admitted only when its whole length fits in the free blocks, so no step ever
preempts. Finished requests free their blocks and are named in the next step's
``finished_req_ids``.

The trace is open loop: how many draft tokens are accepted is drawn from the trace's
own RNG (``acceptance``), not read back from the runner, so the same seed gives the
same steps on any runner, warmed or not.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from kernel_model.arith import cdiv
from planner.engine.facts import EngineFacts
from planner.plan.steps import CachedRequest, GrammarBitmask, NewRequest, Sample

# Per-request sampling: (weight, params). Greedy, nucleus, top-k with a repetition
# penalty, and one that uses every processor (for_sampler_warmup-like).
SAMPLING_MIX = (
    (0.35, {"temperature": 0.0}),
    (0.35, {"temperature": 0.7, "top_p": 0.95}),
    (0.15, {"temperature": 1.0, "top_k": 40, "repetition_penalty": 1.1}),
    (0.15, {"temperature": 0.8, "top_p": 0.9, "top_k": 50, "min_p": 0.05, "frequency_penalty": 0.3,
            "presence_penalty": 0.2, "min_tokens": 4, "logit_bias": {"7": 1.0}, "logprobs": 2}),
)
GRAMMAR_FILL = 0x55555555  # the bitmask a structured-output request gets: every even token id


@dataclass(frozen=True)
class TraceConfig:
    num_steps: int = 500
    seed: int = 0
    arrival_rate: float = 0.5        # new requests per step (Poisson)
    initial_requests: int = 32       # a burst at step 0: the first step is a large prefill
    prompt_median: int = 512         # lognormal prompt lengths (ShareGPT-like spread)
    prompt_sigma: float = 1.0
    output_median: int = 128
    output_sigma: float = 0.8
    acceptance: float = 0.7          # per-draft acceptance probability
    structured_fraction: float = 0.1
    prompt_logprobs_fraction: float = 0.02


@dataclass(frozen=True)
class TraceBatch:
    """A scheduler step of the trace: like the plan's prefill and decode steps, but its
    requests may mix new ones (NewRequest, with their own prompt and sampling params) and
    running ones (CachedRequest), and it names the requests finished since the last step."""

    id: str
    stage: str
    kind: str                        # prefill, decode or mixed
    requests: tuple
    total_num_scheduled_tokens: int
    num_common_prefix_blocks: tuple
    finished_req_ids: tuple
    prompt_token_ids: None = None    # every new request has its own
    runner_method = "execute_model"


@dataclass
class TraceRequest:
    req_id: str
    prompt: list[int]
    output_len: int
    params: dict
    structured: bool
    num_computed: int = 0
    num_output: int = 0
    blocks: list[int] = field(default_factory=list)
    reserved: int = 0

    @property
    def prefill_left(self) -> int:
        return max(0, len(self.prompt) - self.num_computed)


class TraceScheduler:
    def __init__(self, engine: EngineFacts, config: TraceConfig = TraceConfig()):
        self.cfg = config
        model, sched, kv = engine.model, engine.scheduler, engine.kv_cache
        self.vocab, self.max_model_len = model.vocab_size, model.max_model_len
        self.max_seqs, self.budget = sched.max_num_seqs, sched.max_num_batched_tokens
        self.k = engine.speculative.num_speculative_tokens
        self.num_groups = len(kv.groups)
        group = model.attention[0].kv_cache_group if model.attention else 0
        self.page = kv.groups[group].block_size
        self.free = deque(range(1, kv.num_blocks))
        self.unreserved = kv.num_blocks - 1
        self.rng = np.random.default_rng(config.seed)
        self.waiting: deque[TraceRequest] = deque()
        self.running: list[TraceRequest] = []
        self.finished: list[str] = []
        self.next_id = 0

    def __iter__(self):
        self._arrive(self.cfg.initial_requests)
        for i in range(self.cfg.num_steps):
            entries = self._schedule()
            while not entries:  # idle: let time pass until someone arrives
                self._arrive(self.rng.poisson(self.cfg.arrival_rate))
                entries = self._schedule()
            yield self._steps(i, entries)
            self._arrive(self.rng.poisson(self.cfg.arrival_rate))

    # --- requests ---

    def _arrive(self, n: int) -> None:
        c = self.cfg
        weights = np.array([w for w, _ in SAMPLING_MIX])
        for _ in range(int(n)):
            limit = self.max_model_len - self.k - 2
            prompt_len = int(np.clip(self.rng.lognormal(math.log(c.prompt_median), c.prompt_sigma), 2, limit - 1))
            output_len = int(np.clip(self.rng.lognormal(math.log(c.output_median), c.output_sigma), 1,
                                     limit - prompt_len))
            params = dict(SAMPLING_MIX[self.rng.choice(len(SAMPLING_MIX), p=weights / weights.sum())][1])
            if self.rng.random() < c.prompt_logprobs_fraction:
                params["prompt_logprobs"] = 1
            prompt = self.rng.integers(0, self.vocab - 1, prompt_len).tolist()
            self.waiting.append(TraceRequest(f"trace-{self.next_id}", prompt, output_len, params,
                                             bool(self.rng.random() < c.structured_fraction)))
            self.next_id += 1

    def _blocks_for(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.page)

    def _grow(self, req: TraceRequest, num_tokens: int) -> list[int]:
        need = self._blocks_for(num_tokens) - len(req.blocks)
        new = [self.free.popleft() for _ in range(max(need, 0))]
        req.blocks += new
        return new

    def _release(self, req: TraceRequest) -> None:
        self.free.extend(req.blocks)
        self.unreserved += req.reserved
        self.running.remove(req)
        self.finished.append(req.req_id)

    # --- one step ---

    def _schedule(self) -> list[tuple[TraceRequest, object]]:
        budget, entries = self.budget, []
        for req in self.running:
            if req.prefill_left:
                n, spec = min(req.prefill_left, budget), 0
            else:
                spec = min(self.k, self.max_model_len - req.num_computed - 2)
                n = 1 + spec
            if n == 0 or n > budget:
                continue
            new = self._grow(req, req.num_computed + n)
            entries.append((req, CachedRequest(req.req_id, req.num_computed, n, spec, req.num_output,
                                               self._groups(new) if new else None)))
            budget -= n
        return entries + self._admit(budget)

    def _admit(self, budget: int) -> list[tuple[TraceRequest, object]]:
        """Waiting requests that fit, first come first served: their first prefill chunk."""
        entries = []
        while self.waiting and len(self.running) < self.max_seqs and budget > 0:
            req = self.waiting[0]
            need = self._blocks_for(len(req.prompt) + req.output_len + self.k)
            if need > self.unreserved:
                break
            self.waiting.popleft()
            req.reserved, self.unreserved = need, self.unreserved - need
            self.running.append(req)
            n = min(len(req.prompt), budget)
            entries.append((req, NewRequest(req.req_id, n, self._groups(self._grow(req, n)), tuple(req.prompt),
                                            req.params)))
            budget -= n
        return entries

    def _groups(self, blocks: list[int]) -> tuple:
        # Only the attention group's blocks are modelled; other groups get the same ids.
        return tuple(tuple(blocks) for _ in range(self.num_groups))

    def _steps(self, i: int, entries) -> tuple[TraceBatch, Sample]:
        new = sum(isinstance(e, NewRequest) for _, e in entries)
        kind = "prefill" if new == len(entries) else "decode" if new == 0 else "mixed"
        total = sum(e.num_scheduled_tokens for _, e in entries)
        execute = TraceBatch(f"trace/step-{i}", "trace", kind, tuple(e for _, e in entries), total,
                             (0,) * self.num_groups, tuple(self.finished))
        self.finished = []
        sampled = [req for req, e in entries if self._advance(req, e)]
        structured = tuple(r.req_id for r in sampled if r.structured)
        grammar = GrammarBitmask(len(structured), cdiv(self.vocab, 32), GRAMMAR_FILL, structured) if structured else None
        # sampling_params {}: every request keeps its own
        sample = Sample(f"trace/sample-{i}", "trace", grammar_bitmask=grammar, sampling_params={}, features=())
        for req in [r for r in sampled if r.num_output >= r.output_len]:
            self._release(req)
        return execute, sample

    def _advance(self, req: TraceRequest, entry) -> bool:
        """Apply the step to the scheduler's view; True when the request sampled a token."""
        n, spec = entry.num_scheduled_tokens, getattr(entry, "num_spec_tokens", 0)
        if req.prefill_left:
            req.num_computed += n
            if req.prefill_left:
                return False
            req.num_output += 1
            return True
        accepted = 0
        while accepted < spec and self.rng.random() < self.cfg.acceptance:
            accepted += 1
        req.num_computed += 1 + accepted
        req.num_output += 1 + accepted
        return True


def percentile(values, q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if len(values) else float("nan")


def run_trace(runner, engine: EngineFacts, config: TraceConfig = TraceConfig(), on_step=None, sync=None) -> dict:
    """Execute the trace on `runner`; per-step wall time in seconds (synchronized by `sync`)."""
    latencies, kinds, tokens = [], [], []
    for i, (execute, sample) in enumerate(TraceScheduler(engine, config)):
        start = time.perf_counter()
        runner.execute_model(execute)
        runner.sample_tokens(sample)
        if sync is not None:
            sync()
        latencies.append(time.perf_counter() - start)
        kinds.append(execute.kind)
        tokens.append(execute.total_num_scheduled_tokens)
        if on_step is not None:
            on_step(i, execute, latencies[-1])
    return {"latency_s": latencies, "kinds": kinds, "num_tokens": tokens}
