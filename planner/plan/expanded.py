"""The expanded plan as a typed record, its summary, and its plain (JSON/YAML) forms.

``ExpandedPlan`` is what `warmup plan` makes and `warmup execute` runs: a header (the
plan and engine it was made for, the digest of its inputs) and typed steps
(planner.plan.steps). ``to_dict`` gives the plain form the renderers write (format v2,
schemas/expanded-plan.schema.json); ``from_dict`` reads one back, and converts a file of
format v1 (schemas/expanded-plan-v1.schema.json), which users have committed: the same
plan in either format is the same typed plan, so `warmup diff v1.yaml v2.yaml` of one
plan shows no change.
"""

from __future__ import annotations

from typing import NamedTuple

from .steps import KINDS, Kernel, Step, Variant, step_from_dict

FORMAT = "warmup-expanded-plan/v2"
FORMAT_V1 = "warmup-expanded-plan/v1"
FORMATS = (FORMAT, FORMAT_V1)  # what is read; FORMAT is what is written
SCHEMAS = {FORMAT: "expanded-plan", FORMAT_V1: "expanded-plan-v1"}

SUMMARY_KEYS = ("requests", "scheduled_tokens", "gemm_shapes", "gemm_calls", "attention_calls", "autotune_runs",
                "cudagraph_captures")


class ExpandedPlan(NamedTuple):
    """An expanded plan: its header and its typed steps (an immutable record)."""

    plan: str
    engine: str
    planner_version: str
    digest: str
    inputs: dict
    steps: tuple
    format: str = FORMAT
    not_modelled: tuple = ()  # {family, why, action} of what the plan leaves out (planner.plan.authored.Plan)
    vllm_release: str | None = None  # the vLLM release the plan mirrors (planner.plan.authored.Plan)

    @property
    def summary(self) -> dict:
        return summarize(self.steps)

    def header(self) -> dict:
        """What identifies the plan: its name, its engine, its digest and inputs."""
        return {"plan": self.plan, "engine": self.engine, "digest": self.digest, "inputs": self.inputs}

    def to_dict(self) -> dict:
        data = {"format": FORMAT, "plan": self.plan, "engine": self.engine, "planner_version": self.planner_version}
        if self.vllm_release:  # absent for plans of no release: they keep their bytes
            data["vllm_release"] = self.vllm_release
        data.update({"digest": self.digest, "inputs": self.inputs, "summary": self.summary,
                     "steps": [step.to_dict() for step in self.steps]})
        if self.not_modelled:  # absent when empty: plans without gaps keep their bytes
            data["not_modelled"] = [dict(gap) for gap in self.not_modelled]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "ExpandedPlan":
        """From the plain form (schema-valid, runs decompressed), of either format version."""
        read = from_v1 if data["format"] == FORMAT_V1 else step_from_dict
        return cls(plan=data["plan"], engine=data["engine"], planner_version=data["planner_version"],
                   digest=data["digest"], inputs=dict(data["inputs"]),
                   steps=tuple(read(s) for s in data["steps"]),
                   not_modelled=tuple(dict(gap) for gap in data.get("not_modelled", ())),
                   vllm_release=data.get("vllm_release"))


def summarize(steps) -> dict:
    """Totals a reviewer wants first: steps per kind, requests, GEMM calls."""
    by_kind: dict = {}
    totals = dict.fromkeys(SUMMARY_KEYS, 0)
    for step in steps:
        by_kind[step.kind] = by_kind.get(step.kind, 0) + 1
        for key, value in step.totals().items():
            totals[key] += value
    return {"steps": len(steps), "steps_by_kind": dict(sorted(by_kind.items())), **totals}


# --- format v1 -------------------------------------------------------------------------------------------
#
# v1 listed `compile_keys` beside the values and paired them by position: in exact mode
# compile_keys[i] is m_values[i]'s key, otherwise `key_m_values[i]` is the key's first M; an
# attention step had one key for its num_tokens and `max_tokens` for its range; a kernel step
# had `variants` (the launches) and `compile_keys` in the same order. Attention steps named
# no backend: every attention kernel was the triton backend's.

V1_RANGE = {"gemm": "max_m", "grouped_gemm": "max_m", "attention": "max_tokens"}


def from_v1(data: dict) -> Step:
    """A typed step from a v1 step."""
    kind = data["kind"]
    if kind not in ("gemm", "grouped_gemm", "attention", "kernel"):
        return step_from_dict(data)
    body = dict(data)
    keys = body.pop("compile_keys", None) or []
    firsts = body.pop("key_m_values", None)
    max_value = body.pop(V1_RANGE.get(kind, ""), None)
    if kind == "kernel":
        return Kernel(id=body["id"], stage=body["stage"], backend=body["backend"], kernel=body["kernel"],
                      variants=Kernel.launches(body["kernel"], zip(keys, body.pop("variants"))))
    if kind == "attention":
        body["backend"] = "triton"
        firsts = [body["num_tokens"]]
    elif firsts is None:
        firsts = body["m_values"] if len(keys) == len(body["m_values"]) else []
    step = KINDS[kind].from_dict(body)
    exact = bool(keys) and data.get("key_m_values") is None
    variants = tuple(map(Variant, keys, firsts)) if len(firsts) == len(keys) else ()
    return step.replace(variants=variants, exact=exact and bool(variants), max_value=max_value)
