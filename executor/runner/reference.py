"""ReferenceRunner: a small but real paged-KV decoder runner behind the runner protocol.

In the spirit of nano-vllm. Each ``execute_model(step)`` finishes, adds and updates
requests, then runs the batch one of two ways, classified as vLLM does (token counts
alone, the rule #40746 is about): a batch in which every request schedules exactly
``decode_query_len = 1 + num_speculative_tokens`` tokens is a uniform decode batch
and takes the decode path, replaying a CUDA graph when its size (padded up to the
next captured size) was captured; anything else is a prefill / mixed batch, run
eagerly with varlen attention over the paged cache. ``sample_tokens(step)`` then
computes the logits of the rows that produce a token and samples them (sampler.py).

Steps are the plan's typed steps (planner.plan.steps), or serving-trace steps of the same
shape (executor/runner/trace.py): a step's ``requests`` may mix new requests
(``NewRequest``, with block ids) and cached ones (``CachedRequest``) and come with
``finished_req_ids``; a new request may carry its own ``prompt_token_ids`` and
``sampling_params``; a grammar bitmask may name its rows' ``req_ids``.

Over 400 lines: one runner's state (requests, KV blocks, the persistent batch) and the two ways it runs a
batch read the same fields; a test bench for the executor, kept whole so that it reads as one runner.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch

from executor.kernels.configs import cdiv
from planner.engine.facts import EngineFacts
from planner.plan.stages.runner_kernels import runner_facts
from planner.plan.steps import NewRequest

from . import kernels
from .model import AttentionMetadata, Model, ModelConfig
from .sampler import NgramDrafter, SampleBatch, Sampler, SamplingParams

HISTORY = 4  # tokens of context the bad-words check sees


@dataclass
class Request:
    req_id: str
    slot: int                      # row in the block table and the sampler's state
    prompt_token_ids: list[int]
    token_ids: list[int]           # prompt, then every accepted output token
    block_ids: list[list[int]]     # per KV-cache group
    params: SamplingParams
    num_computed_tokens: int = 0
    draft_token_ids: list[int] = field(default_factory=list)


@dataclass
class Batch:
    reqs: list[Request]
    num_scheduled: list[int]
    num_computed: list[int]
    drafts: list[list[int]]        # draft tokens each request verifies in this step
    input_ids: list[int]
    is_uniform_decode: bool
    logits_indices: list[int]      # token rows that produce logits (see `sampled`)
    sampled: list[int]             # requests (indices) whose rows those are, in order
    prompt_rows: list[tuple]       # (request index, token row, target token) for prompt logprobs

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)


class KVConnector:
    """Stands in for vLLM's KV connector: when on, it would ship the KV blocks of every
    finished request elsewhere (offload, disaggregated prefill). Warmup turns it off,
    as vLLM's warmup_kernels does, and must turn it back on even when a step fails."""

    def __init__(self):
        self.disabled = False
        self.shipped_blocks = 0

    def set_disabled(self, disabled: bool) -> None:
        self.disabled = disabled

    def request_finished(self, req: Request) -> None:
        if not self.disabled:
            self.shipped_blocks += sum(len(b) for b in req.block_ids)


class ReferenceRunner:
    def __init__(self, engine: EngineFacts, device: str = "cuda", seed: int = 0, num_layers: int = 2,
                 dtype: torch.dtype | None = None, use_cuda_graphs: bool | None = None):
        self.engine, self.device = engine, torch.device(device)
        self.cfg = ModelConfig.from_engine(engine, num_layers)
        model, sched, kv = engine.model, engine.scheduler, engine.kv_cache
        self.dtype = dtype or getattr(torch, model.dtype)
        self.num_spec = engine.speculative.num_speculative_tokens
        self.decode_query_len = engine.speculative.decode_query_len
        self.max_num_seqs, self.max_num_tokens = sched.max_num_seqs, sched.max_num_batched_tokens
        self.max_model_len, self.vocab_size = model.max_model_len, model.vocab_size
        self.kv_group = model.attention[0].kv_cache_group
        self.num_groups = len(kv.groups)
        self.page = kv.groups[self.kv_group].block_size
        self.num_blocks = kv.num_blocks
        # Sized as kernel_model.runner_kernels sizes them: the block-table width and the
        # token buffer are int arguments of the kernels, so part of their compile keys.
        facts = runner_facts(engine)
        self.max_blocks = facts.max_blocks

        self.model = Model(self.cfg, self.dtype, self.device, seed)
        cache = torch.zeros(num_layers, 2, self.num_blocks, self.page, self.cfg.num_kv_heads, self.cfg.head_size,
                            dtype=self.dtype, device=self.device)
        self.kv_caches = [(cache[i, 0], cache[i, 1]) for i in range(num_layers)]
        # Row max_num_seqs is the dummy request of CUDA-graph captures and padding: all
        # zeros, i.e. the null block 0, which no request is ever given.
        self.block_table_host = np.zeros((self.max_num_seqs + 1, self.max_blocks), dtype=np.int32)
        self.block_table = torch.zeros(self.block_table_host.shape, dtype=torch.int32, device=self.device)
        self.buffers = InputBuffers(facts.max_tokens,
                                    self.max_num_seqs, self.cfg.hidden_size, self.dtype, self.device)
        self.sampler = Sampler(self.vocab_size, self.max_num_seqs, self.num_spec, self.device,
                               eos_token_id=self.vocab_size - 1, seed=seed)
        self.drafter = NgramDrafter(self.num_spec) if self.num_spec else None
        if use_cuda_graphs is None:
            use_cuda_graphs = self.device.type == "cuda" and not engine.compilation.enforce_eager
        self.graphs = DecodeGraphs(self) if use_cuda_graphs else None
        self.kv_connector = KVConnector()
        self.requests: dict[str, Request] = {}
        self.free_slots = list(range(self.max_num_seqs - 1, -1, -1))
        self.stats = {"prefill_steps": 0, "decode_eager": 0, "decode_graph": 0, "samples": 0, "graph_captures": 0}
        self._pending: tuple | None = None
        self._params_cache: dict = {}

    # --- protocol ---------------------------------------------------------------------------

    @torch.inference_mode()
    def execute_model(self, step) -> None:
        self._pending = None
        self._finish(step.finished_req_ids)
        entries = step.requests
        if not entries:
            return
        added: list[str] = []
        try:
            self._update_requests(entries, step, added)
            batch = self._make_batch(entries, step)
            hidden = self._run(batch)
        except BaseException:
            for req_id in added:  # a failed step leaves no half-added request behind
                self._remove(req_id)
            raise
        rows = torch.tensor(batch.logits_indices + [r for _, r, _ in batch.prompt_rows], dtype=torch.int64)
        self._pending = (batch, hidden[rows.to(self.device)])

    @torch.inference_mode()
    def sample_tokens(self, step) -> dict | None:
        pending, self._pending = self._pending, None
        if pending is None:
            return None  # no forward to sample (a cleanup step, or the execute step failed)
        batch, hidden = pending
        n = len(batch.logits_indices)
        if not batch.sampled and not batch.prompt_rows:
            return {"tokens": {}, "logprobs": {}, "prompt_logprobs": {}}
        if step.sampling_params:  # the plan's: the params of every request (empty: each its own)
            params = self._params(step.sampling_params)
            for req in batch.reqs:
                req.params = params
        reqs = [batch.reqs[i] for i in batch.sampled]
        sample_batch = self._sample_batch(batch, reqs)
        bitmask = self._bitmask(step.grammar_bitmask, batch, reqs, sample_batch)
        out = self.sampler(self.model.compute_logits(hidden[:n]), sample_batch, bitmask)
        for req, tokens in zip(reqs, out.tokens):
            req.token_ids.extend(tokens)
            req.num_computed_tokens = len(req.token_ids) - 1
        self.sampler.count_outputs([r.slot for r in reqs], out.tokens)
        if self.drafter is not None:
            for req in reqs:
                req.draft_token_ids = self.drafter.propose(req.token_ids)
        self.stats["samples"] += 1
        return {"tokens": {r.req_id: t for r, t in zip(reqs, out.tokens)},
                "logprobs": {reqs[i].req_id: v for i, v in out.logprobs.items()},
                "prompt_logprobs": self._prompt_logprobs(batch, hidden[n:])}

    @torch.inference_mode()
    def capture_cudagraphs(self, step) -> None:
        q = step.decode_query_len or self.decode_query_len
        if q != self.decode_query_len:
            raise ValueError(f"the cudagraph step is for decode_query_len {q}, the engine's is "
                             f"{self.decode_query_len}")
        if self.graphs is None:
            return
        sizes = {s for s in step.uniform_decode_sizes
                 if s % q == 0 and s // q <= self.max_num_seqs and s <= self.buffers.max_tokens}
        self.graphs.capture(sorted(sizes, reverse=True), step.num_warmups or 1)

    def close(self) -> None:
        self._pending = None
        self.requests.clear()
        self.graphs = None
        self.kv_caches = self.model = self.sampler = self.buffers = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @contextlib.contextmanager
    def warmup_scope(self):
        """For a stage of synthetic batch steps: the KV connector off, as in vLLM's warmup;
        on exit, even when a step failed, the connector is back as it was and every request
        the steps added and did not finish is gone (its blocks are the plan's, not a user's)."""
        was_disabled, before = self.kv_connector.disabled, set(self.requests)
        self.kv_connector.set_disabled(True)
        try:
            yield self
        finally:
            self._pending = None
            for req_id in [r for r in self.requests if r not in before]:
                self._remove(req_id)
            self.kv_connector.set_disabled(was_disabled)

    # --- request state ------------------------------------------------------------------------

    def _finish(self, req_ids) -> None:
        for req_id in req_ids:
            req = self.requests.get(req_id)
            if req is not None:
                self.kv_connector.request_finished(req)
                self._remove(req_id)

    def _remove(self, req_id: str) -> None:
        req = self.requests.pop(req_id, None)
        if req is not None:
            self.block_table_host[req.slot] = 0
            self.free_slots.append(req.slot)

    def _update_requests(self, entries, step, added_ids: list[str]) -> None:
        added, touched = [], []
        for e in entries:
            if isinstance(e, NewRequest):
                req = self._add(e, step, added_ids)
                added.append(req)
                touched.append(req)
                continue
            req = self.requests.get(e.req_id)
            if req is None:
                raise ValueError(f"cached request {e.req_id!r} is unknown to the runner")
            req.num_computed_tokens = e.num_computed_tokens
            if e.new_block_ids:
                self._append_blocks(req, e.new_block_ids)
                touched.append(req)
        self.sampler.add_requests([r.slot for r in added], [r.prompt_token_ids for r in added])
        self._sync_block_table(touched)

    def _add(self, e: NewRequest, step, added_ids: list[str]) -> Request:
        """A new request: its prompt (its own, else the step's), a slot, its params and blocks;
        its id is in `added_ids` before its blocks are checked (a failed step removes it)."""
        self._remove(e.req_id)
        prompt = e.prompt_token_ids or step.prompt_token_ids
        if not prompt:
            raise ValueError(f"new request {e.req_id!r} has no prompt_token_ids")
        if not self.free_slots:
            raise ValueError(f"request {e.req_id!r}: more than max_num_seqs={self.max_num_seqs} requests")
        # num_computed_tokens > 0: a prefix-cache hit, whose first blocks hold KV another request computed.
        req = Request(e.req_id, self.free_slots.pop(), list(prompt), list(prompt),
                      [[] for _ in range(self.num_groups)], self._params(e.sampling_params), e.num_computed_tokens)
        self.requests[e.req_id] = req
        added_ids.append(e.req_id)
        self._append_blocks(req, e.block_ids)
        return req

    def _append_blocks(self, req: Request, block_ids) -> None:
        if len(block_ids) != self.num_groups:
            raise ValueError(f"request {req.req_id!r}: block ids for {len(block_ids)} KV groups, "
                             f"the engine has {self.num_groups}")
        for group, ids in enumerate(block_ids):
            if any(not 0 < b < self.num_blocks for b in ids):
                raise ValueError(f"request {req.req_id!r}: block ids must be in 1..{self.num_blocks - 1}")
            req.block_ids[group].extend(ids)
        row = req.block_ids[self.kv_group]
        if len(row) > self.max_blocks:
            raise ValueError(f"request {req.req_id!r}: {len(row)} blocks exceed max_model_len")
        self.block_table_host[req.slot, :len(row)] = row

    def _sync_block_table(self, reqs: list[Request]) -> None:
        """Copy the block-table rows of these requests to the device, up to the longest."""
        if not reqs:
            return
        slots = [r.slot for r in reqs]
        width = max(1, max(len(r.block_ids[self.kv_group]) for r in reqs))
        part = torch.from_numpy(self.block_table_host[slots, :width])
        self.block_table[torch.tensor(slots, device=self.device), :width] = part.to(self.device)

    def _params(self, params: dict | None) -> SamplingParams:
        key = repr(sorted((params or {}).items()))
        if key not in self._params_cache:
            self._params_cache[key] = SamplingParams.from_dict(params)
        return self._params_cache[key]

    # --- one step -------------------------------------------------------------------------------

    def _make_batch(self, entries, step) -> Batch:
        total = sum(e.num_scheduled_tokens for e in entries)
        if step.total_num_scheduled_tokens != total:
            raise ValueError(f"total_num_scheduled_tokens {step.total_num_scheduled_tokens} != {total}, "
                             "the sum over the requests")
        if total > self.buffers.max_tokens or len(entries) > self.max_num_seqs:
            raise ValueError(f"a batch of {len(entries)} requests and {total} tokens exceeds the engine's limits")
        batch = Batch([], [], [], [], [], False, [], [], [])
        for i, e in enumerate(entries):
            req = self.requests[e.req_id]
            scheduled, num_spec = e.num_scheduled_tokens, getattr(e, "num_spec_tokens", 0)
            computed = req.num_computed_tokens
            known = computed + scheduled - num_spec
            if len(req.block_ids[self.kv_group]) * self.page < computed + scheduled:
                raise ValueError(f"request {req.req_id!r}: {computed + scheduled} tokens do not fit its "
                                 f"{len(req.block_ids[self.kv_group])} blocks of {self.page}")
            self._align_tokens(req, known)
            drafts = (req.draft_token_ids + [req.token_ids[-1]] * num_spec)[:num_spec]
            start = len(batch.input_ids)
            batch.input_ids += req.token_ids[computed:known] + drafts
            batch.reqs.append(req)
            batch.num_scheduled.append(scheduled)
            batch.num_computed.append(computed)
            batch.drafts.append(drafts)
            if known >= len(req.prompt_token_ids):  # the prompt is done: this step samples
                batch.sampled.append(i)
                batch.logits_indices += range(start + scheduled - num_spec - 1, start + scheduled)
            if req.params.prompt_logprobs is not None:
                prompt = req.prompt_token_ids
                for t in range(computed, min(known, len(prompt) - 1)):
                    batch.prompt_rows.append((i, start + t - computed, prompt[t + 1]))
        batch.is_uniform_decode = all(s == self.decode_query_len for s in batch.num_scheduled)
        return batch

    def _align_tokens(self, req: Request, known: int) -> None:
        """The step, not the runner, says how many tokens a request has (its scheduler
        decided how many drafts were accepted): drop what it rejected, or repeat the last
        token where it accepted more than this runner did."""
        if len(req.token_ids) > known >= len(req.prompt_token_ids):
            del req.token_ids[known:]
        while len(req.token_ids) < known:
            req.token_ids.append(req.token_ids[-1])

    def _run(self, batch: Batch) -> torch.Tensor:
        T, R, q = batch.num_tokens, len(batch.reqs), self.decode_query_len
        padded = padded_size(self.graphs.sizes, T) if self.graphs and batch.is_uniform_decode else None
        num_tokens, num_reqs = (padded, padded // q) if padded else (T, R)
        buf = self.buffers
        dummy = self.max_num_seqs
        idx = [r.slot for r in batch.reqs] + [dummy] * (num_reqs - R)
        starts = np.concatenate(([0], np.cumsum(batch.num_scheduled))).tolist()
        buf.load(batch.input_ids + [0] * (num_tokens - T), idx, starts, batch.num_computed)
        if num_reqs > R:
            buf.seq_lens[R:num_reqs].zero_()
        kernels.prepare_inputs(buf.idx_mapping[:R], buf.query_start_loc[:R + 1], buf.num_computed[:R],
                               self.block_table, buf.positions, buf.slot_mapping, buf.seq_lens, T, num_tokens,
                               self.page)
        if padded:
            self.stats["decode_graph"] += 1
            return self.graphs.replay(padded)[:T]
        self.stats["decode_eager" if batch.is_uniform_decode else "prefill_steps"] += 1
        max_query_len = max(batch.num_scheduled)
        meta = buf.metadata(T, R, self.block_table, max_query_len, q, batch.is_uniform_decode)
        return self.model.forward(buf.input_ids[:T], self.kv_caches, meta)

    # --- sampling inputs ------------------------------------------------------------------------

    def _sample_batch(self, batch: Batch, reqs: list[Request]) -> SampleBatch:
        sb = SampleBatch([], [], [], [], [], [0])
        for i, req in zip(batch.sampled, reqs):
            drafts = batch.drafts[i]
            known = batch.num_computed[i] + batch.num_scheduled[i] - len(drafts)
            context = req.token_ids[:known]
            for j in range(len(drafts) + 1):
                sb.slots.append(req.slot)
                sb.params.append(req.params)
                sb.drafts.append(drafts[j] if j < len(drafts) else -1)
                sb.num_output.append(known + j - len(req.prompt_token_ids))
                sb.history.append(tuple((context + drafts[:j])[-HISTORY:]))
            sb.cu_rows.append(len(sb.slots))
        return sb

    def _bitmask(self, grammar, batch: Batch, reqs: list[Request], sb: SampleBatch):
        if not grammar:
            return None
        width = cdiv(self.vocab_size, 32)
        if grammar.width != width:
            raise ValueError(f"grammar bitmask width {grammar.width} != ceil(vocab_size / 32) = {width}")
        names = grammar.req_ids or [r.req_id for r in batch.reqs][:grammar.num_rows]
        row_of = {name: i for i, name in enumerate(names)}
        sb.bitmask_rows = [row_of.get(req.req_id, -1) for req, a, b in zip(reqs, sb.cu_rows, sb.cu_rows[1:])
                           for _ in range(b - a)]
        fill = -1 if grammar.fill is None else grammar.fill
        return torch.full((grammar.num_rows, width), fill, dtype=torch.int32, device=self.device)

    def _prompt_logprobs(self, batch: Batch, hidden: torch.Tensor, chunk: int = 1024) -> dict:
        out: dict = {}
        for start in range(0, len(batch.prompt_rows), chunk):
            rows = batch.prompt_rows[start:start + chunk]
            logprobs = self.model.compute_logits(hidden[start:start + len(rows)]).log_softmax(-1)
            targets = torch.tensor([t for _, _, t in rows], device=self.device)
            chosen = logprobs.gather(1, targets[:, None]).squeeze(1).tolist()
            for (i, _, target), value in zip(rows, chosen):
                out.setdefault(batch.reqs[i].req_id, []).append((target, value))
        return out


def padded_size(graph_sizes: list[int], num_tokens: int) -> int | None:
    """The captured size a uniform decode batch of num_tokens replays (sizes ascending), or None."""
    return next((s for s in graph_sizes if s >= num_tokens), None)


class InputBuffers:
    """Persistent device inputs, sliced from 0 each step (so pointers stay 16-byte aligned
    and CUDA graphs can read them)."""

    def __init__(self, max_tokens: int, max_reqs: int, hidden_size: int, dtype, device):
        self.max_tokens, self.device = max_tokens, device
        i32, i64 = dict(dtype=torch.int32, device=device), dict(dtype=torch.int64, device=device)
        self.input_ids = torch.zeros(max_tokens, **i64)
        self.positions = torch.zeros(max_tokens, **i64)
        self.slot_mapping = torch.full((max_tokens,), kernels.PAD_SLOT, **i64)
        self.query_start_loc = torch.zeros(max_reqs + 1, **i32)
        self.num_computed = torch.zeros(max_reqs, **i32)
        self.idx_mapping = torch.zeros(max_reqs, **i32)
        self.seq_lens = torch.zeros(max_reqs, **i32)
        self.hidden = torch.zeros(max_tokens, hidden_size, dtype=dtype, device=device)

    def load(self, input_ids, idx_mapping, query_start_loc, num_computed) -> None:
        for dst, values in ((self.input_ids, input_ids), (self.idx_mapping, idx_mapping),
                            (self.query_start_loc, query_start_loc), (self.num_computed, num_computed)):
            if values:
                dst[:len(values)].copy_(torch.tensor(values, dtype=dst.dtype), non_blocking=True)

    def metadata(self, num_tokens, num_reqs, block_table, max_query_len, q, is_decode) -> AttentionMetadata:
        return AttentionMetadata(self.positions[:num_tokens], self.slot_mapping[:num_tokens],
                                 self.seq_lens[:num_reqs], self.idx_mapping[:num_reqs], block_table,
                                 self.query_start_loc[:num_reqs + 1], max_query_len, q, is_decode)


class DecodeGraphs:
    """FULL CUDA graphs of the decode forward at uniform decode sizes (tokens), captured
    largest first into one shared memory pool; a batch pads up to the next size."""

    def __init__(self, runner: ReferenceRunner):
        self.runner = runner
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.sizes: list[int] = []
        self.pool = None
        self.replays = 0

    def capture(self, sizes: list[int], num_warmups: int = 1) -> None:
        r = self.runner
        buf, q = r.buffers, r.decode_query_len
        for size in sizes:
            if size in self.graphs:
                continue
            num_reqs = size // q
            buf.load([0] * size, [r.max_num_seqs] * num_reqs, list(range(0, size + 1, q)), [0] * num_reqs)
            kernels.prepare_inputs(buf.idx_mapping[:num_reqs], buf.query_start_loc[:num_reqs + 1],
                                   buf.num_computed[:num_reqs], r.block_table, buf.positions, buf.slot_mapping,
                                   buf.seq_lens, size, size, r.page)
            meta = buf.metadata(size, num_reqs, r.block_table, q, q, True)
            for _ in range(num_warmups):
                buf.hidden[:size] = r.model.forward(buf.input_ids[:size], r.kv_caches, meta)
            torch.cuda.synchronize(r.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                buf.hidden[:size] = r.model.forward(buf.input_ids[:size], r.kv_caches, meta)
            if self.pool is None:
                self.pool = graph.pool()
            self.graphs[size] = graph
            r.stats["graph_captures"] += 1
        self.sizes = sorted(self.graphs)

    def replay(self, size: int) -> torch.Tensor:
        self.graphs[size].replay()
        self.replays += 1
        return self.runner.buffers.hidden[:size]
