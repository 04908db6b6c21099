"""The plan one vLLM worker runs: its engine config, the plan made for it, and the plan as the plugin runs it.

The engine config comes from the live VllmConfig (or WARMUP_ENGINE), before the weights load; the
plan is WARMUP_PLAN expanded for it, or a saved expanded plan checked fresh for it (a stale one is
refused). Once the weights are loaded, the live layers are checked against the engine config and
the plan made again for the shapes it lacked (``check_live_layers``).

What the plugin runs differs from the plan in how, never in what: its compile keys are the
plan's (``plugin_plan``; tests/vllm_bridge/test_vllm_plugin_cpu.py checks it on every shipped engine).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from planner.api import check_fresh, expand, load_engine, load_target, source_plan
from planner.engine import hf
from planner.errors import PlanError, one_line
from planner.plan.steps import Autotune, GemmLike
from planner.words import count

from ..settings import Settings
from .executor_options import DEEP_GEMM_BACKEND

VLLM_RUNS = (Autotune,)  # steps vLLM's own kernel_warmup runs (FlashInfer tunes through the model)


def derive_engine(vllm_config, settings: Settings):
    """The engine config of this worker: `warmup engine --from-vllm`'s own function on the live
    VllmConfig, or the engine config WARMUP_ENGINE names; a refusal is a PlanError."""
    if settings.engine:
        return load_engine(settings.engine)
    return engine_of(vllm_config)


def engine_of(vllm_config, device: str | None = None, where: str | None = None):
    """vllm_bridge.engine.from_vllm's engine config of a VllmConfig, its refusals one line each (PlanError):
    what the model's config.json says, at that file (as `warmup engine --from-hf` says it); what
    vLLM resolved, at `where` (default: the VllmConfig)."""
    # vllm_bridge.engine.from_vllm imports nothing of vLLM's: it reads the live config
    from ..engine.from_vllm import engine_from_vllm_config

    try:
        return engine_from_vllm_config(vllm_config, device)
    except hf.HFConfigError as e:
        config = config_json_of(vllm_config.model_config)
        raise e.as_plan_error(config, read_text(config)) from None
    except ValueError as e:
        raise PlanError(str(e), file=where or f"<VllmConfig of {vllm_config.model_config.model}>") from None


def config_json_of(model_config) -> str:
    """The model's config.json: on disk (its directory, else the Hugging Face cache), else its name."""
    model = str(model_config.model)
    return config_path(model, getattr(model_config, "revision", None)) or os.path.join(model, "config.json")


def config_path(model: str, revision=None) -> str | None:
    """The model's config.json on disk: in its directory, else in the Hugging Face cache."""
    if os.path.isdir(model):
        path = os.path.join(model, "config.json")
        return path if os.path.isfile(path) else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(model, "config.json", revision=revision)
    return found if isinstance(found, str) else None


def read_text(path: str) -> str | None:
    """A file's text (to find an error's line in it), or None where it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def make_plan(settings: Settings, engine):
    """The expanded plan to run: WARMUP_PLAN expanded for `engine`, or a saved plan checked fresh."""
    target = load_target(settings.plan, engine_hint="WARMUP_PLAN names a plan, not an engine config")
    if target.expanded is None:
        return expand(target.plan, engine)
    plan = source_plan(target.expanded, None, file=target.path)
    check_fresh(target.expanded, engine, plan, file=target.path)
    return target.expanded


# --- what the plugin runs: the plan's keys, its own way -------------------------------------------------

def plugin_plan(expanded):
    """The plan as this worker runs it: the steps vLLM's kernel_warmup does not run itself, each
    DeepGEMM step on vLLM's DeepGEMM. The calls are the plan's own: the pool compiles each
    compile key once (at its first M), and the main process then makes every planned call, which
    loads (bench/RESULTS.md part S: the full sweep of cached kernels takes about a second). A
    kernel the dispatch model did not predict is then compiled during the warmup, counted in the
    stage, never first met after ready (Qwen3-30B-A3B on the V1 runner met two that way)."""
    return expanded._replace(steps=tuple(_on_vllms_deep_gemm(s) for s in expanded.steps
                                         if not isinstance(s, VLLM_RUNS)))


def _on_vllms_deep_gemm(step):
    if isinstance(step, GemmLike) and step.backend == "deep_gemm":
        return step.replace(backend=DEEP_GEMM_BACKEND)
    return step


def compile_keys(expanded) -> set[str]:
    """Every compile key the plan's steps name."""
    return {key for step in expanded.steps for key in getattr(step, "compile_keys", ())}


# --- after the weights load: the live layers against the engine config ------------------------------------

class LiveCheck(NamedTuple):
    """What the live layers said of the plan: the difference, one line (falsy: none), and the engine
    config and plan to run from here on (made again where they had shapes the engine lacked)."""

    why: str | None
    engine: Any
    expanded: Any


def check_live_layers(model, settings: Settings, engine, expanded) -> LiveCheck:
    """The loaded model's block-FP8 kernels and shapes against the engine config's (the plan's
    DeepGEMM steps follow them). A shape the engine lacks (a router gate the checkpoint left in
    FP8, say) joins the engine and the plan is made again (_replan_with), so its kernels compile
    before ready."""
    from ..engine.from_vllm import kernel_counts, kernels_mismatch, live_block_fp8_linears, shapes_mismatch

    try:
        live = live_block_fp8_linears(model)
        why = kernels_mismatch(engine.facts, kernel_counts(live))
        if not why:
            why = shapes_mismatch(engine.facts, live)
            if why:
                return _replan_with(live, why, settings, engine, expanded)
    except Exception as e:  # noqa: BLE001 - a check: the server starts either way
        why = f"the live layers' kernels could not be read ({type(e).__name__}: {one_line(e)})"
    return LiveCheck(why, engine, expanded)


def _replan_with(live: dict, why: str, settings: Settings, engine, expanded) -> LiveCheck:
    """The plan made again for the engine plus the live shapes it lacked, so that their kernels
    compile before ready (in vLLM's process, at the plan's run: the pool has its jobs already);
    a saved expanded plan is kept as it is (made for the engine it names)."""
    from ..engine.from_vllm import with_live_linears

    try:
        grown = with_live_linears(engine, live)
        remade = make_plan(settings, grown) if grown is not None else None
    except PlanError as e:
        return LiveCheck(f"{why}; the plan stays as it was ({one_line(e)})", engine, expanded)
    if remade is None:
        return LiveCheck(why, engine, expanded)
    before = {step.id for step in expanded.steps}
    added = [step.id for step in remade.steps if step.id not in before]
    if not added:
        return LiveCheck(f"{why}; the plan, made again with them, warms none of them (nor does the vLLM it mirrors)",
                         grown, remade)
    return LiveCheck(f"{why}; the plan is made again with them: {count(len(added), 'step')} more "
                     f"({', '.join(added)}), run before ready in vLLM's process", grown, remade)


# --- before the warmup: the KV cache vLLM allocated against the engine config ----------------------------

def check_live_kv_cache(model_runner, settings: Settings, engine, expanded) -> LiveCheck:
    """The KV cache vLLM allocated (its block count, its groups) against the engine config's, made
    before vLLM sized it: the plan's batches hand out block ids per group, and a group the engine
    lacks (vLLM splits layers of two kinds into groups of equal size) failed every batch step. Where
    they differ the plan is made again for vLLM's KV cache; `why` is said only for the groups (the
    block count differs at every start: the engine's was an estimate)."""
    from ..engine.from_vllm import kv_cache_mismatch, live_kv_cache, with_live_kv_cache

    try:
        live = live_kv_cache(model_runner)
        grown = with_live_kv_cache(engine, live) if live is not None else None
    except Exception as e:  # noqa: BLE001 - a check: the plan runs as it was
        return LiveCheck(f"vLLM's KV cache could not be read ({type(e).__name__}: {one_line(e)})", engine, expanded)
    if grown is None:
        return LiveCheck(None, engine, expanded)
    why = kv_cache_mismatch(engine.facts, live)
    try:
        remade = make_plan(settings, grown)
    except PlanError as e:  # a saved expanded plan, made for the engine it names
        return LiveCheck(why and f"{why}; the plan stays as it was ({one_line(e)})", engine, expanded)
    return LiveCheck(why and f"{why}; the plan is made again for vLLM's KV cache", grown, remade)
