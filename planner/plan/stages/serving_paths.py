"""serving_paths: the paths a served request takes that vLLM's warmup_kernels batch never does.

vLLM's `warmup_kernels` (the synthetic_batches stage) runs one batch with every sampling feature
at once, 2-token prompts and one decode step. Measured on H200s with vLLM 0.25.0 + FlashInfer and
`--jit-monitor-mode error`, that left cold, and killed the server at the first request that took:
  * Triton `_gumbel_sample_kernel` (vllm/v1/worker/gpu/sample/gumbel.py): Model Runner V2's
    `Sampler.sample` (v1/worker/gpu/sample/sampler.py) takes FlashInfer's sampler only when no
    request of the batch is greedy or seeded and some use top-k / top-p; a batch with every
    feature never reaches the gumbel path that a greedy, seeded or temperature-only batch takes;
  * MLA's prefill path (model_executor/layers/attention/mla_attention.py: forward_mha and
    `_compute_prefill_context`, FlashInfer's concat_mla module, the Triton
    `_per_token_group_quant_fp8_colmajor` that a non-contiguous slice of the workspace takes):
    it runs only for requests whose query length exceeds the backend's reorder_batch_threshold
    (split_decodes_and_prefills), and the context part only for such a request with computed
    tokens before it: a chunked prefill's later chunk or a prefix-cache hit.

So this stage schedules, as vLLM's scheduler would send them (vllm/v1/core/sched/output.py):
  1. each sampling mode as a lone request (prefill of `prompt_len` tokens, sample, one decode step
     at batch 1 with the drafts under speculative decoding, sample, cleanup); n = 2 as the engine
     front end delivers it, two child requests `{index}_{parent}` with n = 1
     (v1/engine/parallel_sampling.py, ParentRequest.get_child_info); a mixed batch of a greedy
     request and a top-k/top-p one (FlashInfer's sampler off, Triton's top-k/top-p and gumbel on);
  2. a long prefill of `long_prompt_len` tokens, above every backend's decode threshold;
  3. a chunked prefill: `prompt_len` tokens, then `long_prompt_len` more as a running request with
     num_computed_tokens > 0 and no output yet (num_output_tokens 0);
  4. a prefix-cache hit: a new request whose NewRequestData.num_computed_tokens is the whole blocks
     a live donor has computed of the same prompt, and whose block_ids start with the donor's;
  5. a running batch that shrinks and grows: 3 -> 3 -> 2 -> 1 -> 1 -> 2 -> 3 requests, the ones left
     out waiting and coming back. The V1 runner corrects num_computed_tokens under async speculative
     decoding in `update_num_computed_tokens_for_batch_change` (vllm/v1/spec_decode/utils.py), a
     torch.compile(dynamic=True) function of the previous batch's size and this one's, which Dynamo
     keys by 0/1 specialization and duck sizing (kernel_model/dynamo_shapes.py). It runs only where
     a request of this step was in the step before (`prev_req_id_to_index`): a step that schedules
     nothing, or only new requests, empties the persistent batch (GPUModelRunner._update_states
     removes every request it does not schedule). So the sequence never lets a request finish or
     join in a step of its own: requests wait instead, and each step keeps one of the step before.
     A batch that shrank to 1 compiled it after ready where the plan's batches never had one of 1
     after a larger one (DeepSeek-V3 with MTP: bench/RESULTS.md part AH).
Each sequence starts from an empty batch and ends with a cleanup of every request it added, so its
block ids start again from 1 (block 0 is the null block). Blocks are what the scheduler reserves
(batches.BlockCounter with the lookahead). A sequence the engine cannot hold (max_num_seqs,
max_model_len, num_blocks) is left out and named in the plan's not_modelled list.
"""

from __future__ import annotations

import math

from ..steps import CachedRequest, Cleanup, Decode, NewRequest, Prefill, Sample
from .batches import BlockAllocator, BlockCounter, sampling_features
from .scope import Scope

# reorder_batch_threshold of vLLM 0.25.0's attention backends: a request whose query is no longer
# is run as a decode (vllm/v1/attention/backend.py, _init_reorder_batch_threshold). FlashAttention
# MLA's 512 (v1/attention/backends/mla/flashattn_mla.py) and FlashMLA's 128 (flashmla.py) are the
# only ones above 1 (MLACommonMetadataBuilder, FlashInfer, CUTLASS MLA, Triton MLA: 1).
DECODE_THRESHOLDS = {"FLASH_ATTN_MLA": 512, "FLASHMLA": 128}


def decode_threshold(num_speculative_tokens: int) -> int:
    """The longest query any attention backend of vLLM 0.25 may still run as a decode.

    The largest of every backend, not the engine's own: vLLM picks the backend at start-up from
    what the engine file does not record (platforms/cuda.py, _get_backend_priorities), and a
    prefill above all of them is a prefill to whichever it picked. Under speculative decoding a
    backend that decodes drafts raises its threshold to 1 + 2k with parallel drafting."""
    return max(max(DECODE_THRESHOLDS.values()), 1 + 2 * num_speculative_tokens)


# One lone request per sampling mode: the parameters of vLLM's SamplingParams (n = 1 each).
SAMPLING_MODES = (
    ("greedy", {"temperature": 0}),                    # gumbel path, no noise (any_greedy)
    ("temperature", {"temperature": 0.6}),             # gumbel path: no top-k / top-p for FlashInfer
    ("top-k", {"top_k": 20}),                          # FlashInfer's sampler, top-k only
    ("top-p", {"top_p": 0.9}),                         # FlashInfer's sampler, top-p only
    ("min-p", {"min_p": 0.1}),                         # apply_min_p's kernel
    ("seed", {"temperature": 0.6, "seed": 0}),         # any_explicit_seed: gumbel path
    ("logprobs", {"logprobs": 5}),
    ("prompt-logprobs", {"prompt_logprobs": 5}),
    ("penalties", {"frequency_penalty": 0.5, "presence_penalty": 0.5, "repetition_penalty": 1.2}),
)
# The request a user's n = 2 sends: ParentRequest copies its params to each child with n = 1 (the
# measured case: temperature 0.6 and no top-k / top-p, which compiled _gumbel_sample_kernel).
PARALLEL_SAMPLING = {"temperature": 0.6}
# A greedy request beside a top-k/top-p one: any_greedy turns FlashInfer's sampler off, so the
# top-k/top-p filter runs in vLLM's own apply_top_k_top_p before the gumbel kernel.
MIXED = ({"temperature": 0}, {"top_k": 20, "top_p": 0.9})
DEFAULT = {}  # SamplingParams() as vLLM's API builds it without sampling fields

SKIPPED = "serving paths the serving_paths stage leaves out for this engine"


def req_id(name: str) -> str:
    return f"_warmup_{name}_"


def child_req_id(index: int, parent: str) -> str:
    """vLLM's id of child `index` of a request with n > 1 (ParentRequest.get_child_info)."""
    return f"{index}_{parent}"


class Skip(Exception):
    """A sequence left out for this engine (its limits, or KV groups the stage does not model): its
    reason goes to the plan's not_modelled list."""


def expand(scope: Scope) -> list:
    # Pooling models sample nothing and decode nothing: vLLM's serving paths of generation only.
    if scope.names["is_pooling_model"]:
        return []
    q = scope.names["decode_query_len"]
    prompt_len = scope.integer("prompt_len", minimum=q + 1)  # above it: a prefill (vLLM #40746)
    threshold = decode_threshold(scope.names["num_speculative_tokens"])
    long_len = scope.integer("long_prompt_len", minimum=prompt_len, prompt_len=prompt_len,
                             decode_threshold=threshold)
    budget = scope.names["max_num_batched_tokens"]
    for param, value in (("prompt_len", prompt_len), ("long_prompt_len", long_len)):
        if value > budget:
            raise scope.stage.where(param).error(
                f"{value} tokens in one step, more than max_num_batched_tokens {budget}")
    paths = Paths(scope, prompt_len, long_len)
    steps, skipped = [], []
    for name, build in paths.sequences():
        try:
            steps += build()
        except Skip as reason:
            skipped.append(f"{name} ({reason})")
    if skipped:
        scope.notes.gaps.append(skipped_gap(skipped))
    return steps


def skipped_gap(skipped: list[str]) -> dict:
    return {"family": SKIPPED,
            "why": "the stage leaves these sequences out for this engine: " + "; ".join(skipped),
            "action": "check the first requests of these kinds with vLLM's JIT monitor; `warmup absorb` names "
                      "what they compiled"}


class Paths:
    """The stage's sequences for one engine, each built on demand (a Skip leaves one out)."""

    def __init__(self, scope: Scope, prompt_len: int, long_len: int):
        self.scope, self.names = scope, scope.names
        self.prompt_len, self.long_len = prompt_len, long_len
        self.count = BlockCounter(scope.engine.facts, scope.names, reserve_lookahead=True)

    def sequences(self) -> list:
        """(name, build) in plan order: the sampling modes, then the prefill paths."""
        out = [(name, lambda n=name, p=params: self.lone(n, p)) for name, params in SAMPLING_MODES]
        return out + [("n2", self.parallel_sampling), ("mixed", self.mixed), ("long-prefill", self.long_prefill),
                      ("chunked-prefill", self.chunked_prefill), ("prefix-hit", self.prefix_hit),
                      ("batch-change", self.batch_change)]

    # --- the sequences ------------------------------------------------------------------------

    def lone(self, name: str, params: dict) -> list:
        seq = Sequence(self, name)
        seq.prefill("prefill", self.prompt_len, [seq.request(req_id(name), self.prompt_len, params)])
        return seq.decode_all_and_finish()

    def parallel_sampling(self) -> list:
        seq = Sequence(self, "n2")
        parent = req_id("n2")
        children = [seq.request(child_req_id(i, parent), self.prompt_len, PARALLEL_SAMPLING) for i in range(2)]
        seq.prefill("prefill", self.prompt_len, children)
        return seq.decode_all_and_finish()

    def mixed(self) -> list:
        seq = Sequence(self, "mixed")
        reqs = [seq.request(req_id(f"mixed_{i}"), self.prompt_len, params) for i, params in enumerate(MIXED)]
        seq.prefill("prefill", self.prompt_len, reqs)
        return seq.decode_all_and_finish()

    def long_prefill(self) -> list:
        seq = Sequence(self, "long-prefill")
        seq.prefill("prefill", self.long_len, [seq.request(req_id("long"), self.long_len, DEFAULT)])
        return seq.decode_all_and_finish()

    def chunked_prefill(self) -> list:
        """A prompt of prompt_len + long_len tokens in two chunks: the second is a running request
        with its first chunk computed and no output token (the scheduler's partial prefill)."""
        self.full_attention_only("chunked prefill")
        seq = Sequence(self, "chunked-prefill")
        total = self.prompt_len + self.long_len
        r = seq.request(req_id("chunked"), total, DEFAULT, num_scheduled_tokens=self.prompt_len)
        seq.prefill("prefill", total, [r])
        seq.continue_prefill("prefill-2", r.req_id, self.long_len)
        return seq.decode_all_and_finish()

    def prefix_hit(self) -> list:
        """A donor of long_len tokens, then a request whose prompt starts with the donor's: its
        first whole blocks are the donor's computed ones (KVCacheManager.get_computed_blocks; the
        hit is whole blocks of every group, as the hybrid coordinator aligns it)."""
        self.full_attention_only("a prefix-cache hit")
        if self.names["max_num_seqs"] < 2:
            raise Skip("max_num_seqs 1 never holds a donor beside the request that hits its blocks")
        unit = math.lcm(*(g.block_size for g in self.count.groups))
        hit = self.long_len // unit * unit
        if hit == 0:
            raise Skip(f"long_prompt_len {self.long_len} fills no whole block of {unit} tokens")
        seq = Sequence(self, "prefix-hit")
        donor = seq.request(req_id("prefix_donor"), self.long_len, DEFAULT)
        seq.prefill("prefill", self.long_len, [donor])
        total = hit + self.long_len
        seq.prefill("prefill-hit", total, [seq.request(req_id("prefix_hit"), total, DEFAULT,
                                                        num_computed_tokens=hit, donor=donor.req_id)])
        return seq.decode_all_and_finish()

    def batch_change(self) -> list:
        """Every size key (kernel_model/dynamo_shapes.py) of (the step before's batch, this one's)
        with a request kept from the step before: 3 from 3, 2 from 3, 1 from 2, 1 from 1, 2 from 1,
        3 from 2. Requests left out wait (vLLM re-adds them from their tokens when they return)."""
        if self.names["max_num_seqs"] < 3:
            raise Skip(f"max_num_seqs {self.names['max_num_seqs']} never holds a batch of 3")
        seq = Sequence(self, "batch-change")
        a, b, c = (seq.request(req_id(f"change_{i}"), self.prompt_len, DEFAULT) for i in range(3))
        seq.prefill("prefill", self.prompt_len, [a, b, c])
        seq.decode_running("decode-3")
        seq.decode_some("decode-2", [a, b])
        seq.decode_some("decode-1", [a])
        seq.decode_some("decode-1-again", [a])
        seq.decode_some("decode-2-from-1", [a, b])
        return seq.decode_all_and_finish()

    def full_attention_only(self, what: str) -> None:
        """Sliding-window groups hand a hit the null block for what left the window, and Mamba
        groups align chunks and hits to their own blocks (vllm/v1/core/single_type_kv_cache_manager.py):
        rules this stage does not model."""
        kinds = sorted({g.kind for g in self.count.groups if g.kind != "full_attention"})
        if kinds:
            raise Skip(f"{what} with {', '.join(kinds)} KV groups is not modelled")


class Sequence:
    """Steps from an empty batch to the cleanup of every request they add: requests, their blocks
    and computed tokens, with block ids from 1 (block 0 is the null block)."""

    def __init__(self, paths: Paths, name: str):
        self.paths, self.scope, self.name = paths, paths.scope, name
        self.count = paths.count
        self.alloc = BlockAllocator()
        self.running: dict[str, Running] = {}
        self.steps: list = []

    def request(self, rid: str, prompt_len: int, params: dict, num_scheduled_tokens: int | None = None,
                num_computed_tokens: int = 0, donor: str | None = None) -> "Running":
        """A request to add: the whole prompt scheduled unless num_scheduled_tokens says less; a
        prefix hit has num_computed_tokens and the donor whose blocks it starts with."""
        limit = self.scope.names["max_model_len"]
        if prompt_len + self.scope.names["decode_query_len"] > limit:
            raise Skip(f"a {prompt_len}-token prompt and a decode step exceed max_model_len {limit}")
        scheduled = prompt_len - num_computed_tokens if num_scheduled_tokens is None else num_scheduled_tokens
        return Running(rid, prompt_len, params, num_computed_tokens, scheduled, donor)

    # --- steps --------------------------------------------------------------------------------

    def prefill(self, step: str, prompt_len: int, reqs: list["Running"]) -> None:
        """New requests of one prompt (scheduled_new_reqs), then the sample vLLM runs after every
        step (EngineCore.step), which discards what a partial prefill samples."""
        self.check_batch(len(reqs), sum(r.scheduled for r in reqs))
        new = tuple(self.add(r) for r in reqs)
        self.steps.append(self.scope.new(
            Prefill, f"{self.name}-{step}", requests=new, total_num_scheduled_tokens=sum(r.scheduled for r in reqs),
            prompt_token_ids=tuple(range(prompt_len)), num_common_prefix_blocks=(0,) * len(self.count.groups)))
        self.sample(step, reqs)

    def continue_prefill(self, step: str, rid: str, num_tokens: int) -> None:
        """The next chunk of a partial prefill: a cached request with no output token yet."""
        r = self.running[rid]
        self.schedule(step, [(r, num_tokens, 0, 0)])

    def decode_all_and_finish(self) -> list:
        """One decode step of every running request (the drafts under speculative decoding), its
        sample, and the cleanup that finishes them all."""
        self.decode_running("decode")
        self.finish("cleanup", list(self.running))
        self.check_blocks()
        return self.steps

    def decode_running(self, step: str) -> None:
        """One decode step of every running request: its last token and k drafts, as if the drafts
        before were all accepted (the scheduler's num_computed_tokens runs ahead the same way)."""
        self.decode_some(step, list(self.running.values()))

    def decode_some(self, step: str, reqs: list["Running"]) -> None:
        """One decode step of these running requests; the others wait, as the scheduler leaves
        out a running request its token budget does not reach (vLLM re-adds it when it returns)."""
        k = self.scope.names["num_speculative_tokens"]
        limit = self.scope.names["max_model_len"]
        if any(r.computed + 1 + k > limit for r in reqs):
            raise Skip(f"a decode step past max_model_len {limit}")
        self.schedule(step, [(r, 1 + k, k, r.num_output_tokens) for r in reqs])

    def finish(self, step: str, req_ids: list) -> None:
        """The scheduler step that names these requests finished; the others keep running."""
        self.steps.append(self.scope.new(Cleanup, f"{self.name}-{step}", finished_req_ids=tuple(req_ids)))
        for rid in req_ids:
            del self.running[rid]

    def schedule(self, step: str, entries: list) -> None:
        """A step of running requests: (request, tokens, drafts, output tokens so far) each."""
        self.check_batch(len(entries), sum(tokens for _, tokens, _, _ in entries))
        reqs = []
        for r, tokens, num_spec, num_output in entries:
            new_block_ids = self.grow(r, r.computed + tokens)
            reqs.append(CachedRequest(r.req_id, r.computed, tokens, num_spec, num_output, new_block_ids))
            r.computed += tokens
        total = sum(x.num_scheduled_tokens for x in reqs)
        self.steps.append(self.scope.new(Decode, f"{self.name}-{step}", requests=tuple(reqs),
                                         total_num_scheduled_tokens=total,
                                         num_common_prefix_blocks=(0,) * len(self.count.groups)))
        self.sample(step, [r for r, _, _, _ in entries])

    def sample(self, step: str, reqs: list["Running"]) -> None:
        """sample_tokens: each request keeps its own parameters (the step's are empty)."""
        features = sampling_features_of([r.params for r in reqs])
        self.steps.append(self.scope.new(Sample, f"{self.name}-{step}-sample", grammar_bitmask=None,
                                         sampling_params={}, features=features))

    # --- requests and blocks ----------------------------------------------------------------------

    def add(self, r: "Running") -> NewRequest:
        """NewRequestData of `r`: every block it holds (the donor's cached ones first), its
        num_computed_tokens, its own sampling parameters."""
        shared = self.shared_blocks(r)
        r.blocks = [list(ids) for ids in shared]
        self.grow(r, r.computed + r.scheduled)
        self.running[r.req_id] = r
        r.computed += r.scheduled
        return NewRequest(r.req_id, r.scheduled, tuple(tuple(ids) for ids in r.blocks), None, dict(r.params),
                          r.num_computed_tokens)

    def shared_blocks(self, r: "Running") -> list:
        """The donor's first blocks that hold r's computed tokens, per group (none without a hit)."""
        if not r.num_computed_tokens:
            return [[] for _ in self.count.groups]
        donor = self.running[r.donor]
        hit = r.num_computed_tokens
        return [held[:hit // group.block_size] for held, group in zip(donor.blocks, self.count.groups)]

    def grow(self, r: "Running", num_tokens: int) -> tuple | None:
        """New block ids for r to hold num_tokens (and the lookahead), per group; None: none new."""
        need = [self.count(num_tokens, g) for g in self.count.groups]
        deltas = [max(0, n - len(held)) for n, held in zip(need, r.blocks)]
        if not any(deltas):
            return None
        new = [self.alloc.take(d) for d in deltas]
        for held, ids in zip(r.blocks, new):
            held.extend(ids)
        return tuple(new)

    def check_batch(self, num_reqs: int, num_tokens: int) -> None:
        names = self.scope.names
        if num_reqs > names["max_num_seqs"]:
            raise Skip(f"{num_reqs} requests at once, more than max_num_seqs {names['max_num_seqs']}")
        if num_tokens > names["max_num_batched_tokens"]:
            raise Skip(f"{num_tokens} tokens in one step, more than max_num_batched_tokens "
                       f"{names['max_num_batched_tokens']}")

    def check_blocks(self) -> None:
        last = self.alloc.next_block_id - 1
        if last > self.scope.names["num_blocks"] - 1:
            raise Skip(f"{last} KV blocks, more than num_blocks {self.scope.names['num_blocks']} - 1")


class Running:
    """A request of a sequence: its prompt, parameters, computed tokens and blocks per group."""

    __slots__ = ("req_id", "prompt_len", "params", "num_computed_tokens", "scheduled", "donor", "computed",
                 "blocks")

    def __init__(self, rid: str, prompt_len: int, params: dict, num_computed_tokens: int, scheduled: int,
                 donor: str | None):
        self.req_id, self.prompt_len, self.params = rid, prompt_len, params
        self.num_computed_tokens, self.scheduled, self.donor = num_computed_tokens, scheduled, donor
        self.computed = num_computed_tokens
        self.blocks: list = []

    @property
    def num_output_tokens(self) -> int:
        """Its output tokens once its prompt is computed: the prefill's sample, then 1 + k a decode
        step (every draft accepted, as decode_running schedules them)."""
        return self.computed - self.prompt_len + 1


def sampling_features_of(params: list[dict]) -> tuple:
    """The sampler features a batch of requests with these parameters exercises, in
    sampling_features' order, each once."""
    return tuple(dict.fromkeys(f for p in params for f in sampling_features(p)))
