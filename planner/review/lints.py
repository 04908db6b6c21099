"""Lints over an expanded plan: mistakes a warmup can make that the schema cannot see.

A lint is a small pure function over (expanded plan, engine data) yielding
(step id, message) pairs; `@lint` registers it with its code, severity, an
explanation and a fix. Lints that need engine facts (`needs_engine`) are skipped,
and reported as skipped, when no engine config is given. Findings are grouped per
step: a batch of 4096 requests that all hold too few blocks is one finding.

Over 400 lines: the lint table: one small registered function per lint; a new lint is one function here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from ..engine.names import expression_names
from ..engine.facts import EngineFacts
from ..engine.releases import model_runner, upstream_fix
from ..engine.vllm_choices import KERNEL_CLASSES, deep_gemm_min_m
from ..plan.expr import round_up
from ..plan.stages.batches import BlockCounter
from ..plan.steps import Attention, Autotune, Cleanup, CudaGraph, Decode, Gemm, GemmLike, GroupedGemm, Prefill, Sample
from ..words import count

ERROR, WARNING = "error", "warning"
EXAMPLES = 4


@dataclass(frozen=True)
class Lint:
    code: str           # E1xx errors, W2xx warnings
    name: str
    severity: str
    needs_engine: bool
    explanation: str
    fix: str
    check: Callable[[object, dict | None], Iterable[tuple[str, str]]]  # (ExpandedPlan, engine data)


@dataclass(frozen=True)
class Finding:
    lint: Lint
    step: str           # step id, or "(plan)" for the plan as a whole
    message: str        # one line

    def line(self) -> str:
        return f"{self.lint.severity.upper()} {self.lint.code} {self.step}: {self.message}"

    def to_json(self) -> dict:
        return {"code": self.lint.code, "name": self.lint.name, "severity": self.lint.severity,
                "step": self.step, "message": self.message}


LINTS: list[Lint] = []


def lint(code: str, name: str, severity: str, *, needs_engine: bool, explanation: str, fix: str):
    def register(check):
        LINTS.append(Lint(code, name, severity, needs_engine, " ".join(explanation.split()),
                          " ".join(fix.split()), check))
        return check
    return register


def run(plan, engine: EngineFacts | None = None, codes: Iterable[str] | None = None
        ) -> tuple[list[Finding], list[Lint]]:
    """(findings in step order, lints skipped for want of an engine config); `engine`: the engine
    config's record (Engine.facts), which every lint reads."""
    wanted = set(codes) if codes is not None else None
    order = {s.id: i for i, s in enumerate(plan.steps)}
    findings, skipped = [], []
    for item in sorted(LINTS, key=lambda x: x.code):
        if wanted is not None and item.code not in wanted:
            continue
        if item.needs_engine and engine is None:
            skipped.append(item)
            continue
        findings += [Finding(item, step, message) for step, message in item.check(plan, engine)]
    findings.sort(key=lambda f: (order.get(f.step, -1), f.lint.code))
    return findings, skipped


# --- helpers -------------------------------------------------------------------------

def examples(values, limit: int = EXAMPLES) -> str:
    """'1, 3, 5, ...' : a few values, never thousands."""
    values = list(values)
    shown = ", ".join(str(v) for v in values[:limit])
    return shown + (", ..." if len(values) > limit else "")


BATCHES = (Prefill, Decode)


def batches(plan) -> Iterator:
    return (s for s in plan.steps if isinstance(s, BATCHES))


def step_block_ids(step) -> Iterator[tuple]:
    """(request, block ids per group) for the blocks each request of a batch step receives."""
    for r in step.requests:
        groups = r.block_ids if isinstance(step, Prefill) else r.new_block_ids
        yield r, groups or ()


@dataclass
class Running:
    computed: int           # tokens whose KV the request holds after its last step
    blocks: list            # block ids per KV cache group


@dataclass
class Replayed:
    step: object            # a Prefill, Decode or Cleanup step
    scheduled: list         # (request, Running) for each request the step scheduled and that runs
    running: dict           # req_id -> Running, after the step
    problems: list          # what does not add up, one line each


def replay(plan) -> Iterator[Replayed]:
    """Replay the batch steps as the model runner sees them: who is running, with what."""
    running: dict[str, Running] = {}
    for step in plan.steps:
        scheduled, problems = [], []
        if isinstance(step, Prefill):
            _add(step, running, scheduled, problems)
        elif isinstance(step, Decode):
            _continue(step, running, scheduled, problems)
        elif isinstance(step, Cleanup):
            for req_id in step.finished_req_ids:
                running.pop(req_id, None)
        else:
            continue
        yield Replayed(step, scheduled, running, problems)


def _add(step, running: dict, scheduled: list, problems: list) -> None:
    for r in step.requests:
        if r.req_id in running:
            problems.append(f"request {r.req_id} is added again while it is running")
        # A prefix-cache hit arrives with its cached tokens computed (NewRequestData.num_computed_tokens).
        state = Running(r.num_computed_tokens + r.num_scheduled_tokens, [list(g) for g in r.block_ids])
        running[r.req_id] = state
        scheduled.append((r, state))


def _continue(step, running: dict, scheduled: list, problems: list) -> None:
    for r in step.requests:
        state = running.get(r.req_id)
        if state is None:
            problems.append(f"request {r.req_id} is decoded but not running (no prefill added it, "
                            "or a cleanup finished it)")
            continue
        if r.num_computed_tokens != state.computed:
            problems.append(f"request {r.req_id} continues from {r.num_computed_tokens} computed "
                            f"tokens, but has computed {state.computed}")
        state.computed = r.num_computed_tokens + r.num_scheduled_tokens
        for g, ids in enumerate(r.new_block_ids or ()):
            if g < len(state.blocks):
                state.blocks[g] += ids
            else:
                state.blocks.append(list(ids))
        scheduled.append((r, state))


def names_of(engine: EngineFacts) -> dict:
    return expression_names(engine)


def spec_note(names: dict) -> str:
    k = names["num_speculative_tokens"]
    return f"1 + {count(k, 'speculative token')}"


# --- errors --------------------------------------------------------------------------

@lint("E101", "prefill-classified-as-decode", ERROR, needs_engine=True,
      explanation="""A batch in which every request schedules the same number of tokens, equal to
      decode_query_len (1 + num_speculative_tokens), is a uniform decode batch to vLLM: it runs through
      the FULL decode CUDA graph. A warmup prefill whose requests schedule no more tokens than that never
      reaches the prefill kernels, and the first real prompt pays for their JIT (vLLM PR #40746).""",
      fix="""Give every prefill request more tokens than a decode step: `prompt_len: decode_query_len + 1`
      (vllm-head) or `2 + num_speculative_tokens` (vllm).""")
def prefill_classified_as_decode(plan, engine):
    names = names_of(engine)
    q = names["decode_query_len"]
    for step in plan.steps:
        if not isinstance(step, Prefill) or not step.requests:
            continue
        longest = max(r.num_scheduled_tokens for r in step.requests)
        if longest <= q:
            yield step.id, (f"per-request query length {longest} <= decode query length {q} ({spec_note(names)}): "
                               "the engine classifies the batch as uniform decode and never warms the prefill path")


@lint("E102", "kv-blocks-short", ERROR, needs_engine=True,
      explanation="""The warmup hand-builds scheduler outputs, so every request must hold the KV blocks
      vLLM's KVCacheManager.allocate_slots would give it: its tokens plus the speculator's lookahead
      (num_lookahead_tokens), capped at max_model_len; cross-attention groups cover the encoder and Mamba
      groups add their speculative blocks. With fewer, the drafter's positions past the reservation hit the
      null block, and the warmup never crosses the block boundaries production crosses (vLLM #51438).""",
      fix="""Reserve the lookahead in the synthetic batches (`reserve_lookahead: true`, as vllm-head does), or
      give each request the blocks its tokens and the lookahead need; re-plan if the engine's KV groups
      changed.""")
def kv_blocks_short(plan, engine):
    names = names_of(engine)
    counter = BlockCounter(engine, names, reserve_lookahead=True)
    groups = engine.kv_cache.groups
    lookahead = names["num_lookahead_tokens"]
    for rep in replay(plan):
        short: dict = {}
        wrong_groups = set()
        for r, state in rep.scheduled:
            if len(state.blocks) != len(groups):
                wrong_groups.add(len(state.blocks))
                continue
            for g, group in enumerate(groups):
                need, held = counter(state.computed, group), len(state.blocks[g])
                if held < need:
                    short.setdefault((g, held, need, state.computed), []).append(r.req_id)
        for n in sorted(wrong_groups):
            yield rep.step.id, (f"requests hold blocks in {count(n, 'KV cache group')}, the engine has "
                                   f"{len(groups)}")
        for (g, held, need, tokens), reqs in short.items():
            extra = f" + {lookahead} lookahead" if lookahead else ""
            yield rep.step.id, (f"{count(len(reqs), 'request')} ({examples(reqs, 2)}) hold "
                                   f"{count(held, 'block')} in KV group {g}; the scheduler would hold {need} "
                                   f"for {tokens} tokens{extra} (block size {groups[g].block_size})")


@lint("E103", "null-block", ERROR, needs_engine=False,
      explanation="""Block 0 is vLLM's null block: it is never given to a request, and padded block-table
      entries point at it. A request that holds it shares its KV with every padding slot: its cache is
      overwritten and attention reads garbage.""",
      fix="""Allocate block ids from 1, as the synthetic_batches stage does; renumber a hand-written plan.""")
def null_block(plan, engine):
    for step in batches(plan):
        reqs = [r.req_id for r, groups in step_block_ids(step) if any(0 in ids for ids in groups)]
        if reqs:
            yield step.id, f"{count(len(reqs), 'request')} ({examples(reqs, 2)}) hold the null block 0"


@lint("E104", "block-reused", ERROR, needs_engine=False,
      explanation="""A running request owns its KV blocks: two requests holding the same block id (or one
      holding it twice) write over each other's KV. vLLM's block pool never hands out a block in use; a
      block becomes free only when the request holding it finishes. The one exception is a prefix-cache
      hit: a new request with num_computed_tokens > 0 starts with the cached blocks a running request
      computed, which the pool shares by reference count (KVCacheManager.get_computed_blocks).""",
      fix="""Give every request its own block ids; reuse an id only after a cleanup step finished the request
      that held it, or as the leading blocks of a prefix-cache hit.""")
def block_reused(plan, engine):
    owners: dict[int, list[str]] = {}  # block id -> the running requests that hold it
    for step in plan.steps:
        if isinstance(step, Cleanup):
            done = set(step.finished_req_ids)
            left = ((b, [r for r in held if r not in done]) for b, held in owners.items())
            owners = {b: held for b, held in left if held}
            continue
        if not isinstance(step, BATCHES):
            continue
        reused = []
        for r, groups in step_block_ids(step):
            hit = isinstance(step, Prefill) and r.num_computed_tokens > 0
            for ids in groups:
                shared = cached_prefix(ids, owners) if hit else 0
                for i, b in enumerate(ids):
                    held = owners.setdefault(b, [])
                    if r.req_id in held or (held and i >= shared):
                        reused.append((b, r.req_id if r.req_id in held else held[0], r.req_id))
                    held.append(r.req_id)
        if reused:
            b, first, second = reused[0]
            who = "again" if first == second else f"while {first} holds it"
            ids = examples(sorted({x[0] for x in reused}))
            yield step.id, (f"{count(len(reused), 'block id')} handed out twice ({ids}); e.g. block {b} goes "
                               f"to {second} {who}")


def cached_prefix(block_ids, owners: dict) -> int:
    """How many leading blocks of a prefix-cache hit other running requests hold: the cached
    blocks it shares with them."""
    n = 0
    for b in block_ids:
        if not owners.get(b):
            break
        n += 1
    return n


@lint("E105", "block-out-of-range", ERROR, needs_engine=True,
      explanation="""The engine has num_blocks KV blocks, ids 0 to num_blocks - 1 (0 is the null block). A
      larger id indexes past the KV cache tensor: an illegal memory access on the GPU, or silent
      corruption of another layer's cache.""",
      fix="""Fit the batch in the cache (num_reqs <= (num_blocks - 1) // max_blocks_per_req, as the built-in
      plans do), or run the plan on the engine config it was made for.""")
def block_out_of_range(plan, engine):
    last = engine.kv_cache.num_blocks - 1
    for step in batches(plan):
        bad = sorted({b for _, groups in step_block_ids(step) for ids in groups for b in ids if b > last or b < 0})
        if bad:
            yield step.id, (f"{count(len(bad), 'block id')} outside 1..{last} (num_blocks {last + 1}): "
                               f"{examples(bad[::-1])}")


@lint("E106", "tokens-over-limit", ERROR, needs_engine=True,
      explanation="""vLLM never schedules more than max_num_batched_tokens tokens in one step, and no request
      grows past max_model_len; input buffers, positions and the CUDA-graph pool are sized for these limits.
      A warmup beyond them fails, or warms shapes production never runs.""",
      fix="""Derive token counts from max_num_batched_tokens and max_model_len in the plan (num_reqs:
      max_num_batched_tokens // prompt_len, num_tokens: min(max_num_batched_tokens, ...)), or re-plan for this
      engine.""")
def tokens_over_limit(plan, engine):
    budget, max_len = engine.scheduler.max_num_batched_tokens, engine.model.max_model_len
    for step in plan.steps:
        if isinstance(step, BATCHES):
            if step.total_num_scheduled_tokens > budget:
                yield step.id, (f"schedules {step.total_num_scheduled_tokens} tokens, more than "
                                f"max_num_batched_tokens {budget}")
            long = [r.req_id for r in step.requests
                    if getattr(r, "num_computed_tokens", 0) + r.num_scheduled_tokens > max_len]
            if long:
                yield step.id, (f"{count(len(long), 'request')} ({examples(long, 2)}) grow past "
                                f"max_model_len {max_len}")
        elif isinstance(step, Attention) and step.num_tokens > budget:
            yield step.id, f"runs {step.num_tokens} tokens, more than max_num_batched_tokens {budget}"


@lint("E107", "too-many-requests", ERROR, needs_engine=True,
      explanation="""The model runner's persistent batch holds at most max_num_seqs requests: a step that
      schedules more, or a warmup that keeps more running at once, overflows it.""",
      fix="""Cap the synthetic batch at max_num_seqs (num_reqs: min(max_num_seqs, ...), as the built-in plans
      do).""")
def too_many_requests(plan, engine):
    limit = engine.scheduler.max_num_seqs
    for rep in replay(plan):
        if len(rep.step.requests) > limit:
            yield rep.step.id, f"schedules {len(rep.step.requests)} requests, more than max_num_seqs {limit}"
        elif len(rep.running) > limit:
            yield rep.step.id, f"{len(rep.running)} requests are running, more than max_num_seqs {limit}"


@lint("E108", "empty-step", ERROR, needs_engine=False,
      explanation="""A batch without requests or tokens, a GEMM without M-values, a capture without sizes, a
      cleanup that finishes nothing: the step does nothing, or trips an assertion in the runner. It usually
      means a stage parameter evaluated to zero for this engine.""",
      fix="""Check the parameters that size the step (num_reqs, prompt_len, max_tokens, capture sizes); a
      stage with nothing to do should produce no step.""")
def empty_step(plan, engine):
    for step in plan.steps:
        empty = step.empty()
        if empty:
            yield step.id, f"{empty}: the step does nothing"


@lint("E109", "batch-inconsistent", ERROR, needs_engine=False,
      explanation="""Batch steps are replayed as a scheduler issues them: a step's total is the sum of its
      requests, a decode continues a running request from the tokens it has computed, drafts are part of the
      scheduled tokens, a prefill schedules no more than its prompt, and a grammar bitmask has one row per
      request of the batch before it. An inconsistent step makes the runner fail, or build other shapes than
      the plan shows.""",
      fix="""Re-expand the plan with `warmup plan`, or correct the hand-edited step so that its counts
      agree.""")
def batch_inconsistent(plan, engine):
    for rep in replay(plan):
        yield from _batch_problems(rep)
    previous = None
    for step in plan.steps:
        if isinstance(step, Sample) and step.grammar_bitmask and previous is not None:
            rows, reqs = step.grammar_bitmask.num_rows, len(previous.requests)
            if rows != reqs:
                yield step.id, (f"grammar bitmask has {rows} rows, the batch before it ({previous.id}) "
                                f"has {reqs} requests")
        if isinstance(step, BATCHES):
            previous = step


def _batch_problems(rep: Replayed):
    step = rep.step
    if isinstance(step, BATCHES):
        total = sum(r.num_scheduled_tokens for r in step.requests)
        if total != step.total_num_scheduled_tokens:
            yield step.id, (f"total_num_scheduled_tokens is {step.total_num_scheduled_tokens}, its "
                            f"requests schedule {total}")
    if isinstance(step, Prefill):
        prompt = len(step.prompt_token_ids)
        over = [r.req_id for r in step.requests
                if r.num_computed_tokens + r.num_scheduled_tokens > len(r.prompt_token_ids or step.prompt_token_ids)]
        if over:
            yield step.id, (f"{count(len(over), 'request')} ({examples(over, 2)}) schedule more tokens "
                            f"than the {prompt}-token prompt")
    if isinstance(step, Decode):
        bad = [r.req_id for r in step.requests if r.num_spec_tokens >= r.num_scheduled_tokens]
        if bad:
            yield step.id, (f"{count(len(bad), 'request')} ({examples(bad, 2)}) schedule no verified "
                            "token: num_spec_tokens must be < num_scheduled_tokens")
    for problem in rep.problems[:1]:
        more = f" (and {len(rep.problems) - 1} more)" if len(rep.problems) > 1 else ""
        yield step.id, problem + more


def grouped_max_m(step, tokens: int) -> int:
    """Largest M_sum of a grouped GEMM: every token routed to top_k experts, each expert padded."""
    align = step.alignment
    routed = tokens * step.top_k
    return round_up(routed + min(routed, step.num_groups) * (align - 1), align)


@lint("E110", "gemm-m-out-of-range", ERROR, needs_engine=True,
      explanation="""A GEMM runs with M = the tokens of a batch: 1 to max_num_batched_tokens for a dense layer;
      for a grouped (MoE) GEMM, the padded rows of data_parallel_size * max_num_batched_tokens tokens routed to
      top_k experts. M-values outside that range compile and tune kernels production never calls (vLLM's
      relax warmup adds M = 1..64 even when max_num_batched_tokens is smaller).""",
      fix="""Take max_tokens from max_num_batched_tokens (the stage default), or drop the M-values beyond it.""")
def gemm_m_out_of_range(plan, engine):
    budget, dp = engine.scheduler.max_num_batched_tokens, engine.parallel.data_parallel_size
    for step in plan.steps:
        if isinstance(step, Gemm):
            limit, what = budget, f"max_num_batched_tokens {budget}"
        elif isinstance(step, GroupedGemm):
            limit = grouped_max_m(step, dp * budget)
            what = f"the largest M_sum {limit} ({dp * budget} tokens x top_k {step.top_k}, padded)"
        else:
            continue
        bad = [m for m in step.m_values if m < 1 or m > limit]
        if bad:
            sides = [side for side, out in (("below 1", min(bad) < 1), (f"above {what}", max(bad) > limit)) if out]
            yield step.id, f"{count(len(bad), 'M-value')} outside [1, {limit}] ({examples(bad)}): {' and '.join(sides)}"


# (N multiple, K multiple) each kernel takes; kernels not listed use the step's block_size.
KERNEL_ALIGNMENT = {
    # DeepGEMM: N a multiple of 64, K of 128 (vLLM's should_use_deepgemm_for_fp8_linear, 0.25 and 0.33)
    "fp8_gemm_nt": (64, 128),
    "m_grouped_fp8_gemm_nt_contiguous": (128, 128),   # DeepGEMM _valid_deep_gemm_shape
    "fp8_gemm": (1, 128),                             # executor Triton: one 128-wide scale group per K step
    "grouped_fp8_gemm": (1, 128),
}


@lint("E111", "gemm-shape-unaligned", ERROR, needs_engine=False,
      explanation="""Each GEMM kernel takes only block-aligned shapes: DeepGEMM's fp8_gemm_nt needs N a
      multiple of 64 and K of 128, its grouped contiguous GEMM N and K multiples of 128 and every M_sum a
      multiple of the alignment; the Triton block-FP8 kernels need K a multiple of 128. No configured kernel
      runs another shape: the step fails at launch, and in vLLM the layer falls back to a kernel this step
      does not warm.""",
      fix="""Leave the layer to a stage whose kernel takes its shape (the planner's stages skip unaligned
      shapes), or correct n, k, block_size or alignment.""")
def gemm_shape_unaligned(plan, engine):
    for step in plan.steps:
        if not isinstance(step, GemmLike):
            continue
        rule = KERNEL_ALIGNMENT.get(step.kernel)
        if rule is None and step.block_size:
            rule = tuple(step.block_size[:2])
        if rule is not None:
            bad = [f"{dim}={getattr(step, dim)} is not a multiple of {mult}"
                   for dim, mult in zip(("n", "k"), rule) if getattr(step, dim) % mult]
            if bad:
                yield step.id, f"{step.kernel} cannot take this shape: {'; '.join(bad)}"
        align = step.alignment if isinstance(step, GroupedGemm) else None
        if align:
            odd = [m for m in step.m_values if m % align]
            if odd:
                yield step.id, (f"{count(len(odd), 'M_sum')} not a multiple of the alignment {align} "
                                   f"({examples(odd)})")


# --- warnings ------------------------------------------------------------------------

@lint("W201", "decode-graph-uncovered", WARNING, needs_engine=True,
      explanation="""Production decode batches replay CUDA graphs: a uniform decode batch (every request
      scheduling decode_query_len tokens) replays a FULL decode graph, whose size is a multiple of
      decode_query_len. A plan that runs decode steps but captures no graphs where the engine does, or
      captures uniform-decode sizes made for another decode_query_len, leaves that graph path unwarmed.
      Decode steps before the capture are fine: they run eagerly and the capture then warms the graph path
      (vLLM 0.33 orders warmup_kernels before capture, so that no workspace resize frees what graphs use).""",
      fix="""Capture CUDA graphs in the plan (a cudagraph_capture stage), with uniform decode sizes of
      round_up(size, decode_query_len) for this engine: re-plan it.""")
def decode_graph_uncovered(plan, engine):
    comp, names = engine.compilation, names_of(engine)
    q = names["decode_query_len"]
    steps = plan.steps
    decodes = [i for i, s in enumerate(steps) if isinstance(s, Decode)]
    if comp.enforce_eager or comp.cudagraph_mode == "NONE" or not decodes:
        return
    captures = [i for i, s in enumerate(steps) if isinstance(s, CudaGraph)]
    if not captures:
        yield steps[decodes[0]].id, (f"{count(len(decodes), 'decode step')} run and the plan captures no CUDA "
                                     f"graphs (the engine does: {comp.cudagraph_mode}): they run eagerly")
    for cap in (steps[i] for i in captures):
        if cap.decode_query_len not in (None, q):
            yield cap.id, (f"uniform decode graphs are captured for decode_query_len {cap.decode_query_len}, "
                           f"the engine decodes {q} tokens per request ({spec_note(names)})")
        odd = [s for s in cap.uniform_decode_sizes if s % q]
        if odd:
            yield cap.id, (f"{count(len(odd), 'uniform decode size')} not a multiple of decode_query_len {q} "
                              f"({examples(odd)}): no uniform decode batch has that many tokens")


@lint("W202", "autotune-below-batch", WARNING, needs_engine=True,
      explanation="""Autotuning profiles kernels at token counts up to its num_tokens. A batch above it (up to
      max_num_batched_tokens in production) runs with the config tuned for a smaller M, or the untuned
      default.""",
      fix="""Autotune at max_num_batched_tokens (the default num_tokens).""")
def autotune_below_batch(plan, engine):
    largest = max([engine.scheduler.max_num_batched_tokens]
                  + [s.total_num_scheduled_tokens for s in batches(plan)])
    for step in plan.steps:
        if isinstance(step, Autotune) and step.num_tokens < largest:
            yield step.id, (f"{step.library} autotunes at {step.num_tokens} tokens, below the largest "
                            f"batch ({largest} tokens)")


DUPLICABLE = (Gemm, GroupedGemm, Attention, Autotune, CudaGraph)
INT_LISTS = {"m_values": "M-values", "sizes": "sizes", "uniform_decode_sizes": "uniform decode sizes",
             "buckets": "buckets"}


@lint("W203", "duplicate-step", WARNING, needs_engine=False,
      explanation="""Two steps run the same kernel on the same shape with the same M-values, sizes or token
      counts: the second compiles nothing new and only adds startup time. It usually means two stages cover
      the same layers.""",
      fix="""Drop one of the stages, or narrow one (dense: false, grouped: false, backend, kv_cache_dtype) so
      that each kernel and shape is warmed once.""")
def duplicate_step(plan, engine):
    seen: dict[str, list] = {}
    for step in plan.steps:
        if not isinstance(step, DUPLICABLE):
            continue
        data = step.to_dict()
        rest = {k: v for k, v in data.items() if k not in ("id", "stage", "layers", *INT_LISTS)}
        key = json.dumps(rest, sort_keys=True)
        lists = {k: set(data[k]) for k in INT_LISTS if isinstance(data.get(k), list)}
        for other_id, other in seen.get(key, []):
            common = {k: lists[k] & other[k] for k in lists if k in other}
            if not lists or any(common.values()):
                what = "; ".join(f"{len(v)} of its {INT_LISTS[k]} run there too ({examples(sorted(v))})"
                                 for k, v in common.items() if v)
                yield step.id, f"duplicates {other_id}" + (f": {what}" if what else "")
                break
        seen.setdefault(key, []).append((step.id, lists))


@lint("W204", "compiled-after-ready", WARNING, needs_engine=True,
      explanation="""What the mirrored vLLM release (the plan's vllm_release) compiles after ready for this
      engine, because its own warmup does not reach it: a block-FP8 linear whose kernel runs DeepGEMM's
      fp8_gemm_nt (DeepGemmFp8BlockScaledMMKernel for every M; FlashInferFp8DeepGEMMDynamicBlockScaledKernel,
      which vLLM selects on SM 9.0 with FlashInfer installed, for M >= 32) and that no DeepGEMM step of the
      plan warms; and the V1 model runner (planner/engine/vllm_choices.py says when vLLM runs it), which never calls
      warmup_kernels, so the Triton kernels of its serving batches compile at the first requests. The
      release plans mirror vLLM, so the finding is vLLM's gap, not the plan's.""",
      fix="""Start vLLM with the plugin (WARMUP_PLAN=vllm-0.25-plugin on vLLM 0.25), which warms them; or
      take the upstream fix the finding names; or serve with the other kernel or runner
      (VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER=0, VLLM_USE_V2_MODEL_RUNNER=1) and record it in the engine.""")
def compiled_after_ready(plan, engine):
    release = plan.vllm_release
    if not release:
        return
    max_tokens = engine.scheduler.max_num_batched_tokens
    warmed = {}
    for step in plan.steps:
        if isinstance(step, Gemm) and step.kernel == "fp8_gemm_nt" and step.m_values:
            warmed[(step.n, step.k)] = min(min(step.m_values), warmed.get((step.n, step.k), max_tokens + 1))
    cold: dict = {}
    for layer in engine.model.linear:
        lo = deep_gemm_min_m(layer.kernel)
        if lo is None or lo > max_tokens or warmed.get((layer.n, layer.k), max_tokens + 1) <= lo:
            continue
        hi = min(max_tokens, warmed.get((layer.n, layer.k), max_tokens + 1) - 1)
        cold.setdefault((layer.kernel, layer.n, layer.k, lo, hi), []).append(layer.name)
    for (kernel, n, k, lo, hi), layers in cold.items():
        fix = upstream_fix(release, kernel)
        yield "(plan)", (f"engine {plan.engine}: vLLM {release} compiles DeepGEMM fp8_gemm_nt n={n} k={k} "
                         f"({', '.join(layers)}, on {KERNEL_CLASSES[kernel]}) for M {lo}..{hi} after ready"
                         + (f" (fixed upstream by {fix})" if fix else ""))
    runner, why = model_runner(release, engine)
    if runner == "v1" and not any(True for _ in batches(plan)):
        yield "(plan)", (f"engine {plan.engine}: {why}; V1 never calls warmup_kernels, so the Triton kernels of "
                         "its serving batches (block table, slot mapping, sampler) compile at the first requests "
                         "after ready")


@lint("W206", "layer-planned-around", WARNING, needs_engine=True,
      explanation="""A block-FP8 linear whose K is not a whole number of its FP8 scale blocks (k = 192 with
      [128, 128] blocks): DeepGEMM and the Triton block-FP8 GEMMs the plans model read K one block at a time
      and take no other K, so no plan has a GEMM step for the layer; the plan's not-modelled list names it.
      vLLM serves such a layer where tensor parallelism does not split K, on its Triton or CUTLASS block-FP8
      GEMM, which then compiles or loads at the first forward that reaches it.""",
      fix="""Nothing in the plan: check the first requests with vLLM's JIT monitor. If the layer is
      row-parallel under tensor parallelism, vLLM refuses it: correct k (it is per rank).""")
def layer_planned_around(plan, engine):
    for layer in engine.model.linear:  # the linears of planner.engine.queries.planned_around
        if layer.quant.is_block_fp8(128) and layer.k % 128:
            yield "(plan)", (f"engine {plan.engine}: linear {layer.name} (n={layer.n}, k={layer.k}) is planned "
                             "around: k is not a whole number of FP8 blocks of 128, which no GEMM kernel the plan "
                             "models takes (see the plan's not-modelled list)")
