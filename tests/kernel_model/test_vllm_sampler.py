"""vLLM 0.25's Triton top-k/top-p sampler kernel: its compile keys (kernel_model.vllm_sampler), the
vllm_sampler_kernels stage that plans them, the plan that runs it (vllm-0.25-plugin) and the
`modelled` list that drops the mirror's not_modelled entry for it.

With WARMUP_VLLM_ENVS (tests/integration/vllm_parity/setup_vllm.sh), the last tests read vLLM 0.25.0's own
kernel and launcher in a subprocess (tests/integration/vllm_parity/sampler_oracle.py) and hold the model to
them: the kernel's parameters, the row threshold, and the key of every launch vLLM computes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernel_model import vllm_sampler as sampler
from kernel_model.runner_kernels import Launch, Meta
from kernel_model.specialization import int_spec
from kernel_model.vllm_sampler import TopkToppLaunch, batch_classes, compile_key, topk_topp_variants
from planner.api import load_expanded
from planner.cli import main
from planner.engine.config import load_engine
from planner.engine.releases import model_runner
from planner.errors import PlanError
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.expanded import ExpandedPlan
from planner.plan.stages.vllm_sampler import max_rows
from planner.plan.steps import LAUNCH_MODELS, Kernel, step_from_dict
from planner.resources import builtin_engines
from tests.factories import make_engine, steps_of, write_plan

FAMILY = "vLLM's Triton top-k/top-p sampler kernel"
LLAMA = 128256
KEY = ("vllm.topk_topp[VOCAB_SIZE=128256 MASK_VALUE=-inf BLOCK_SIZE=8192 BLOCK_SIZE_TRUNC=4096 TOPK_ENABLED=1 "
       "TOPP_ENABLED=0](fp32 fp32 fp32 fp32 i32 fp32 | LOGITS_STRIDE_0=i32D BATCH_SIZE=i32)")


def pointers(key: str) -> list[str]:
    return key.split("](")[1].split(" | ")[0].split()


def ints(key: str) -> str:
    return key.split(" | ")[1].rstrip(")")


# --- the key rules ---------------------------------------------------------------------------------------

def test_key_format_pinned():
    assert TopkToppLaunch(LLAMA, 8, True, False).key() == KEY


@pytest.mark.parametrize("rows,spec", [(8, "i32"), (15, "i32"), (16, "i32D"), (17, "i32"), (1024, "i32D")])
def test_batch_size_int_class(rows, spec):
    assert ints(TopkToppLaunch(LLAMA, rows, True, True).key()) == f"LOGITS_STRIDE_0=i32D BATCH_SIZE={spec}"


def test_stride_is_the_vocab_with_its_int_class():
    key = TopkToppLaunch(32001, 8, False, True).key()
    assert "VOCAB_SIZE=32001 " in key and ints(key) == "LOGITS_STRIDE_0=i32 BATCH_SIZE=i32"
    assert ints(TopkToppLaunch(32000, 8, False, True).key()).startswith("LOGITS_STRIDE_0=i32D ")


@pytest.mark.parametrize("top_k,top_p,k_dtype", [(True, False, "i32"), (False, True, "fp32"), (True, True, "i32")])
def test_k_is_the_logits_when_top_k_is_off(top_k, top_p, k_dtype):
    """LOGITS BUFFER tables K P: with top-k off the float32 logits stand in for K."""
    assert pointers(TopkToppLaunch(LLAMA, 8, top_k, top_p).key()) == ["fp32"] * 4 + [k_dtype, "fp32"]


def test_constexprs_in_the_key():
    key = TopkToppLaunch(LLAMA, 8, False, True).key()
    assert key.startswith("vllm.topk_topp[VOCAB_SIZE=128256 MASK_VALUE=-inf BLOCK_SIZE=8192 BLOCK_SIZE_TRUNC=4096 "
                          "TOPK_ENABLED=0 TOPP_ENABLED=1](")


@pytest.mark.parametrize("rows", [0, 1, 7])
def test_no_variants_below_the_triton_threshold(rows):
    assert topk_topp_variants(LLAMA, rows) == []


@pytest.mark.parametrize("rows,count", [(8, 3), (15, 3), (16, 6), (17, 6), (65536 * 257, 6)])
def test_three_or_six_variants_as_max_rows_crosses_16(rows, count):
    variants = topk_topp_variants(LLAMA, rows)
    assert len(variants) == count == len({v.key() for v in variants})
    assert [(v.top_k, v.top_p) for v in variants[:3]] == [(True, False), (False, True), (True, True)]
    assert {v.batch_size for v in variants} == ({8, 16} if count == 6 else {8})


@pytest.mark.parametrize("max_rows", [8, 9, 16, 40, 300])
def test_variants_cover_every_reachable_key(max_rows):
    """Every batch of 8..max_rows rows with any filter hits a planned key, at its first batch size."""
    planned = {v.key(): v for v in topk_topp_variants(LLAMA, max_rows)}
    for rows in range(sampler.TRITON_MIN_ROWS, max_rows + 1):
        for top_k, top_p in sampler.FILTERS:
            first = planned[TopkToppLaunch(LLAMA, rows, top_k, top_p).key()]
            assert first.batch_size <= rows and int_spec(first.batch_size) == int_spec(rows)


def test_batch_classes():
    assert batch_classes(7) == [] and batch_classes(8) == batch_classes(15) == [8]
    assert batch_classes(16) == batch_classes(10**6) == [8, 16]


def test_spec_round_trip_and_wrong_kernel():
    launch = TopkToppLaunch(LLAMA, 16, False, True)
    assert launch.spec() == {"vocab_size": LLAMA, "batch_size": 16, "top_k": False, "top_p": True}
    assert TopkToppLaunch.from_spec(sampler.KERNEL, launch.spec()) == launch
    assert launch.kernel == sampler.KERNEL
    with pytest.raises(ValueError, match="_topk_topp_kernel"):
        TopkToppLaunch.from_spec("_gumbel_sample_kernel", launch.spec())


def test_compile_key_reads_parameters_by_name():
    launch = TopkToppLaunch(LLAMA, 8, True, False)
    assert compile_key(launch.pointer_dtypes(), launch.ints(), launch.constexprs()) == KEY
    assert sorted(sampler.POINTERS + sampler.INTS) == sorted(sampler.PARAMETERS)
    assert [p for p in sampler.PARAMETERS if p in sampler.POINTERS] == list(sampler.POINTERS)


# --- the stage, on every shipped engine -------------------------------------------------------------------

def sampler_steps(plan: str, engine) -> list:
    return steps_of(plan, engine, stage="sampler_kernels")


@pytest.mark.parametrize("name", builtin_engines())
def test_stage_on_every_shipped_engine(name):
    engine = load_engine(name)
    steps = sampler_steps("vllm-0.25-plugin", engine)
    assert len(steps) == 1
    step = steps[0]
    assert isinstance(step, Kernel) and step.id == "sampler_kernels/topk_topp" and step.exact
    assert (step.backend, step.kernel) == ("vllm_triton", "_topk_topp_kernel")
    expected = topk_topp_variants(engine.facts.model.vocab_size, max_rows(engine.facts))
    assert [v.first for v in step.variants] == expected and len(expected) == 6
    assert all(v.key == v.first.key() for v in step.variants)


@pytest.mark.parametrize("name", builtin_engines())
def test_the_mirror_is_the_plugin_plan_without_the_stage(name):
    """The plugin's plan is the mirror plus what vLLM 0.25 leaves cold: the sampler kernels, DeepGEMM
    behind FlashInfer's kernel (after the mirror's stages), the serving paths and, on the V1 runner,
    the synthetic batches."""
    engine = load_engine(name)
    plugin = steps_of("vllm-0.25-plugin", engine)
    v2 = model_runner("0.25.0", engine.facts)[0] == "v2"
    added = ("sampler_kernels", "deep_gemm_flashinfer", "flashinfer_jit", "serving_paths") + (
        () if v2 else ("warmup_kernels",))
    assert steps_of("vllm-0.25", engine) == [s for s in plugin if s.stage not in added]
    stages = [s.stage for s in plugin]
    assert stages[-1] in ("sampler_kernels", "deep_gemm_flashinfer", "flashinfer_jit") and "sampler_kernels" in stages
    assert ("warmup_kernels" in stages) and (("deep_gemm_flashinfer" in stages) == (name != "mixtral-8x7b-tp2-h100"))


@pytest.mark.parametrize("seqs,spec,count", [(4, 0, 0), (4, 1, 3), (4, 3, 6), (7, 0, 0), (8, 0, 3), (16, 0, 6)])
def test_rows_are_sequences_times_draft_positions(seqs, spec, count):
    engine = make_engine(scheduler={"max_num_seqs": seqs},
                         speculative={"method": "eagle" if spec else "none", "num_speculative_tokens": spec})
    assert max_rows(engine.facts) == seqs * (1 + spec)
    steps = sampler_steps("vllm-0.25-plugin", engine)
    assert sum(len(s.variants) for s in steps) == count and len(steps) == (1 if count else 0)


@pytest.mark.parametrize("overrides", [{"model": {"runner": "pooling"}},
                                       {"parallel": {"pipeline_parallel_size": 2, "pipeline_rank": 0}}])
def test_no_step_where_the_rank_does_not_sample(overrides):
    assert sampler_steps("vllm-0.25-plugin", make_engine(**overrides)) == []
    last = make_engine(parallel={"pipeline_parallel_size": 2, "pipeline_rank": 1})
    assert len(sampler_steps("vllm-0.25-plugin", last)) == 1


# --- the step through the plan's plain form, YAML and JSON --------------------------------------------------

def test_kernel_step_round_trips_through_its_plain_form():
    step = sampler_steps("vllm-0.25-plugin", load_engine("llama-3.1-8b-fp8-h100"))[0]
    plain = step.to_dict()
    assert plain["variants"][0] == {"key": KEY, "first": {"vocab_size": LLAMA, "batch_size": 8, "top_k": True,
                                                          "top_p": False}}
    again = step_from_dict(json.loads(json.dumps(plain)))
    assert again == step and isinstance(again.variants[0].first, TopkToppLaunch)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_expanded_plan_file_round_trip(capsys, tmp_path, fmt):
    engine = "qwen3-30b-a3b-fp8-h100"
    path = tmp_path / f"plan.{fmt}"
    assert main(["plan", "vllm-0.25-plugin", "--engine", engine, "-f", fmt, "-o", str(path)]) == 0
    assert main(["validate", str(path)]) == 0 and main(["check", str(path), "--engine", engine]) == 0
    capsys.readouterr()
    expanded = expand(load_plan("vllm-0.25-plugin"), load_engine(engine))
    assert load_expanded(str(path)) == expanded
    assert ExpandedPlan.from_dict(expanded.to_dict()) == expanded


def test_kernel_launches_pick_the_kernels_model():
    assert LAUNCH_MODELS == {sampler.KERNEL: ("kernel_model.vllm_sampler", "TopkToppLaunch"),
                             "fused_moe_kernel": ("kernel_model.vllm_fused_moe", "FusedMoeLaunch"),
                             "flashinfer_jit_module": ("kernel_model.flashinfer_jit", "JitModule")}
    runner = Launch("_gumbel_sample_kernel", ("float32", "float32", "int64", "int32", "int32", 8, 8),
                    Meta({"BLOCK": 8}))
    (variant,) = Kernel.launches("_gumbel_sample_kernel", [(runner.key(), runner.spec())])
    assert variant.first == runner


def test_a_wrong_first_value_is_refused(capsys, tmp_path):
    """The expanded-plan schema holds a _topk_topp_kernel step's launches to their own form."""
    path = tmp_path / "plan.json"
    main(["plan", "vllm-0.25-plugin", "--engine", "llama-3.1-8b-fp8-h100", "-f", "json", "-o", str(path)])
    data = json.loads(path.read_text())
    step = next(s for s in data["steps"] if s["kind"] == "kernel")
    for bad in ({"args": [], "constexprs": {}}, {**step["variants"][0]["first"], "top_k": False, "top_p": False}):
        step["variants"][0]["first"] = bad
        path.write_text(json.dumps(data))
        capsys.readouterr()
        assert main(["validate", str(path)]) == 2, bad
        assert "variants" in capsys.readouterr().err


# --- not_modelled: the mirror names the gap, the plugin plan models it ---------------------------------------

def test_mirror_lists_the_kernel_and_the_plugin_plan_does_not():
    mirror, plugin = load_plan("vllm-0.25"), load_plan("vllm-0.25-plugin")
    gap = next(g for g in mirror.not_modelled if g["family"] == FAMILY)
    assert "WARMUP_PLAN=vllm-0.25-plugin" in gap["action"] and "8 or more rows" in gap["why"]
    assert plugin.not_modelled == tuple(g for g in mirror.not_modelled if g["family"] != FAMILY)
    assert "sampler_kernels" in [s.name for s in plugin.stages]


def test_modelled_applies_to_an_own_list_and_is_inherited(tmp_path):
    own = write_plan(tmp_path, f"""\
        name: own
        extends: vllm-0.25
        not_modelled:
          - {{family: "a", why: "b", action: "c"}}
          - {{family: "{FAMILY}", why: "b", action: "c"}}
        modelled: ["{FAMILY}"]
        """, "own.yaml")
    assert [g["family"] for g in load_plan(own).not_modelled] == ["a"]
    child = write_plan(tmp_path, "name: child\nextends: vllm-0.25-plugin\n", "child.yaml")
    assert load_plan(child).not_modelled == load_plan("vllm-0.25-plugin").not_modelled


def test_modelled_family_the_list_lacks_is_refused_at_its_line(tmp_path):
    bad = write_plan(tmp_path, "name: bad\nextends: vllm-0.25-plugin\nmodelled:\n  - 'no such family'\n")
    with pytest.raises(PlanError) as caught:
        load_plan(bad)
    assert caught.value.line == 4 and "'no such family' is no family of the not_modelled list" in str(caught.value)
    assert "inherited from 'vllm-0.25-plugin'" in str(caught.value)
    run = subprocess.run([sys.executable, "-m", "planner.cli", "plan", bad, "--engine", "llama-3.1-8b-fp8-h100"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "modelled" in run.stderr


# --- parity with vLLM 0.25.0's own code (WARMUP_VLLM_ENVS) ---------------------------------------------------

def release_path() -> str | None:
    """The sys.path of vLLM 0.25 in WARMUP_VLLM_ENVS (`VERSION=PATH[:PATH...],...`), if set."""
    for item in filter(None, os.environ.get("WARMUP_VLLM_ENVS", "").split(",")):
        version, _, paths = item.partition("=")
        if version == "0.25":
            return paths
    return None


CASES = [{"rows": rows, "vocab_size": vocab, "top_k": k, "top_p": p}
         for vocab in (LLAMA, 32001) for rows in (1, 7, 8, 15, 16, 17, 48)
         for k, p in sampler.FILTERS + ((False, False),)]


@pytest.fixture(scope="module")
def vllm_025():
    """What vLLM 0.25.0 says of its kernel (declaration) and what it launches for each of CASES."""
    paths = release_path()
    if paths is None:
        pytest.skip("WARMUP_VLLM_ENVS has no 0.25 release (tests/integration/vllm_parity/setup_vllm.sh)")
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    oracle = os.path.join(tests, "integration", "vllm_parity", "sampler_oracle.py")
    env = {**os.environ, "PYTHONPATH": paths, "VLLM_LOGGING_LEVEL": "ERROR"}
    env.pop("TRITON_INTERPRET", None)  # the executor tests' interpreter mode would wrap vLLM's kernel
    run = subprocess.run([sys.executable, oracle], input=json.dumps(CASES), capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout)
    assert facts["version"] == "0.25.0"
    return facts


def test_parity_kernel_declaration(vllm_025):
    """Parameters in vLLM's order, the same constexprs, and no int or pointer exempt from
    specialization (so int_spec's full rule applies and every pointer's alignment counts)."""
    declared = vllm_025["declaration"]
    assert declared["arg_names"] == list(sampler.PARAMETERS + sampler.CONSTEXPRS)
    assert declared["constexprs"] == list(sampler.CONSTEXPRS)
    assert declared["do_not_specialize"] == declared["do_not_specialize_on_alignment"] == []


def test_parity_row_threshold(vllm_025):
    """apply_top_k_top_p takes the Triton path from 8 rows, and never with neither filter."""
    triton_rows = {case["rows"] for case, launches in zip(CASES, vllm_025["launches"]) if launches}
    assert min(triton_rows) == sampler.TRITON_MIN_ROWS
    assert all(not launches for case, launches in zip(CASES, vllm_025["launches"])
               if not (case["top_k"] or case["top_p"]) or case["rows"] < sampler.TRITON_MIN_ROWS)


def test_parity_every_launch_key(vllm_025):
    """The key of each launch vLLM makes, read from its arguments, is the model's, and a planned one."""
    for case, launches in zip(CASES, vllm_025["launches"]):
        if not launches:
            continue
        (seen,) = launches
        dtypes = {name: seen[name]["dtype"] for name in sampler.POINTERS}
        key = compile_key(dtypes, {name: seen[name] for name in sampler.INTS},
                          {name: seen[name] for name in sampler.CONSTEXPRS})
        assert key == TopkToppLaunch(case["vocab_size"], case["rows"], case["top_k"], case["top_p"]).key(), case
        assert key in {v.key() for v in topk_topp_variants(case["vocab_size"], case["rows"])}
