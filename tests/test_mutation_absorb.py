"""Issue 44 item 7: `warmup absorb`'s classification and overlay, where the mutation pass over
planner/review/absorb.py found no test that would notice a planted bug."""

from __future__ import annotations

from types import SimpleNamespace as NS

from test_absorb import LLAMA

from planner import api
from planner.plan.steps import Kernel
from planner.review import absorb
from planner.review.server_logs import Compile


def compile_of(family, kernel, constants=()):
    return Compile(family, kernel, None, "11-27 03:46:47", 34.0, "server.log", 7, "vllm", "kernel JIT compilation",
                   "EngineCore pid=3142", constants)


def plan_of(steps=(), not_modelled=()):
    """An expanded plan as classify reads it: its name, its steps, its not-modelled list."""
    return NS(plan="my-plan", steps=list(steps), not_modelled=list(not_modelled))


def gap(family, why="not planned"):
    return {"family": family, "why": why, "action": "none"}


def verdict(compile_, gaps):
    [miss] = absorb.classify([compile_], plan_of(not_modelled=gaps))
    return miss.status, miss.not_modelled


# --- covered, variant ---------------------------------------------------------------------------------------

def sampler_step():
    expanded = api.expand(api.load_plan("vllm-0.25-plugin"), api.load_engine(LLAMA))
    return next(s for s in expanded.steps if isinstance(s, Kernel) and s.kernel == "_topk_topp_kernel")


def test_a_variant_no_stage_plans_is_named_after_the_first_stage_that_warms_the_kernel():
    step = sampler_step()
    first, second = step.replace(stage="sampler_kernels"), step.replace(stage="sampler_again")
    compile_ = compile_of("Triton", "_topk_topp_kernel", (("VOCAB_SIZE", "32000"),))
    [miss] = absorb.classify([compile_], plan_of([first, second]))
    assert (miss.status, miss.stage) == ("variant", "sampler_kernels")


def test_a_kernel_another_plan_warms_is_absorbed_from_the_first_stage_of_it_that_does():
    cover = absorb.Coverage("vllm-0.25-plugin", {("Triton", "_k"): [("first_stage", ()), ("second_stage", ())]})
    other = NS(name="vllm-0.25-plugin", stages=[NS(name="second_stage", kind="kernel"),
                                                  NS(name="first_stage", kind="vllm_sampler_kernels")])
    [miss] = absorb.classify([compile_of("Triton", "_k")], plan_of(), catalog=lambda: [(other, cover)])
    assert (miss.status, miss.stage, miss.stage_plan, miss.stage_kind) == (
        "absorb", "first_stage", "vllm-0.25-plugin", "vllm_sampler_kernels")


# --- not modelled: which entry names a compile -----------------------------------------------------------

def test_a_kernel_stem_of_four_letters_or_more_names_a_family_and_one_of_three_does_not():
    """`_rope_kernel` is named by an entry about rope; `_moe_kernel`'s stem is too short to tell."""
    assert verdict(compile_of("Triton", "_rope_kernel"), [gap("Triton rope for long contexts")]) == (
        "not modelled", "Triton rope for long contexts")
    assert verdict(compile_of("Triton", "_moe_kernel"), [gap("Triton moe for small experts")]) == ("unknown", None)


def test_triton_autotune_is_named_by_an_entry_about_triton():
    """Triton autotune is a family no stage kind models: an entry whose family names Triton names it."""
    assert verdict(compile_of("Triton autotune", "_w8a8_block_kernel"), [gap("Triton kernels of custom ops")]) == (
        "not modelled", "Triton kernels of custom ops")


def test_an_entry_whose_family_starts_with_the_logs_family_is_preferred():
    gaps = [gap("CUTLASS fallback for fused_moe_kernel"), gap("Triton fused_moe_kernel off the tuned tables")]
    assert verdict(compile_of("Triton autotune", "fused_moe_kernel"), gaps) == (
        "not modelled", "Triton fused_moe_kernel off the tuned tables")


# --- the catalog: the release's other plans -------------------------------------------------------------------

def test_the_catalog_is_the_releases_other_plans_and_none_without_a_release():
    release = api.load_plan("vllm-0.25").vllm_release
    names = [p.name for p in absorb.release_plans("vllm-0.25", release)]
    assert "vllm-0.25" not in names and "vllm-0.25-plugin" in names
    assert all(api.load_plan(n).vllm_release == release for n in names)
    assert absorb.release_plans("vllm-0.25", None) == []


# --- the overlay ---------------------------------------------------------------------------------------------

def absorbed(stage, plan="vllm-0.25-plugin", kernel="fused_moe_kernel"):
    return absorb.Miss(compile_of("Triton", kernel), absorb.ABSORB, stage, plan, None, None, "absorbed")


def my_plan(name="my-plan", stages=()):
    return NS(name=name, vllm_release=api.load_plan("vllm-0.25").vllm_release, stages=[NS(name=s) for s in stages],
              not_modelled=[])


def test_an_absorbed_stage_keeps_its_condition_and_the_parameters_its_plan_wrote():
    plan = my_plan()
    layer = absorb.overlay(plan, [absorbed("fused_moe")], "my-plan.yaml")
    doc = absorb.overlay_document(layer, plan, ["server.log"])
    [entry] = doc["stages"]
    assert entry["when"] == "device_capability == 90"
    assert entry["with"] == {"max_tokens": "max_num_batched_tokens"}  # `when` is the stage's, not a parameter
    assert set(entry) == {"name", "kind", "description", "when", "with"}
    sampler = absorb.overlay_document(absorb.overlay(plan, [absorbed("sampler_kernels")], "p"), plan, ["s.log"])
    assert "when" not in sampler["stages"][0]  # a stage that always runs says nothing


def test_two_absorbed_stages_of_one_name_get_names_of_their_own():
    plan = my_plan()
    layer = absorb.overlay(plan, [absorbed("fused_moe", "vllm-0.25"), absorbed("fused_moe", "vllm-0.25-plugin")], "p")
    assert [stage.name for stage, _ in layer.stages] == ["fused_moe", "absorbed-fused_moe"]


def test_the_overlays_names_are_cut_to_the_schemas_64_characters():
    long = "p" * 60
    layer = absorb.overlay(my_plan(long), [], "p")
    assert layer.name == (long + "-absorbed")[:64] and len(layer.name) == 64


def test_an_absorbed_stage_renamed_for_a_clash_is_cut_to_64_characters(monkeypatch):
    source = api.load_plan("vllm-0.25-plugin")
    long_stage = source.stages[0]._replace(name="s" * 60)
    monkeypatch.setattr(absorb, "release_plans", lambda name, release: [NS(name="src", stages=[long_stage])])
    layer = absorb.overlay(my_plan(stages=["s" * 60]), [absorbed("s" * 60, plan="src")], "p")
    [(stage, _)] = layer.stages
    assert stage.name == ("absorbed-" + "s" * 60)[:64] and len(stage.name) == 64


def test_the_overlay_loads_as_a_plan(tmp_path):
    """The document with a stage that has a condition and parameters is a plan the planner takes."""
    import yaml

    plan = api.load_plan("vllm-0.25")
    misses = [absorbed("fused_moe")]
    layer = absorb.overlay(NS(name="mine", vllm_release=plan.vllm_release, stages=[], not_modelled=[]), misses,
                           "vllm-0.25")
    doc = absorb.overlay_document(layer._replace(extends="vllm-0.25"), plan, ["server.log"])
    doc["stages"][0]["name"] = "fused_moe_again"
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(doc))
    loaded = api.load_plan(str(path))
    stage = next(s for s in loaded.stages if s.name == "fused_moe_again")
    assert stage.when == "device_capability == 90" and stage.params["max_tokens"] == "max_num_batched_tokens"


def test_a_parent_plan_file_without_a_yaml_suffix_is_named_as_a_path_not_a_plan_name(tmp_path):
    """`extends: myplan` would name a built-in plan; the file beside the overlay is `./myplan`."""
    parent = tmp_path / "myplan"
    parent.write_text("")
    assert absorb.extends_ref(str(parent), str(parent), str(tmp_path / "overlay.yaml")) == "./myplan"
    assert absorb.extends_ref("vllm-0.25", "ignored", str(tmp_path / "overlay.yaml")) == "vllm-0.25"
