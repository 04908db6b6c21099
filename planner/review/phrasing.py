"""The English of each step kind: what `warmup diff` compares and says, and the table's detail.

The step model (planner.plan.steps) holds fields, calls, keys and serialisation; how a reviewer
reads a step is written here, once per step class in ``PHRASING`` (looked up by the step's
class, as planner.plan.steps.KINDS is by kind). Each ``Phrasing`` answers four questions:

    facts(step)            the step's content as a reviewer names it: `warmup diff` compares these
    describe(step)         one line for an added or removed step
    change_lines(step, c)  the lines of `warmup diff` for the changed facts ``c`` (old -> this
                           step): a kind phrases the facts it knows and leaves the rest to
                           planner.words.FactChanges (``key old -> new``)
    table_detail(group)    the detail column of `warmup plan -f table` for a stage's steps of one kind

`warmup plan -f table` imports this module and no other of planner.review, so it declares no
dataclass (the start-up rule: planner/__init__.py).
"""

from __future__ import annotations

from ..plan.records import thaw
from ..plan.steps import Attention, Autotune, Cleanup, CudaGraph, Decode, Gemm, GroupedGemm, Kernel, Prefill, Sample
from ..words import FactChanges, IntSet, count, list_summary, show, spread


def facts(step) -> dict:
    """The step's content as a reviewer names it: `warmup diff` compares these."""
    return PHRASING[type(step)].facts(step)


def describe(step) -> str:
    """One line for an added or removed step."""
    return PHRASING[type(step)].describe(step)


def change_lines(step, changes: FactChanges) -> list[str]:
    """The lines of `warmup diff` for a step whose facts changed (old -> `step`)."""
    return PHRASING[type(step)].change_lines(step, changes)


def table_detail(group: list) -> str:
    """The detail column of `warmup plan -f table` for a stage's steps of one kind."""
    return PHRASING[type(group[0])].table_detail(group)


class Phrasing:
    """How a reviewer reads one step kind. A kind names its own facts and line; the changes it
    does not phrase get the generic lines, and its table detail is empty unless it says more."""

    def facts(self, step) -> dict:
        raise NotImplementedError

    def describe(self, step) -> str:
        raise NotImplementedError

    def change_lines(self, step, c: FactChanges) -> list[str]:
        return c.remaining()

    def table_detail(self, group: list) -> str:
        return ""


# --- the model runner's steps --------------------------------------------------------------------------

class PrefillPhrasing(Phrasing):
    """A prefill reads as its prompts: how many requests of how many tokens, in how many blocks."""

    def facts(self, step) -> dict:
        reqs = step.requests
        return {"prompt_len": spread([r.num_scheduled_tokens for r in reqs]) if reqs else 0,
                "num_reqs": len(reqs), "tokens": step.total_num_scheduled_tokens,
                "blocks per request": blocks_per_request([r.block_ids for r in reqs])}

    def describe(self, step) -> str:
        f = self.facts(step)
        return (f"prefill: {f['num_reqs']} requests x {f['prompt_len']} tokens ({f['tokens']} tokens, "
                f"{f['blocks per request']} blocks per request)")

    def change_lines(self, step, c: FactChanges) -> list[str]:
        lines = []
        if "prompt_len" in c or "num_reqs" in c:
            main = "prompt_len" if "prompt_len" in c else "num_reqs"
            other = "num_reqs" if main == "prompt_len" else "prompt_len"
            first = c.take(main)
            detail = c.take(other) if other in c else f"{other} {show(c.after[other])}"
            if "tokens" in c:
                detail += ", " + c.take("tokens")
            lines.append(f"prefill: {first} ({detail})")
        return lines + c.remaining()

    def table_detail(self, group: list) -> str:
        return batch_detail(group)


class DecodePhrasing(Phrasing):
    """A decode reads as its totals first, then what each request computes and drafts."""

    PER_REQUEST = ("tokens per request", "spec tokens per request", "computed tokens per request")

    def facts(self, step) -> dict:
        reqs = step.requests

        def per(values):
            return spread(values) if reqs else 0

        return {"requests": len(reqs), "tokens": step.total_num_scheduled_tokens,
                "tokens per request": per([r.num_scheduled_tokens for r in reqs]),
                "computed tokens per request": per([r.num_computed_tokens for r in reqs]),
                "spec tokens per request": per([r.num_spec_tokens for r in reqs]),
                "new blocks": sum(len(ids) for r in reqs for ids in (r.new_block_ids or ()))}

    def describe(self, step) -> str:
        f = self.facts(step)
        return (f"decode: {count(f['requests'], 'request')}, {count(f['tokens'], 'token')} "
                f"({f['spec tokens per request']} spec tokens per request)")

    def change_lines(self, step, c: FactChanges) -> list[str]:
        if not c.rest:
            return []
        context = "" if "requests" in c else f" ({count(c.after['requests'], 'request')})"
        totals = [c.take(k) for k in ("requests", "tokens", "new blocks") if k in c]
        if not totals:
            context = f" ({count(c.after['tokens'], 'token')}, unchanged)"
            totals = [count(c.after["requests"], "request")]
        lines = ["decode: " + ", ".join(totals) + context]
        per = [c.take(k).replace(" per request", "") for k in self.PER_REQUEST if k in c]
        if per:
            lines.append("per request: " + ", ".join(per))
        return lines + c.remaining()

    def table_detail(self, group: list) -> str:
        return batch_detail(group)


class CleanupPhrasing(Phrasing):
    def facts(self, step) -> dict:
        return {"finished requests": len(step.finished_req_ids)}

    def describe(self, step) -> str:
        return f"cleanup: {len(step.finished_req_ids)} requests finish"


class SamplePhrasing(Phrasing):
    def facts(self, step) -> dict:
        g = step.grammar_bitmask
        return {"grammar bitmask": f"{g.num_rows} rows x {g.width} words" if g else "none",
                "features": frozenset(step.features), "sampling_params": thaw(step.sampling_params)}

    def describe(self, step) -> str:
        f = self.facts(step)
        return f"sample: {len(f['features'])} sampler features, grammar bitmask {f['grammar bitmask']}"

    def table_detail(self, group: list) -> str:
        return "grammar bitmask" if any(s.grammar_bitmask for s in group) else ""


class CudaGraphPhrasing(Phrasing):
    """A capture reads as its sizes, compared as sets."""

    SIZES = (("sizes", "cudagraph sizes"), ("uniform_decode_sizes", "uniform decode sizes"))

    def facts(self, step) -> dict:
        out = {"mode": step.mode, "sizes": IntSet(sorted(set(step.sizes))),
               "uniform_decode_sizes": IntSet(sorted(set(step.uniform_decode_sizes)))}
        return {**out, **set_fields(step, "decode_query_len", "num_warmups")}

    def describe(self, step) -> str:
        return (f"cudagraph {step.mode}: {list_summary(step.sizes, 'sizes')}, "
                f"{list_summary(step.uniform_decode_sizes, 'uniform decode sizes')}")

    def change_lines(self, step, c: FactChanges) -> list[str]:
        return [f"{label}: {c.take_set(key)}" for key, label in self.SIZES if key in c] + c.remaining()

    def table_detail(self, group: list) -> str:
        s = group[0]
        return f"{s.mode}, largest {max(s.sizes + s.uniform_decode_sizes)}"


# --- a backend's steps -----------------------------------------------------------------------------------

class KeyedPhrasing(Phrasing):
    """A keyed step (planner.plan.steps.Keyed) reads as its values, then its compile keys; RANGE is
    how `warmup diff` names the end of the range it declares (its max_value)."""

    RANGE = "max_value"

    def key_facts(self, step) -> dict:
        out = {"compile_keys": frozenset(step.compile_keys)} if step.variants else {}
        if step.max_value is not None:
            out[self.RANGE] = step.max_value
        return out

    def change_lines(self, step, c: FactChanges) -> list[str]:
        lines = self.value_change_lines(step, c)
        if "compile_keys" in c:
            c.drop("variants")  # a kernel step's launches: the key change says it
            lines.append(f"{self.name(step)}: {c.take_keys()}")
        return lines + c.remaining()

    def value_change_lines(self, step, c: FactChanges) -> list[str]:
        return []

    def name(self, step) -> str:
        """The step as a line of `warmup diff` names it."""
        return f"{step.kind} {step.kernel}"


class GemmPhrasing(KeyedPhrasing):
    """gemm: a weight shape (its SHAPE fields) and its M-values (compared as sets)."""

    RANGE = "max_m"

    def name(self, step) -> str:
        return f"gemm n={step.n} k={step.k}"

    def facts(self, step) -> dict:
        out = {name: getattr(step, name) for name in step.SHAPE}
        if step.block_size is not None:
            out["block_size"] = list(step.block_size)
        return {**out, "layers": frozenset(step.layers), "m_values": IntSet(sorted(set(step.m_values))),
                **self.key_facts(step)}

    def describe(self, step) -> str:
        return f"{self.name(step)} ({step.kernel}, {step.backend}): {list_summary(step.m_values, 'M-values')}"

    def value_change_lines(self, step, c: FactChanges) -> list[str]:
        if "m_values" not in c:
            return []
        return [f"{self.name(step)}: {c.take_set('m_values', 'M-values', always_both=True)}"]

    def table_detail(self, group: list) -> str:
        return f"{group[0].kernel} ({group[0].backend})"


class GroupedGemmPhrasing(GemmPhrasing):
    """grouped_gemm: a GEMM whose shape also names the weight and the experts."""

    def name(self, step) -> str:
        return f"grouped_gemm {step.weight} experts={step.num_groups} n={step.n} k={step.k}"


class AttentionPhrasing(KeyedPhrasing):
    RANGE = "max_tokens"

    def facts(self, step) -> dict:
        out = {name: getattr(step, name) for name in ("kernel", "backend", "num_heads", "num_kv_heads",
                                                       "head_size", "scale", "logits_soft_cap")}
        out.update(sliding_window=list(step.sliding_window), dtype=step.dtype, num_tokens=step.num_tokens,
                   is_causal=step.is_causal, layers=frozenset(step.layers))
        return {**out, **self.key_facts(step)}

    def describe(self, step) -> str:
        return (f"attention {step.kernel} heads={step.num_heads} kv_heads={step.num_kv_heads} "
                f"head_size={step.head_size}: {step.num_tokens} tokens")

    def name(self, step) -> str:
        return f"attention h={step.num_heads} d={step.head_size}"

    def table_detail(self, group: list) -> str:
        keys = {(g.num_heads, g.num_kv_heads, g.head_size) for g in group}
        return f"{group[0].kernel}, {len(keys)} layer keys"


class KernelPhrasing(KeyedPhrasing):
    def facts(self, step) -> dict:
        return {"backend": step.backend, "kernel": step.kernel,
                "variants": [v.first.spec() for v in step.variants], **self.key_facts(step)}

    def describe(self, step) -> str:
        return f"kernel {step.kernel} ({step.backend}): {count(len(step.variants), 'variant')}"

    def table_detail(self, group: list) -> str:
        return f"{len(group)} kernels ({group[0].backend})"


class AutotunePhrasing(Phrasing):
    def facts(self, step) -> dict:
        out = {"library": step.library, "num_tokens": step.num_tokens,
               "buckets": IntSet(sorted(set(step.buckets))) if step.buckets is not None else None}
        out.update(set_fields(step, "cache", "randomize_inputs"))
        if step.shapes is not None:
            out["shapes"] = frozenset(f"{s.kernel} n={s.n} k={s.k}" for s in step.shapes)
        return out

    def describe(self, step) -> str:
        return (f"autotune {step.library} at {step.num_tokens} tokens"
                + (f", {list_summary(step.buckets, 'buckets')}" if step.buckets else ""))

    def table_detail(self, group: list) -> str:
        s = group[0]
        return f"{s.library} at {s.num_tokens} tokens" + (f", {len(s.buckets)} buckets" if s.buckets else "")


PHRASING: dict[type, Phrasing] = {
    Prefill: PrefillPhrasing(), Decode: DecodePhrasing(), Cleanup: CleanupPhrasing(), Sample: SamplePhrasing(),
    CudaGraph: CudaGraphPhrasing(), Gemm: GemmPhrasing(), GroupedGemm: GroupedGemmPhrasing(),
    Attention: AttentionPhrasing(), Kernel: KernelPhrasing(), Autotune: AutotunePhrasing()}


# --- helpers -----------------------------------------------------------------------------------------------

def set_fields(step, *names: str) -> dict:
    """The optional fields of a step that are set: a fact only where the plan gives one."""
    return {name: getattr(step, name) for name in names if getattr(step, name) is not None}


def blocks_per_request(block_ids: list) -> object:
    """Blocks each request holds, per KV group: '3', '2..4', or '3 + 1' for two groups."""
    per_group = [[len(g) for g in (groups or ())] for groups in block_ids]
    if not per_group or not per_group[0]:
        return 0
    groups = [spread([counts[g] if g < len(counts) else 0 for counts in per_group])
              for g in range(max(len(c) for c in per_group))]
    return groups[0] if len(groups) == 1 else " + ".join(str(g) for g in groups)


def batch_detail(group: list) -> str:
    """The table's detail of a group of batches: the requests they schedule, each counted once (a
    decode step schedules requests a prefill added), and their tokens."""
    requests = len({r.req_id for g in group for r in g.requests})
    tokens = sum(g.total_num_scheduled_tokens for g in group)
    if len(group) == 1:
        return f"{count(requests, 'request')}, {count(tokens, 'token')}"
    return f"{count(requests, 'distinct request')}, {count(tokens, 'token')} in all"
