"""`warmup absorb` (issue 38): each compile after ready a log recorded, against a plan.

For every compile (planner.review.server_logs.Compile) one verdict, a Miss:

* covered: a stage of the plan, expanded for the engine, warms that kernel (its Kernel step
  names it, a DeepGEMM GEMM step for DeepGEMM's kernels, a FlashInfer module among the
  flashinfer_jit step's variants). Where the log has the specialization's constexprs (the
  plugin's JIT log, vLLM's --jit-monitor-verbose) they must agree with one of the step's
  compile keys: else the stage warms the kernel but not that variant (`variant`).
* absorb: no stage of the plan does, but a stage of another built-in plan of the same vLLM
  release does for this engine (the catalog, looked up in name order): the overlay gets a
  copy of that stage. The stage definitions are the plans' own, not a table here.
* not modelled: no plan's stage warms it, and the plan's not-modelled list names its family
  (the entry whose family, else why, names the kernel; else whose family names the kernel's
  stem or, for families no stage kind models at all, the log's family: CuTeDSL, TileLang,
  torch.compile, Triton autotune).
* unknown: nothing warms it and the list does not name it.

The overlay (`-o`) is a plan that extends the plan the server ran with the stages that
absorb the misses, and lists under `modelled` the not-modelled families they now warm; it is
an ordinary plan, so `warmup diff`, `check` and the plugin (WARMUP_PLAN=FILE) take it.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from .. import api
from ..plan.authored import Plan, Stage
from ..plan.steps import Gemm, GroupedGemm, Kernel
from ..resources import builtin_plans
from .server_logs import Compile

COVERED, VARIANT, ABSORB, NOT_MODELLED, UNKNOWN = "covered", "variant", "absorb", "not modelled", "unknown"
STATUSES = (COVERED, VARIANT, ABSORB, NOT_MODELLED, UNKNOWN)
# Families whose kernels no stage kind warms: their not-modelled entry may be found by the
# family's own name (for Triton, DeepGEMM and FlashInfer the kernel decides).
UNMODELLED_FAMILIES = ("CuTeDSL", "TileLang", "torch.compile", "Triton autotune")


class Miss(NamedTuple):
    """One compile after ready and what the plan says about it."""

    compile: Compile
    status: str                  # one of STATUSES
    stage: str | None            # the stage that covers it (covered, variant) or would (absorb)
    stage_plan: str | None       # the plan that stage is from
    stage_kind: str | None
    not_modelled: str | None     # the not-modelled family that names it
    why: str                     # one sentence for the table


class Coverage(NamedTuple):
    """What one expanded plan warms: (family, kernel) -> [(stage, compile keys)], in step order."""

    plan: str
    by_kernel: dict


def coverage(expanded) -> Coverage:
    by_kernel: dict = {}
    for step in expanded.steps:
        for kernel, keys in _warms(step):
            by_kernel.setdefault(kernel, []).append((step.stage, keys))
    return Coverage(expanded.plan, by_kernel)


def _warms(step) -> list:
    """(family, kernel) and compile keys of what a step compiles, as the logs name them."""
    if isinstance(step, Kernel):
        if step.backend == "flashinfer_jit":  # a variant per module, named as FlashInfer names it
            return [(("FlashInfer", v.first.name), ()) for v in step.variants]
        return [(("Triton", step.kernel), tuple(step.compile_keys))]
    if isinstance(step, (Gemm, GroupedGemm)) and step.backend == "deep_gemm":
        return [(("DeepGEMM", "grouped" if isinstance(step, GroupedGemm) else "gemm"), ())]
    return []


def kernel_of(compile_: Compile) -> tuple:
    """The (family, kernel) a compile is looked up by: DeepGEMM's cache names its kernels by
    layout (sm90_fp8_gemm_1d2d, sm90_m_grouped_fp8_gemm_contiguous_1d2d), the plan by GEMM."""
    if compile_.family == "DeepGEMM":
        return ("DeepGEMM", "grouped" if "grouped" in compile_.kernel else "gemm")
    family = "Triton" if compile_.family == "Triton autotune" else compile_.family
    return (family, compile_.kernel)


def classify(compiles, expanded, catalog=None) -> list:
    """A Miss per compile. `catalog`: a callable giving the other plans' (Plan, Coverage) of the
    release, called only when a compile is not covered (expanding them costs time)."""
    own = coverage(expanded)
    out = []
    for compile_ in compiles:
        found = own.by_kernel.get(kernel_of(compile_))
        if found:
            out.append(_covered(compile_, found, expanded.plan))
            continue
        absorbed = _from_catalog(compile_, catalog() if catalog else ())
        out.append(absorbed or _unmodelled(compile_, expanded.not_modelled))
    return out


def _covered(compile_: Compile, found: list, plan: str) -> Miss:
    for stage, keys in found:
        if not compile_.constants or not keys or any(constants_agree(compile_.constants, key) for key in keys):
            return Miss(compile_, COVERED, stage, plan, None, None, f"stage {stage} warms it")
    stage = found[0][0]
    return Miss(compile_, VARIANT, stage, plan, None, None,
                f"stage {stage} warms {compile_.kernel}, but none of its compile keys has these constexprs")


def _from_catalog(compile_: Compile, catalog) -> Miss | None:
    for plan, cover in catalog:
        found = cover.by_kernel.get(kernel_of(compile_))
        if found:
            stage = next(s for s in plan.stages if s.name == found[0][0])
            return Miss(compile_, ABSORB, stage.name, plan.name, stage.kind, None,
                        f"no stage of this plan warms it; stage {stage.name} of {plan.name} ({stage.kind}) does")
    return None


def _unmodelled(compile_: Compile, gaps) -> Miss:
    gap = not_modelled_entry(compile_, gaps)
    if gap is None:
        return Miss(compile_, UNKNOWN, None, None, None, None,
                    "no stage kind warms it, and the plan's not-modelled list does not name it")
    return Miss(compile_, NOT_MODELLED, None, None, None, gap["family"], gap["family"])


def not_modelled_entry(compile_: Compile, gaps) -> dict | None:
    """The entry of a plan's not-modelled list that names this compile's family (module docstring)."""
    kernel = compile_.kernel
    stem = kernel.strip("_").removesuffix("_kernel")
    tests = [lambda g: _names(g["family"], kernel), lambda g: _names(g["why"], kernel),
             lambda g: len(stem) > 3 and _names(g["family"], stem)]
    if compile_.family in UNMODELLED_FAMILIES:
        tests.append(lambda g: _names(g["family"], compile_.family.split()[0]))
    # Within a test, an entry whose family starts with the log's ("Triton fused_moe (...)") first.
    word = compile_.family.split()[0]
    ordered = sorted(gaps, key=lambda g: not g["family"].startswith(word))
    for test in tests:
        for gap in ordered:
            if test(gap):
                return gap
    return None


def _names(text: str, word: str) -> bool:
    """`word` in `text` as a whole word (torch.compile, _topk_topp_kernel, CuTeDSL)."""
    return re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", text) is not None


# --- compile keys --------------------------------------------------------------------------------------

def constants_agree(constants: tuple, key: str) -> bool:
    """Whether a log's constexprs fit a plan's compile key ('vllm.topk_topp[VOCAB_SIZE=151936
    TOPK_ENABLED=1 ...](...)'): every constexpr both name has one value (True is 1)."""
    bracket = re.search(r"\[([^\]]*)\]", key)
    planned = dict(item.partition("=")[::2] for item in bracket.group(1).split()) if bracket else {}
    shared = [(name, value) for name, value in constants if name in planned]
    return all(_value(value) == _value(planned[name]) for name, value in shared)


def _value(text: str) -> str:
    text = str(text).strip().strip("'\"")
    return {"True": "1", "False": "0", "true": "1", "false": "0"}.get(text, text)


# --- the catalog: the release's other built-in plans ---------------------------------------------------

def release_catalog(plan_name: str, vllm_release: str | None, engine):
    """A callable: [(Plan, Coverage)] of the built-in plans of the vLLM release other than
    `plan_name`, expanded for `engine`, in name order; computed once, when first asked."""
    memo: list = []

    def catalog() -> list:
        if not memo:
            memo.append([(other, coverage(api.expand(other, engine)))
                         for other in release_plans(plan_name, vllm_release)])
        return memo[0]
    return catalog


def release_plans(plan_name: str, vllm_release: str | None) -> list:
    """The built-in plans (Plan) that mirror `vllm_release`, but `plan_name`; none for no release."""
    out = []
    for name in builtin_plans():
        if name == plan_name or not vllm_release:
            continue
        other = api.load_plan(name)
        if other.vllm_release == vllm_release:
            out.append(other)
    return out


# --- the overlay ---------------------------------------------------------------------------------------

class Overlay(NamedTuple):
    """A plan that extends the plan the server ran with the stages that absorb its misses."""

    name: str
    extends: str
    stages: tuple        # (Stage, [Miss]) in the order of their first miss
    modelled: tuple      # not-modelled families of the plan these stages warm


def overlay(plan: Plan, misses: list, extends: str) -> Overlay:
    sources = {other.name: other for other in release_plans(plan.name, plan.vllm_release)}
    chosen: dict = {}
    for miss in misses:
        if miss.status == ABSORB:
            stage = next(s for s in sources[miss.stage_plan].stages if s.name == miss.stage)
            chosen.setdefault((miss.stage_plan, miss.stage), (stage, []))[1].append(miss)
    taken = {s.name for s in plan.stages}
    stages = []
    for stage, absorbed in chosen.values():
        name = stage.name if stage.name not in taken else f"absorbed-{stage.name}"[:64]
        taken.add(name)
        stages.append((stage._replace(name=name), absorbed))
    modelled = _now_modelled(plan, [m for _, ms in stages for m in ms])
    return Overlay(f"{plan.name}-absorbed"[:64], extends, tuple(stages), tuple(modelled))


def _now_modelled(plan: Plan, absorbed: list) -> list:
    """The plan's not-modelled families that name an absorbed kernel: the overlay warms them."""
    out = []
    for miss in absorbed:
        gap = not_modelled_entry(miss.compile, plan.not_modelled)
        if gap is not None and gap["family"] not in out:
            out.append(gap["family"])
    return out


def overlay_document(layer: Overlay, plan: Plan, logs: list) -> dict:
    """The overlay as a plan document (schemas/plan.schema.json)."""
    doc = {"name": layer.name, "extends": layer.extends,
           "description": (f"{plan.name} plus the stages that warm what the server compiled after ready, "
                           f"as recorded in {', '.join(logs)} (written by `warmup absorb`).")}
    doc["stages"] = [_stage_entry(stage, misses) for stage, misses in layer.stages]
    if layer.modelled:
        doc["modelled"] = list(layer.modelled)
    return doc


def _stage_entry(stage: Stage, misses: list) -> dict:
    seen = ", ".join(f"{m.compile.family} {m.compile.kernel} ({os.path.basename(m.compile.file)}:"
                     f"{m.compile.line})" for m in misses)
    entry = {"name": stage.name, "kind": stage.kind,
             "description": f"From plan {misses[0].stage_plan}, stage {misses[0].stage}: compiled after ready: {seen}."}
    if stage.when is not True:
        entry["when"] = stage.when
    written = {k: stage.params[k] for k in stage.param_origins if k != "when" and k in stage.params}
    if written:
        entry["with"] = written
    return entry


def extends_ref(plan_ref: str, plan_path: str, output: str | None) -> str:
    """How the overlay names its parent: a built-in plan by name, a file by its path relative
    to the overlay's directory (as planner.plan.authored resolves `extends`) when the two sit near each
    other (a review directory, a repository), else by its absolute path."""
    if plan_ref in builtin_plans():
        return plan_ref
    where = os.path.dirname(os.path.abspath(output)) if output else os.getcwd()
    ref = os.path.relpath(os.path.abspath(plan_path), where)
    if ref.startswith("../.."):
        return os.path.abspath(plan_path)
    return ref if "/" in ref or ref.endswith((".yaml", ".yml")) else f"./{ref}"
