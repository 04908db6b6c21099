"""synthetic_batches: vLLM's `warmup_kernels` as explicit scheduler steps.

NOTE: the algorithm of vLLM's `warmup_kernels` (vllm/v1/worker/gpu/warmup.py): vLLM @
b35468652 (PR #36280) with the PR #40746 fix (e9f331d72), and its variant at vLLM main @
017e9f4448b7:
  1. prefill: num_reqs new requests of prompt_len tokens, blocks from 1 (0 is
     the null block), allocated sequentially per request and per KV group;
  2. sample: every sampling feature, plus an all-ones grammar bitmask on the
     last pipeline rank (not for pooling models);
  3. decode: one step of all requests (`single`), or PR #49903's spec / non-spec
     subsets (`subsets`), each followed by a sample step without grammar;
  4. cleanup: every request finished.
prompt_len must exceed decode_query_len, or the engine classifies the prefill
as a uniform decode batch and never warms the prefill path (#40746).
"""

from __future__ import annotations

from ...engine.facts import EngineFacts, KvCacheGroup
from ...limits import MAX_REQUESTS_PER_STEP
from ..expr import cdiv
from ..steps import CachedRequest, Cleanup, Decode, GrammarBitmask, NewRequest, Prefill, Sample
from .scope import Scope

# SamplingParams.for_sampler_warmup() (vllm/sampling_params.py, vLLM 017e9f4448b7; unchanged
# since PR #35172): every sampler feature at once.
FOR_SAMPLER_WARMUP = {
    "temperature": 0.9, "top_p": 0.9, "top_k": 50, "min_p": 0.1,
    "frequency_penalty": 0.5, "presence_penalty": 0.5, "repetition_penalty": 1.2,
    "min_tokens": 2, "logit_bias": {"0": -1.0, "1": 0.5},
    "bad_words_token_ids": [[0], [1, 2]], "logprobs": 5, "prompt_logprobs": 1,
}


def req_id(i: int) -> str:
    return f"_warmup_{i}_"


GREEDY = {"temperature": 0}  # SamplingParams(temperature=0): vLLM 0.33's second pass


def expand(scope: Scope) -> list:
    """One warmup_kernels sequence; with `greedy_pass`, the same sequence again at temperature 0
    (vLLM 0.33 `warmup_kernels` under speculative decoding), its block ids again from 1."""
    steps = expand_pass(scope, "", scope.params.get("sampling_params", FOR_SAMPLER_WARMUP))
    greedy = scope.value("greedy_pass", raw=scope.params.get("greedy_pass", False))
    if not isinstance(greedy, bool):
        raise scope.stage.where("greedy_pass").error(f"expected true or false, got {greedy!r}")
    if greedy:
        steps += expand_pass(scope, "greedy-", GREEDY)
    return steps


def expand_pass(scope: Scope, prefix: str, sampling: dict) -> list:
    names, engine = scope.names, scope.engine
    prompt_len = scope.integer("prompt_len")
    decode_len = scope.integer("decode_len", prompt_len=prompt_len)
    count = BlockCounter(engine.facts, names, scope.params["reserve_lookahead"])
    max_blocks_per_req = sum(count(decode_len, g) for g in count.groups)
    num_reqs = scope.integer("num_reqs", prompt_len=prompt_len, decode_len=decode_len,
                             max_blocks_per_req=max_blocks_per_req)
    scope.count_limit("num_reqs", "the synthetic batch", num_reqs, MAX_REQUESTS_PER_STEP)
    scope.count_limit("prompt_len", "each prompt", prompt_len)
    scope.count_limit("decode_len", "the block ids of the batch", num_reqs * max_blocks_per_req)
    alloc = BlockAllocator()
    held = [[count(prompt_len, g) for g in count.groups] for _ in range(num_reqs)]
    steps = [prefill_step(scope, prefix + "prefill", prompt_len, held, alloc, len(count.groups))]
    if names["is_pooling_model"]:
        return steps + [cleanup_step(scope, prefix + "cleanup", num_reqs)]
    grammar = None
    if scope.flag("grammar_bitmask"):
        rows = scope.integer("grammar_rows", raw=scope.params.get("grammar_rows", "num_reqs"), num_reqs=num_reqs)
        grammar = GrammarBitmask(rows, cdiv(names["vocab_size"], 32), -1)
    steps.append(sample_step(scope, prefix + "sample", sampling, grammar))
    computed = [prompt_len] * num_reqs
    for n, subset in enumerate(decode_subsets(scope.params["decode_steps"], num_reqs, names), 1):
        steps.append(decode_step(scope, f"{prefix}decode-{n}", subset, computed, held, count, alloc))
        steps.append(sample_step(scope, f"{prefix}sample-{n + 1}", sampling, None))
    return steps + [cleanup_step(scope, prefix + "cleanup", num_reqs)]


class BlockCounter:
    """Blocks a request of n tokens holds in one KV group.

    Without `reserve_lookahead` this is the plain cdiv(n, block_size) of `warmup_kernels`
    before PR #51438 (vLLM @ e9f331d72). With it, it is what vLLM's scheduler reserves
    (`_reserved_block_count`, vllm/v1/worker/gpu/warmup.py, d608dfabf): the token range plus the
    speculator's lookahead, capped at max_model_len; cross-attention groups cover the
    encoder; Mamba groups add their speculative blocks.
    """

    def __init__(self, engine: EngineFacts, names: dict, reserve_lookahead: bool):
        self.groups = engine.kv_cache.groups
        self.reserve = reserve_lookahead
        self.lookahead = names["num_lookahead_tokens"]
        self.max_model_len = names["max_model_len"]
        self.max_encoder_len = names["max_encoder_len"]

    def __call__(self, num_tokens: int, group: KvCacheGroup) -> int:
        block_size = group.block_size
        if not self.reserve:
            return cdiv(num_tokens, block_size)
        if group.kind == "cross_attention":
            return cdiv(self.max_encoder_len, block_size)
        spec_blocks = group.num_speculative_blocks if group.kind == "mamba" else 0
        if group.kind == "mamba" and group.mamba_cache_mode == "align":
            return cdiv(num_tokens, block_size) + spec_blocks
        return cdiv(min(num_tokens + self.lookahead, self.max_model_len), block_size) + spec_blocks


class BlockAllocator:
    """Sequential block ids from 1: block 0 is the null block and is never handed out."""

    def __init__(self):
        self.next_block_id = 1

    def take(self, n: int) -> tuple[int, ...]:
        ids = tuple(range(self.next_block_id, self.next_block_id + n))
        self.next_block_id += n
        return ids


def prefill_step(scope: Scope, name: str, prompt_len: int, held: list, alloc: BlockAllocator,
                 num_groups: int) -> Prefill:
    requests = tuple([NewRequest(req_id(i), prompt_len, tuple([alloc.take(n) for n in counts]))
                      for i, counts in enumerate(held)])
    return scope.new(Prefill, name, requests=requests, total_num_scheduled_tokens=prompt_len * len(held),
                     prompt_token_ids=tuple(range(prompt_len)), num_common_prefix_blocks=(0,) * num_groups)


def sample_step(scope: Scope, name: str, sampling: dict, grammar: GrammarBitmask | None) -> Sample:
    return scope.new(Sample, name, grammar_bitmask=grammar, sampling_params=sampling,
                     features=tuple(sampling_features(sampling)))


def sampling_features(p: dict) -> list[str]:
    """Which sampler code paths these parameters exercise (for review and lints)."""
    checks = [
        ("greedy", p.get("temperature", 1.0) == 0),
        ("temperature", p.get("temperature", 1.0) not in (0, 1.0)),
        ("top_k", p.get("top_k", 0) > 0),
        ("top_p", p.get("top_p", 1.0) < 1.0),
        ("min_p", p.get("min_p", 0.0) > 0),
        ("seed", p.get("seed") is not None),
        ("frequency_penalty", p.get("frequency_penalty", 0.0) != 0),
        ("presence_penalty", p.get("presence_penalty", 0.0) != 0),
        ("repetition_penalty", p.get("repetition_penalty", 1.0) != 1.0),
        ("min_tokens", p.get("min_tokens", 0) > 0),
        ("logit_bias", bool(p.get("logit_bias"))),
        ("bad_words", bool(p.get("bad_words_token_ids"))),
        ("logprobs", p.get("logprobs") is not None),
        ("prompt_logprobs", p.get("prompt_logprobs") is not None),
    ]
    return [name for name, on in checks if on]


def decode_subsets(mode: str, num_reqs: int, names: dict) -> list[list[tuple[int, bool]]]:
    """Which requests each decode step schedules, and whether each carries drafts."""
    spec = names["num_speculative_tokens"] > 0
    everyone = [(i, spec) for i in range(num_reqs)]
    if mode == "single":
        return [everyone]
    # vLLM PR #49903 (0d0504b54): mixed spec / non-spec subsets, because GDN and KDA
    # reclassify a non-spec decode as a prefill and split the batch.
    subsets = [everyone]
    if num_reqs >= 2:
        subsets.append([(0, spec), (1, False)])
        if spec:
            subsets.append([(0, False), (1, False)])
    if num_reqs > 1:
        subsets.append([(0, spec)])
        if spec:
            subsets.append([(0, False)])
    elif spec:
        subsets.append([(0, False)])
    return subsets


def decode_step(scope: Scope, name: str, subset, computed: list, held: list, count: BlockCounter,
                alloc: BlockAllocator) -> Decode:
    requests = []
    for i, with_drafts in subset:
        num_spec = scope.names["num_speculative_tokens"] if with_drafts else 0
        tokens = 1 + num_spec
        need = [count(computed[i] + tokens, g) for g in count.groups]
        deltas = [n - h for n, h in zip(need, held[i])]
        new_block_ids = tuple(alloc.take(d) for d in deltas) if any(deltas) else None
        requests.append(CachedRequest(req_id(i), computed[i], tokens, num_spec, 1, new_block_ids))
        held[i], computed[i] = need, computed[i] + tokens
    total = sum(r.num_scheduled_tokens for r in requests)
    return scope.new(Decode, name, requests=tuple(requests), total_num_scheduled_tokens=total,
                     num_common_prefix_blocks=(0,) * len(count.groups))


def cleanup_step(scope: Scope, name: str, num_reqs: int) -> Cleanup:
    return scope.new(Cleanup, name, finished_req_ids=tuple(req_id(i) for i in range(num_reqs)))
