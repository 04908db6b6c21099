"""The step model (planner.plan.steps, its records planner.plan.records): construction, immutability, equality,
(de)serialisation."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from planner.engine.config import load_engine
from planner.plan import steps
from planner.plan.records import FrozenStepError
from planner.review.phrasing import PHRASING
from planner.plan.steps import (KINDS, Cleanup, CudaGraph, Decode, Gemm, GroupedGemm, Prefill, RunnerStep, Sample,
                           Variant, step_from_dict)
from tests.factories import steps_of

ROOT = Path(__file__).resolve().parents[2]

# Plans and engines that between them produce every step kind.
PLAN_ENGINES = [("vllm", "deepseek-v3-fp8-tp8-h200"), ("vllm-head", "qwen3-30b-a3b-fp8-h100"),
                ("triton", "qwen3-30b-a3b-fp8-h100"), ("reference", "llama-3.1-8b-fp8-h100")]


def gemm(**changes) -> Gemm:
    fields = dict(id="deep_gemm/qkv", stage="deep_gemm", kernel="fp8_gemm_nt", backend="deep_gemm",
                  n=6144, k=4096, m_values=[1, 2, 3])
    return Gemm(**{**fields, **changes})


@pytest.fixture(scope="module")
def every_step() -> list:
    out = []
    for plan, engine in PLAN_ENGINES:
        out += steps_of(plan, load_engine(engine))
    return out


def test_fields_in_declaration_order_bases_first():
    assert steps.field_names(Gemm)[:6] == ("id", "stage", "kernel", "backend", "n", "k")
    assert steps.field_names(Gemm)[-3:] == ("exact", "max_value", "variants")
    assert "kind" not in steps.field_names(Gemm) and "RANGE_NAME" not in steps.field_names(Gemm)


def test_the_gemm_kinds_share_their_shape():
    """gemm and grouped_gemm declare their shape once (GemmLike); a kind's SHAPE is written first,
    in its order: a grouped GEMM's expert fields among n and k, as its plans have always had them."""
    assert steps.field_names(GroupedGemm) == ("id", "stage", *GroupedGemm.SHAPE, "block_size", "layers",
                                              "m_values", "exact", "max_value", "variants")
    assert GroupedGemm.SHAPE == ("kernel", "backend", "weight", "num_groups", "n", "k", "top_k", "alignment")
    assert set(steps.field_names(Gemm)) < set(steps.field_names(GroupedGemm))


def test_scheduler_steps_share_their_declared_fields():
    """Prefill, Decode and Cleanup are SchedulerSteps (what execute_model reads): each has every
    field, requires and writes the ones it schedules, and keeps the others at their defaults."""
    cleanup = Cleanup(id="w/cleanup", stage="w", finished_req_ids=["r0"])
    assert (cleanup.requests, cleanup.total_num_scheduled_tokens, cleanup.num_common_prefix_blocks) == ((), 0, None)
    assert cleanup.to_dict() == {"id": "w/cleanup", "stage": "w", "kind": "cleanup", "finished_req_ids": ["r0"]}
    with pytest.raises(TypeError, match="does not schedule requests"):
        Cleanup(id="w/c", stage="w", finished_req_ids=(), requests=("r0",))
    with pytest.raises(TypeError, match="needs the field 'prompt_token_ids'"):
        Prefill(id="w/p", stage="w", requests=(), total_num_scheduled_tokens=0, num_common_prefix_blocks=())
    # the executor's loop finds the model runner's steps by their runner_method
    assert [k for k in KINDS.values() if hasattr(k, "runner_method")] == [
        k for k in KINDS.values() if issubclass(k, RunnerStep)] == [Prefill, Sample, Decode, Cleanup, CudaGraph]


def test_defaults_freezing_and_required_fields():
    g = gemm()
    assert g.m_values == (1, 2, 3) and g.variants == () and g.exact is False and g.max_value is None
    with pytest.raises(TypeError, match="needs the field 'n'"):
        Gemm(id="a/b", stage="a", kernel="k", backend="b", k=1)
    with pytest.raises(TypeError, match="unexpected or repeated field 'bogus'"):
        gemm(bogus=1)
    with pytest.raises(TypeError, match="at most"):
        Gemm(*range(len(steps.field_names(Gemm)) + 1))


def test_steps_are_frozen():
    g = gemm()
    with pytest.raises(FrozenStepError):
        g.n = 1
    with pytest.raises(FrozenStepError):
        del g.n


def test_equality_hash_replace_and_pickle():
    g = gemm()
    assert g == gemm() and hash(g) == hash(gemm()) and g != gemm(n=1)
    assert g != Prefill(id=g.id, stage=g.stage, requests=(), total_num_scheduled_tokens=0,
                        prompt_token_ids=(), num_common_prefix_blocks=())
    keyed = g.replace(variants=[Variant("k1", 1)], exact=True)
    assert keyed.variants == (Variant("k1", 1),) and keyed.exact and g.variants == ()
    assert pickle.loads(pickle.dumps(keyed)) == keyed
    assert repr(g).startswith("Gemm(id='deep_gemm/qkv', stage='deep_gemm', kernel='fp8_gemm_nt'")


def test_kinds_table_covers_the_ten_kinds():
    assert sorted(KINDS) == sorted(["prefill", "sample", "decode", "cleanup", "gemm", "grouped_gemm",
                                    "attention", "kernel", "autotune", "cudagraph"])
    assert all(cls.kind == kind for kind, cls in KINDS.items())


def test_every_kind_has_its_phrasing():
    """The English of every kind is in one table by step class (planner.review.phrasing)."""
    assert set(PHRASING) == set(KINDS.values())


def test_every_kind_round_trips_through_its_plain_form(every_step):
    assert {s.kind for s in every_step} == set(KINDS)
    for step in every_step:
        plain = step.to_dict()
        assert plain["kind"] == step.kind and list(plain)[:3] == ["id", "stage", "kind"]
        assert step_from_dict(plain) == step, step.id


def test_kind_branches_stay_in_the_step_model():
    """Issue 15's target: at most 5 step-kind comparisons outside planner/plan/steps.py."""
    kinds = "|".join(KINDS)
    pattern = re.compile(rf"""kind\s*[!=]=\s*["']({kinds})["']""")
    found = [f"{path.relative_to(ROOT)}:{n}"
             for package in ("planner", "executor", "kernel_model")
             for path in sorted((ROOT / package).rglob("*.py")) if path.name != "steps.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert len(found) <= 5, found
