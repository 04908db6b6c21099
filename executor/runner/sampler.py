"""Sampling: every SamplingParams feature, the grammar bitmask, rejection sampling, an n-gram drafter.

Order, as in vLLM: grammar bitmask; logit bias, bad words and min_tokens (sparse,
built on the host); repetition / frequency / presence penalties and temperature
(Triton); min_p, top_k, top_p (torch); then a Gumbel-max draw (Triton), or the
argmax for temperature 0. With draft tokens the rejection sampler (Triton) accepts
draft j with probability min(1, p/q); an n-gram draft is one token with q = 1, so
that is p(draft), and a rejected draft is replaced by a draw from the residual
max(p - q, 0), which is p without the draft token. Logprobs are of the raw logits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import torch

from . import kernels


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    logit_bias: dict = field(default_factory=dict)
    bad_words_token_ids: list = field(default_factory=list)
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    seed: int | None = None

    @classmethod
    def from_dict(cls, params: dict | None) -> "SamplingParams":
        params = dict(params or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"unknown sampling parameters {unknown}; known: {sorted(known)}")
        if "logit_bias" in params:
            params["logit_bias"] = {int(t): float(b) for t, b in (params["logit_bias"] or {}).items()}
        if (params.get("top_k") or 0) < 0:
            params["top_k"] = 0  # vLLM spells "off" as -1
        return cls(**params)


@dataclass
class SampleBatch:
    """What the sampler needs per logits row (host lists); requests own consecutive rows."""
    slots: list[int]            # persistent state row (penalty counts, prompt mask)
    params: list[SamplingParams]
    drafts: list[int]           # draft token this row verifies, -1 for a bonus or plain row
    num_output: list[int]       # tokens generated before this row's token (min_tokens)
    history: list[tuple]        # the last few tokens before this row's token (bad words)
    cu_rows: list[int]          # request i owns rows cu_rows[i]:cu_rows[i+1]
    bitmask_rows: list[int] | None = None  # grammar bitmask row of each row, -1 for none


@dataclass
class SamplerOutput:
    tokens: list[list[int]]     # per request: accepted drafts, then one sampled token
    logprobs: dict = field(default_factory=dict)  # request index -> [(token, logprob, top ids, top logprobs)]


class Sampler:
    def __init__(self, vocab_size: int, max_num_seqs: int, max_spec: int, device, eos_token_id: int,
                 seed: int = 0):
        self.vocab_size, self.max_spec, self.device = vocab_size, max_spec, torch.device(device)
        self.eos_token_id = eos_token_id
        self.output_counts = torch.zeros(max_num_seqs, vocab_size, dtype=torch.int32, device=self.device)
        self.prompt_mask = torch.zeros(max_num_seqs, vocab_size, dtype=torch.uint8, device=self.device)
        self.rng = torch.Generator(device="cpu").manual_seed(seed)

    # --- per-request state ---

    def add_requests(self, slots: list[int], prompts: list[list[int]]) -> None:
        if not slots:
            return
        rows = torch.tensor(slots, dtype=torch.int64, device=self.device)
        self.output_counts.index_fill_(0, rows, 0)
        self.prompt_mask.index_fill_(0, rows, 0)
        r = [s for s, p in zip(slots, prompts) for _ in p]
        t = [tok for p in prompts for tok in p]
        if t:
            self.prompt_mask[self._t(r), self._t(t)] = 1

    def count_outputs(self, slots: list[int], tokens: list[list[int]]) -> None:
        r = [s for s, toks in zip(slots, tokens) for _ in toks]
        t = [tok for toks in tokens for tok in toks]
        if t:
            self.output_counts.index_put_((self._t(r), self._t(t)),
                                          torch.ones(len(t), dtype=torch.int32, device=self.device),
                                          accumulate=True)

    # --- sampling ---

    def __call__(self, logits: torch.Tensor, batch: SampleBatch, bitmask: torch.Tensor | None = None,
                 ) -> SamplerOutput:
        R = logits.shape[0]
        p = batch.params
        want_logprobs = [i for i, sp in enumerate(p) if sp.logprobs is not None]
        raw_logprobs = logits[self._t(want_logprobs)].log_softmax(-1) if want_logprobs else None
        if bitmask is not None and batch.bitmask_rows is not None:
            kernels.apply_bitmask(logits, bitmask, self._t(batch.bitmask_rows, torch.int32))
        self._apply_sparse(logits, batch)
        temperature = self._t([sp.temperature for sp in p], torch.float32)
        kernels.apply_penalties_and_temperature(
            logits, self._t(batch.slots, torch.int32), temperature,
            self._t([sp.repetition_penalty for sp in p], torch.float32),
            self._t([sp.frequency_penalty for sp in p], torch.float32),
            self._t([sp.presence_penalty for sp in p], torch.float32),
            self.output_counts, self.prompt_mask)
        logits = self._truncate(logits, p)
        seeds = torch.randint(0, 2**31 - 1, (R,), generator=self.rng, dtype=torch.int64).to(self.device)
        drafts = self._t(batch.drafts, torch.int32)
        sampled = torch.empty(R, dtype=torch.int32, device=self.device)
        kernels.gumbel_sample(logits, temperature, seeds, drafts, sampled)
        cu_rows = self._t(batch.cu_rows, torch.int32)
        if any(d >= 0 for d in batch.drafts):
            accept = self._accept_probs(logits, drafts, temperature)
            uniforms = torch.rand(R, generator=self.rng).to(self.device)
            out, num = kernels.rejection_sample(drafts, accept, uniforms, sampled, cu_rows, self.max_spec)
            out, num = out.tolist(), num.tolist()
            tokens = [row[:n] for row, n in zip(out, num)]
        else:
            flat = sampled.tolist()
            tokens = [[flat[batch.cu_rows[i + 1] - 1]] for i in range(len(batch.cu_rows) - 1)]
        output = SamplerOutput(tokens=tokens)
        if want_logprobs:
            output.logprobs = self._logprobs(raw_logprobs, want_logprobs, batch, tokens)
        return output

    def _accept_probs(self, logits, drafts, temperature) -> torch.Tensor:
        probs = torch.softmax(logits, dim=-1)
        safe = drafts.clamp(min=0).long()[:, None]
        p = probs.gather(1, safe).squeeze(1)
        greedy = (logits.argmax(-1, keepdim=True) == safe).squeeze(1).float()
        return torch.where(temperature > 0, p, greedy).contiguous()

    def _apply_sparse(self, logits, batch: SampleBatch) -> None:
        """Logit bias (added), bad words and min_tokens (banned): a few (row, token) pairs."""
        bias_r, bias_t, bias_v, ban_r, ban_t = [], [], [], [], []
        for r, sp in enumerate(batch.params):
            for tok, value in sp.logit_bias.items():
                bias_r.append(r), bias_t.append(tok), bias_v.append(value)
            for word in sp.bad_words_token_ids:
                prefix = tuple(word[:-1])
                if not prefix or tuple(batch.history[r][-len(prefix):]) == prefix:
                    ban_r.append(r), ban_t.append(word[-1])
            if batch.num_output[r] < sp.min_tokens:
                ban_r.append(r), ban_t.append(self.eos_token_id)
        if bias_r:
            logits.index_put_((self._t(bias_r), self._t(bias_t)), self._t(bias_v, torch.float32), accumulate=True)
        if ban_r:
            logits[self._t(ban_r), self._t(ban_t)] = float("-inf")

    def _truncate(self, logits, params) -> torch.Tensor:
        """min_p, then top_k and top_p, on the temperature-scaled logits (greedy rows unaffected)."""
        sampling = [sp.temperature > 0 for sp in params]
        min_p = [sp.min_p if s else 0.0 for sp, s in zip(params, sampling)]
        if any(min_p):
            probs = torch.softmax(logits, dim=-1)
            limit = probs.amax(-1, keepdim=True) * self._t(min_p, torch.float32)[:, None]
            logits = logits.masked_fill(probs < limit, float("-inf"))
        top_k = [sp.top_k if s and 0 < sp.top_k < self.vocab_size else 0 for sp, s in zip(params, sampling)]
        if any(top_k):
            k = self._t(top_k)
            values = logits.topk(max(top_k), dim=-1).values
            limit = values.gather(1, (k.clamp(min=1) - 1)[:, None])
            limit = torch.where(k[:, None] > 0, limit, torch.full_like(limit, float("-inf")))
            logits = logits.masked_fill(logits < limit, float("-inf"))
        top_p = [sp.top_p if s else 1.0 for sp, s in zip(params, sampling)]
        if any(x < 1.0 for x in top_p):
            ordered, index = logits.sort(dim=-1)
            cum = ordered.softmax(dim=-1).cumsum(dim=-1)
            drop = cum <= 1.0 - self._t(top_p, torch.float32)[:, None]
            drop[:, -1] = False
            logits = torch.empty_like(logits).scatter_(1, index, ordered.masked_fill(drop, float("-inf")))
        return logits.contiguous()

    def _logprobs(self, raw, rows, batch: SampleBatch, tokens) -> dict:
        """Per request that asked: (token, its logprob, top ids, top logprobs) for each token it got."""
        req_of_row = np.searchsorted(np.asarray(batch.cu_rows), np.asarray(rows), side="right") - 1
        picked, keep = [], []
        for i, (r, req) in enumerate(zip(rows, req_of_row.tolist())):
            j = r - batch.cu_rows[req]
            if j < len(tokens[req]):  # rows after the first rejected draft produced no token
                picked.append(tokens[req][j])
                keep.append((i, req, r))
        if not keep:
            return {}
        index = self._t([i for i, _, _ in keep])
        chosen = raw[index].gather(1, self._t(picked)[:, None]).squeeze(1).tolist()
        n = max(batch.params[r].logprobs for _, _, r in keep)
        top = raw[index].topk(n, dim=-1) if n else None
        top_ids, top_values = (top.indices.tolist(), top.values.tolist()) if top else ([[]] * len(keep),) * 2
        out: dict = {}
        for k, (_, req, r) in enumerate(keep):
            n_r = batch.params[r].logprobs
            out.setdefault(req, []).append((picked[k], chosen[k], top_ids[k][:n_r], top_values[k][:n_r]))
        return out

    def _t(self, values, dtype=torch.int64) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype).to(self.device, non_blocking=True)


class NgramDrafter:
    """Propose the tokens that followed the latest earlier occurrence of the last n tokens
    (n from max_n down to min_n), within the last `window` tokens (vLLM's ngram method)."""

    def __init__(self, num_speculative_tokens: int, min_n: int = 1, max_n: int = 3, window: int = 1024):
        self.k, self.min_n, self.max_n, self.window = num_speculative_tokens, min_n, max_n, window

    def propose(self, tokens: list[int]) -> list[int]:
        seq = np.asarray(tokens[-self.window:], dtype=np.int64)
        for n in range(self.max_n, self.min_n - 1, -1):
            if len(seq) <= n:
                continue
            windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)
            hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
            if len(hits):
                start = int(hits[-1]) + n
                return seq[start:start + self.k].tolist()
        return []
