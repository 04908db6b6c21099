"""The plugin's own logic without vLLM: settings, the version table, the stale-plan refusal."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace as NS

import pytest

from planner.api import expand, load_engine, load_plan
from planner.render import to_yaml
from planner.resources import engines_dir
from vllm_bridge.releases import RELEASES, UnsupportedVllm, release_for
from vllm_bridge.settings import PluginError, Settings, with_rank
from vllm_bridge.step_aside import SAID
from vllm_bridge.warmup.worker import WorkerWarmup


def test_settings_from_env_inert_without_a_plan():
    assert Settings.from_env({}).plan is None
    s = Settings.from_env({"WARMUP_PLAN": "vllm-0.33", "WARMUP_JIT_LOG": "/t/jit.jsonl", "WARMUP_JOBS": "4"})
    assert (s.plan, s.jit_log, s.jobs, s.report) == ("vllm-0.33", "/t/jit.jsonl", 4, None)


def test_bad_jobs_is_one_line():
    with pytest.raises(PluginError, match="WARMUP_JOBS must be a whole number, got 'x'"):
        Settings.from_env({"WARMUP_PLAN": "p", "WARMUP_JOBS": "x"})


def test_version_table_names_a_built_in_plan_per_release():
    assert {v: r.plan for v, r in RELEASES.items()} == {"0.25.0": "vllm-0.25", "0.33.0": "vllm-0.33"}
    for release in RELEASES.values():
        load_plan(release.plan)  # exists and loads
    with pytest.raises(UnsupportedVllm) as e:
        release_for("0.30.1")
    assert "\n" not in str(e.value) and "vLLM 0.30.1 is installed" in str(e.value)


def test_rank_files():
    assert with_rank("/r/report.json", 0) == "/r/report.json"
    assert with_rank("/r/report.json", 3) == "/r/report.rank3.json"
    assert with_rank(None, 3) is None


def test_stale_saved_plan_is_refused_before_the_weights_load(tmp_path):
    saved = tmp_path / "plan.yaml"
    expanded = expand(load_plan("vllm-0.33"), load_engine("llama-3.1-8b-fp8-h100"))
    saved.write_text(to_yaml(expanded.to_dict()))
    worker = NS(vllm_config=None, rank=0, device="cpu")
    settings = Settings(str(saved), engine="qwen3-30b-a3b-fp8-h100")
    with pytest.raises(PluginError) as e:
        WorkerWarmup.prepare(worker, RELEASES["0.33.0"], settings)
    message = str(e.value)
    assert message.startswith("warmup-planner: ") and "stale plan" in message and "\n" not in message


def test_an_engine_config_as_plan_is_refused():
    worker = NS(vllm_config=None, rank=0, device="cpu")
    engine_file = os.path.join(engines_dir(), "llama-3.1-8b-fp8-h100.yaml")
    settings = Settings(engine_file, engine="llama-3.1-8b-fp8-h100")
    with pytest.raises(PluginError, match="WARMUP_PLAN names a plan, not an engine config"):
        WorkerWarmup.prepare(worker, RELEASES["0.33.0"], settings)


# --- issue 23: fast by default, no hang, visible ----------------------------------------------------------

import json  # noqa: E402
import logging  # noqa: E402

from executor.precompile import Precompiler, compile_jobs, default_jobs  # noqa: E402
from planner.plan.steps import GemmLike  # noqa: E402
from vllm_bridge import plugin  # noqa: E402
from vllm_bridge.warmup import phases as ph  # noqa: E402
from vllm_bridge.warmup.executor_options import DEEP_GEMM_BACKEND, local_ranks, options_for, precompile_jobs  # noqa: E402
from vllm_bridge.warmup.log_lines import summary_line  # noqa: E402
from vllm_bridge.warmup.pool_lane import PoolLane  # noqa: E402
from vllm_bridge.warmup.swaps import then_finish_device_lane  # noqa: E402
from vllm_bridge.warmup.worker_plan import compile_keys, plugin_plan  # noqa: E402

SHIPPED = sorted(f[:-5] for f in os.listdir(engines_dir()) if f.endswith(".yaml"))


def test_settings_default_to_the_pool_and_refuse_bad_values_in_one_line():
    s = Settings.from_env({"WARMUP_PLAN": "vllm-0.25"})
    assert (s.jobs, s.strict, s.timeout_s) == (None, False, 300.0)
    assert (s.registry_plain_http, s.bundle_inert, s.fixes_off) == (False, "warn", ())
    s = Settings.from_env({"WARMUP_PLAN": "p", "WARMUP_JOBS": "0", "WARMUP_STRICT": "1",
                           "WARMUP_PRECOMPILE_TIMEOUT": "12.5"})
    assert (s.jobs, s.strict, s.timeout_s) == (0, True, 12.5)
    for env, name in (({"WARMUP_STRICT": "maybe"}, "WARMUP_STRICT"),
                      ({"WARMUP_PRECOMPILE_TIMEOUT": "0"}, "WARMUP_PRECOMPILE_TIMEOUT"),
                      ({"WARMUP_PRECOMPILE_TIMEOUT": "inf"}, "WARMUP_PRECOMPILE_TIMEOUT"),
                      ({"WARMUP_REGISTRY_PLAIN_HTTP": "maybe"}, "WARMUP_REGISTRY_PLAIN_HTTP"),
                      ({"WARMUP_BUNDLE_INERT": "fatal"}, "WARMUP_BUNDLE_INERT"),
                      ({"WARMUP_FIX_GC_FREEZE_CAPTURE": "disabled"}, "WARMUP_FIX_GC_FREEZE_CAPTURE")):
        with pytest.raises(PluginError, match=name) as e:
            Settings.from_env({"WARMUP_PLAN": "p", **env})
        assert "\n" not in str(e.value)


def test_the_registry_inert_and_fix_settings_are_read_with_the_others():
    """WARMUP_REGISTRY_PLAIN_HTTP, WARMUP_BUNDLE_INERT and each WARMUP_FIX_<NAME>: read once, by
    Settings, with the switches' one truth table (settings.TRUE, settings.FALSE)."""
    s = Settings.from_env({"WARMUP_PLAN": "p", "WARMUP_REGISTRY_PLAIN_HTTP": " True ", "WARMUP_BUNDLE_INERT": "ERROR",
                           "WARMUP_FIX_GC_FREEZE_CAPTURE": "0"})
    assert (s.registry_plain_http, s.bundle_inert, s.fixes_off) == (True, "error", ("gc_freeze_capture",))
    s = Settings.from_env({"WARMUP_PLAN": "p", "WARMUP_REGISTRY_PLAIN_HTTP": "no", "WARMUP_BUNDLE_INERT": " warn",
                           "WARMUP_FIX_GC_FREEZE_CAPTURE": "1"})
    assert (s.registry_plain_http, s.bundle_inert, s.fixes_off) == (False, "warn", ())
    s = Settings.from_env({"WARMUP_PLAN": "p", "WARMUP_REGISTRY_PLAIN_HTTP": "", "WARMUP_BUNDLE_INERT": "",
                           "WARMUP_FIX_GC_FREEZE_CAPTURE": ""})  # empty: the default, as unset
    assert (s.registry_plain_http, s.bundle_inert, s.fixes_off) == (False, "warn", ())
    for name, value, want in (("WARMUP_REGISTRY_PLAIN_HTTP", "2", "1 or 0"),
                              ("WARMUP_BUNDLE_INERT", "fail", "warn or error"),
                              ("WARMUP_FIX_GC_FREEZE_CAPTURE", "disable", "1 or 0")):
        with pytest.raises(PluginError) as e:
            Settings.from_env({"WARMUP_PLAN": "p", name: value})
        assert str(e.value) == f"warmup-planner: {name} must be {want}, got {value!r}"


def test_torch_compile_after_ready_is_eager_by_default_and_compile_on_request(caplog, monkeypatch):
    assert Settings.from_env({"WARMUP_PLAN": "p"}).torch_compile_after_ready == "eager"
    s = Settings.from_env({"WARMUP_PLAN": "p", "WARMUP_TORCH_COMPILE_AFTER_READY": " Compile "})
    assert s.torch_compile_after_ready == "compile"
    with pytest.raises(PluginError) as e:
        Settings.from_env({"WARMUP_PLAN": "p", "WARMUP_TORCH_COMPILE_AFTER_READY": "never"})
    assert str(e.value) == ("warmup-planner: WARMUP_TORCH_COMPILE_AFTER_READY must be eager or compile, "
                            "got 'never'")
    from vllm_bridge.warmup.after_ready import torch_compile_after_ready

    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert torch_compile_after_ready("compile", 2) is False
    assert caplog.records[-1].getMessage() == ("warmup-planner: rank 2: a torch.compile call after ready compiles "
                                               "as in vLLM (WARMUP_TORCH_COMPILE_AFTER_READY=compile)")
    caplog.clear()
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert torch_compile_after_ready("eager", 0) is False
    assert caplog.records == [], "a process without torch has nothing to say about torch.compile"


def test_the_seal_sets_dynamos_stance_unless_asked_to_compile(monkeypatch):
    """The worker's warmup ends with the seal and the stance (one call, rank and setting handed)."""
    from vllm_bridge.warmup import worker as warmup_module

    calls = []
    monkeypatch.setattr(warmup_module, "torch_compile_after_ready", lambda setting, rank: calls.append((setting, rank)))
    expanded = expand(load_plan("vllm-0.25"), load_engine("llama-3.1-8b-fp8-h100"))
    worker = NS(vllm_config=None, rank=1, device="cpu", model_runner=None)
    for setting in ("eager", "compile"):
        state = WorkerWarmup(worker, RELEASES["0.25.0"], Settings("vllm-0.25", torch_compile_after_ready=setting),
                             load_engine("llama-3.1-8b-fp8-h100"), expanded)
        state.fallback = "no plan"
        try:
            assert state.warm_up(lambda: "ready") == "ready" and state.monitor.sealed
        finally:
            state.monitor.uninstall()  # sealed monitors stay installed, as in vLLM: not past this test
    assert calls == [("eager", 1), ("compile", 1)]


@pytest.mark.parametrize("plan_name", [r.plan for r in RELEASES.values()] + ["vllm-0.25-plugin"])
@pytest.mark.parametrize("engine_name", SHIPPED)
def test_what_the_plugin_runs_compiles_every_key_of_the_plan_once(plan_name, engine_name, moe_tables):
    """How differs, what does not: the plugin's steps name every compile key the release's plan
    names and make every call it makes (each DeepGEMM shape on vLLM's DeepGEMM), and the pool gets
    one job per key (before the fix the pool got none: the plan's DeepGEMM steps named the
    `deep_gemm` backend, which the plugin replaced, so no step was run by its planned backend)."""
    expanded = expand(load_plan(plan_name), load_engine(engine_name))
    ours = plugin_plan(expanded)
    assert compile_keys(ours) >= compile_keys(expanded)
    planned = {s.id: s for s in expanded.steps}
    for step in ours.steps:
        if isinstance(step, GemmLike) and planned[step.id].backend == "deep_gemm":
            assert step.backend == DEEP_GEMM_BACKEND and step == planned[step.id].replace(backend=DEEP_GEMM_BACKEND)
        else:
            assert step == planned[step.id]
    assert [s.id for s in ours.steps] == [s.id for s in expanded.steps if s.kind != "autotune"]
    worker = NS(device="cuda:0", rank=0)
    jobs = compile_jobs(ours.steps, backends=options_for(worker, RELEASES["0.25.0"], 8).precompile_backends)
    for backend in (DEEP_GEMM_BACKEND, "vllm_triton", "flashinfer_jit"):
        keys = {k for s in ours.steps if getattr(s, "backend", None) == backend for k in s.compile_keys}
        assert {j.key for j in jobs if j.backend == backend} == keys
    # vLLM's own Triton kernels: the sampler's (the plugin plan) and fused_moe's (every release plan, MoE
    # engines); FlashInfer's sampling module, which a user's install samples with (the plugin plan)
    has_moe = bool(load_engine(engine_name).data["model"].get("moe"))
    assert any(j.backend == "vllm_triton" for j in jobs) == (plan_name == "vllm-0.25-plugin" or has_moe)
    assert ("flashinfer.jit[sampling]" in {j.key for j in jobs}) == (plan_name == "vllm-0.25-plugin")


def test_workers_default_to_the_cores_shared_by_the_nodes_ranks():
    assert precompile_jobs(Settings("p")) == default_jobs()
    assert precompile_jobs(Settings("p"), local_ranks=2) == max(1, default_jobs() // 2)
    assert precompile_jobs(Settings("p"), local_ranks=10_000) == 1
    assert precompile_jobs(Settings("p", jobs=3), local_ranks=8) == 3  # WARMUP_JOBS is per rank, as given
    assert local_ranks(NS(parallel_config=NS(local_world_size=4))) == 4 and local_ranks(None) == 1


class StuckPool:
    """A precompile pool whose device lane reports a failure (the barrier's view of it): the
    Precompiler's own device-lane barrier over a stand-in for the lane's wait and the bound."""

    running = True
    finish_device_lane = Precompiler.finish_device_lane
    device_lane_wait = Precompiler.device_lane_wait

    def __init__(self, why, still_running=()):
        self.why, self.finished, self.bounded = why, False, None
        self.lane_waits = {"device": {"waited_s": 2.0, "still_running": list(still_running)}}

    def finish_lane(self, lane, timeout):
        assert lane == "device"
        self.finished = timeout
        return self.why

    def bound(self, seconds):
        self.bounded = seconds

    def summary(self):
        return {"status": "cancelled", "jobs": 2, "workers": 2}


def bare_state(settings, tmp_path=None):
    expanded = expand(load_plan("vllm-0.25"), load_engine("llama-3.1-8b-fp8-h100"))
    worker = NS(vllm_config=None, rank=0, device="cpu", model_runner=None)
    return WorkerWarmup(worker, RELEASES["0.25.0"], settings, load_engine("llama-3.1-8b-fp8-h100"), expanded)


def test_a_failed_pool_falls_back_to_vllms_own_warmup_in_one_line(caplog, tmp_path, monkeypatch):
    monkeypatch.setenv(SAID, "")  # the mark the step-aside line leaves, undone after the test
    report = tmp_path / "report.json"
    state = bare_state(Settings("vllm-0.25", report=str(report), timeout_s=7))
    state.pool.precompiler = StuckPool("timed out after 7 s with 1 of 2 jobs done")
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        state.finish_device_lane()
        result = state.warm_up(lambda: "vLLM's own")  # vLLM's method, not redirected
    assert state.pool.precompiler.finished == 7 and result == "vLLM's own"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [("warmup-planner: stepping aside: the precompile pool timed out after 7 s with 1 of 2 "
                         "jobs done; vLLM starts as it would without the plugin")]
    host = json.loads(report.read_text())["host"]
    assert host["fallback"].startswith("the precompile pool timed out") and host["precompile_wait_s"] == 2.0
    assert [p["phase"] for p in host["phases"]] == ["warmup (vLLM's own, the plugin's fallback)"]
    assert state.monitor.sealed


def test_strict_mode_stops_the_worker_in_one_line():
    state = bare_state(Settings("vllm-0.25", strict=True))
    state.pool.precompiler = StuckPool("no job succeeded (failed: RuntimeError: boom)")
    with pytest.raises(PluginError) as e:
        state.finish_device_lane()
    assert str(e.value) == ("warmup-planner: the precompile pool no job succeeded (failed: RuntimeError: boom) "
                            "(WARMUP_STRICT=1)")


def test_the_device_lane_ends_after_vllms_profile_run_and_before_its_measurement():
    order = []
    runner = NS(profile_run=lambda: order.append("vLLM's profile run (torch.compile, a forward pass)"))
    state = NS(finish_device_lane=lambda: order.append("device lane finished"), abandon=None,
               phases=ph.Phases(NS(begin_step=lambda name: order.append(f"count {name}"), end_step=lambda: None)))

    def determine_available_memory(worker):  # vLLM's: the profile run inside, then the measurement
        worker.model_runner.profile_run()
        order.append("vLLM measures the GPU's memory")
        return 42

    wrapped = plugin._determine_available_memory(determine_available_memory, RELEASES["0.25.0"], Settings("p"))
    worker = NS(model_runner=runner, **{plugin.STATE: state})
    assert wrapped(worker) == 42
    assert order == ["count profile run", "vLLM's profile run (torch.compile, a forward pass)",
                     "device lane finished", "vLLM measures the GPU's memory"]
    assert "profile_run" in vars(runner) and runner.profile_run() is None and order[-1].startswith("vLLM's")
    order.clear()
    bare = NS(model_runner=NS(profile_run=lambda: order.append("profile")))
    assert wrapped(bare) == 42 and order == ["profile", "vLLM measures the GPU's memory"]  # no plugin state


def test_the_device_lane_line_says_what_went_on_past_it(caplog):
    state = bare_state(Settings("vllm-0.25", timeout_s=9))
    state.pool.precompiler = StuckPool(None, still_running=["flashinfer_jit flashinfer.jit[sampling]"])
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        state.finish_device_lane()
    assert state.pool.precompiler.finished == 9 and state.pool.precompiler.bounded == 9 and state.pool.waited_s == 2.0
    assert [r.getMessage() for r in caplog.records] == [
        "warmup-planner: precompile (rank 0): vLLM waited 2.0 s after its profile run for the jobs that hold a "
        "CUDA context, now ended; still running in CUDA-free workers (1): flashinfer_jit flashinfer.jit[sampling]"]
    assert state.fallback is None


def test_counts_by_kind_add_up_to_the_summary_line():
    rec = lambda id, backend, calls, jit, pre=None: NS(  # noqa: E731
        id=id, stage=id.split("/")[0], backend=backend, status="ok", kernel_calls=calls, wall_s=0.5, jit=jit,
        precompile=pre)
    records = [rec("deep_gemm/a", "deep_gemm_vllm", 13, {"compiled": 0, "deep_gemm_jit": 1, "disk_loads": 0},
                   {"jobs": 13, "failed": 0, "compiled": 13}),
               rec("sampler_kernels/t", "vllm_triton", 6, {"compiled": 0, "disk_loads": 6, "dynamo_compiles": 0},
                   {"jobs": 6, "failed": 1, "compiled": 5})]
    rows = ph.stage_rows(records, lambda b: b == "deep_gemm_vllm", {"deep_gemm/a": 5, "sampler_kernels/t": 6})
    assert rows[0]["compiled"] == {"triton": 0, "deep_gemm": 1, "torch_compile": 0, "flashinfer": 0}
    assert rows[0]["loaded"] == {"triton": 0, "deep_gemm": 4}  # 5 kernels over 13 calls: 1 compiled, 4 loaded
    assert "deep_gemm" not in ph.stage_rows(records[:1], lambda b: True)[0]["loaded"]  # keys unknown: not guessed
    assert (rows[1]["pool_jobs"], rows[1]["pool_jobs_ok"], rows[1]["loaded"]) == (6, 5, {"triton": 6})
    assert ph.stage_line(rows[1]) == ("warmup-planner: stage sampler_kernels: 1 steps, 6 calls, compiled Triton 0, "
                                      "DeepGEMM 0, torch.compile 0; loaded Triton 6; pool: 5/6 jobs done, "
                                      "5 compiled, 0.50 s")
    built = rec("cudagraph/c", None, 102, {"compiled": 0, "flashinfer_jit": 1})
    assert ph.stage_line(ph.stage_rows([built], lambda b: False)[0]).startswith(
        "warmup-planner: stage cudagraph: 1 steps, 102 calls, compiled Triton 0, DeepGEMM 0, torch.compile 0, "
        "FlashInfer modules 1; loaded Triton 0")  # a FlashInfer module build is said where it happened
    phases = [{"phase": "profile run", "compiled": {"triton": 40, "deep_gemm": 0, "torch_compile": 1}}]
    line = summary_line("vllm-0.25-plugin", rows, phases, None, None)
    assert "2 steps, 19 calls" in line and "compiled Triton 0, DeepGEMM 1, torch.compile 0" in line
    assert "loaded Triton 6, DeepGEMM 4" in line
    assert line.endswith("vLLM profile run compiled triton 40, torch_compile 1") and "\n" not in line


def make_entry(root, name, files=("kernel.cubin", "kernel.json"), group=True):
    entry = root / name
    entry.mkdir(parents=True)
    for f in files:
        (entry / f).write_text(f"{name}/{f}")
    if group:
        (entry / "__grp__kernel.json").write_text(json.dumps(
            {"child_paths": {f: str(entry / f) for f in files}}))
    return entry


def test_the_pools_triton_files_are_in_place_before_the_plans_first_stage(tmp_path, monkeypatch):
    """The synthetic batches' sampling launches a variant of vLLM's sampler kernel before the
    sampler's own stage: the pool's files must already be where vLLM's Triton reads."""
    import executor.run
    from executor.report import Report

    staging, target = tmp_path / "staging", tmp_path / "inductor-triton"
    make_entry(staging, "AAA")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(target))  # what Inductor pinned in vLLM's process
    state = bare_state(Settings("vllm-0.25-plugin"))
    state.options = state.options.__class__(backend_settings={"vllm_triton": {"staging": str(staging)}})
    state.pool.precompiler = NS()
    seen = []

    def execute(plan, engine, options, **kw):
        seen.append((target / "AAA" / "__grp__kernel.json").exists())
        return Report(plan)
    monkeypatch.setattr(executor.run, "execute", execute)
    state.run_plan()
    assert seen == [True]


def test_a_failed_load_model_ends_the_pool(monkeypatch):
    """The pool's processes must not outlive a worker that fails while loading its weights."""
    ended = []
    lane = PoolLane(0, monitor=None)
    lane.precompiler = NS(running=True, cancel=ended.append)
    state = NS(start=lambda: None, abandon=lambda why: WorkerWarmup.abandon(NS(pool=lane), why),
               phases=ph.Phases(NS(begin_step=lambda name: None, end_step=lambda: None)))
    monkeypatch.setattr(WorkerWarmup, "prepare", classmethod(lambda cls, worker, release, settings: state))

    def load_model(self):
        raise MemoryError("CUDA out of memory while loading the weights")
    wrapped = plugin._load_model(load_model, RELEASES["0.25.0"], Settings("p"))
    with pytest.raises(MemoryError):
        wrapped(NS())
    assert ended == ["not needed: vLLM's load_model failed"]


# --- the live layers' kernels (issue 24) ---------------------------------------------------------------

class FlashInferFp8DeepGEMMDynamicBlockScaledKernel:  # named as vLLM's classes: read by class name
    pass


class DeepGemmFp8BlockScaledMMKernel:
    pass


def live_model(*kernels):
    layers = [NS(quant_method=NS(fp8_linear=k(), block_quant=True)) for k in kernels]
    layers.append(NS(quant_method=NS(fp8_linear=DeepGemmFp8BlockScaledMMKernel(), block_quant=False)))  # not block
    layers.append(NS(quant_method=None))
    return NS(modules=lambda: iter(layers))


def test_the_live_layers_kernels_are_checked_against_the_engine_after_load(caplog):
    from vllm_bridge.engine.from_vllm import live_linear_kernels

    state = bare_state(Settings("vllm-0.25"))  # llama: flashinfer_deep_gemm recorded
    flashinfer = live_model(*[FlashInferFp8DeepGEMMDynamicBlockScaledKernel] * 4)
    assert live_linear_kernels(flashinfer) == {"flashinfer_deep_gemm": 4}
    state.worker.model_runner = NS(model=flashinfer)
    with caplog.at_level(logging.WARNING, logger="vllm.warmup_planner"):
        assert state.check_live_kernels() is None
        state.worker.model_runner = NS(model=live_model(DeepGemmFp8BlockScaledMMKernel, object))
        why = state.check_live_kernels()
    assert why.startswith("the loaded model's block-FP8 linears run deep_gemm (1), object (1), the engine config "
                          "the plan was made for records flashinfer_deep_gemm:")
    assert [r.getMessage() for r in caplog.records] == [f"warmup-planner: {why}"]


def test_a_live_block_fp8_shape_the_engine_does_not_list_is_one_warning(caplog):
    from vllm_bridge.engine.from_vllm import live_block_fp8_linears

    state = bare_state(Settings("vllm-0.25"))  # llama: qkv n6144 k4096, o n4096 k4096, ...
    listed = [NS(quant_method=NS(fp8_linear=FlashInferFp8DeepGEMMDynamicBlockScaledKernel(), block_quant=True),
                 output_size_per_partition=n, input_size_per_partition=k)
              for n, k in ((6144, 4096), (4096, 4096))]
    model = NS(modules=lambda: iter(listed))
    assert live_block_fp8_linears(model) == {(6144, 4096, "flashinfer_deep_gemm"): 1,
                                             (4096, 4096, "flashinfer_deep_gemm"): 1}
    state.worker.model_runner = NS(model=model)
    assert state.check_live_kernels() is None
    # a router gate the checkpoint left in FP8 (Qwen3-MoE's, without modules_to_not_convert)
    gate = NS(quant_method=NS(fp8_linear=FlashInferFp8DeepGEMMDynamicBlockScaledKernel(), block_quant=True),
              output_size_per_partition=128, input_size_per_partition=4096)
    state.worker.model_runner = NS(model=NS(modules=lambda: iter(listed + [gate, gate])))
    with caplog.at_level(logging.WARNING, logger="vllm.warmup_planner"):
        why = state.check_live_kernels()
    assert why.startswith("the loaded model has block-FP8 linears the engine config the plan was made for does "
                          "not list: n128 k4096 on flashinfer_deep_gemm (2 layers); their GEMM kernels compile")
    assert [r.getMessage() for r in caplog.records] == [f"warmup-planner: {why}"]
    # the mirror warms no linear on FlashInfer's kernel: made again, the plan is the same
    assert why.endswith("the plan, made again with them, warms none of them (nor does the vLLM it mirrors)")
    assert [layer.name for layer in state.engine.facts.model.linear][-1] == "live_n128_k4096"


def test_the_plugin_plan_made_again_warms_the_live_shape_the_engine_lacked():
    state = bare_state(Settings("vllm-0.25-plugin"))
    state.expanded = expand(load_plan("vllm-0.25-plugin"), state.engine)
    gate = NS(quant_method=NS(fp8_linear=FlashInferFp8DeepGEMMDynamicBlockScaledKernel(), block_quant=True),
              output_size_per_partition=128, input_size_per_partition=4096)
    before = {step.id for step in state.in_worker_plan().steps}
    state.worker.model_runner = NS(model=NS(modules=lambda: iter([gate] * 32)))
    assert state.check_live_kernels().endswith(
        "1 step more (deep_gemm_flashinfer/gemm-n128-k4096), run before ready in vLLM's process")
    added = {step.id for step in state.in_worker_plan().steps} - before
    assert "deep_gemm_flashinfer/gemm-n128-k4096" in added, added
    assert state.check_live_kernels() is None  # now listed: nothing more to say


def test_a_saved_plan_is_kept_when_the_live_layers_differ(tmp_path):
    from planner.render import to_json

    engine = load_engine("llama-3.1-8b-fp8-h100")
    saved = tmp_path / "saved.json"
    saved.write_text(to_json(expand(load_plan("vllm-0.25-plugin"), engine).to_dict()))
    state = bare_state(Settings(str(saved)))
    gate = NS(quant_method=NS(fp8_linear=FlashInferFp8DeepGEMMDynamicBlockScaledKernel(), block_quant=True),
              output_size_per_partition=128, input_size_per_partition=4096)
    state.worker.model_runner = NS(model=NS(modules=lambda: iter([gate])))
    why = state.check_live_kernels()
    assert "the plan stays as it was" in why and state.engine.name == engine.name


def test_a_successful_load_model_checks_the_live_kernels(monkeypatch):
    order = []
    state = NS(start=lambda: order.append("pool"), check_live_kernels=lambda: order.append("checked"),
               phases=ph.Phases(NS(begin_step=lambda name: None, end_step=lambda: None)))
    monkeypatch.setattr(WorkerWarmup, "prepare", classmethod(lambda cls, worker, release, settings: state))
    wrapped = plugin._load_model(lambda self: order.append("weights") or "loaded", RELEASES["0.25.0"], Settings("p"))
    assert wrapped(NS()) == "loaded" and order == ["pool", "weights", "checked"]


def test_load_model_pins_tritons_directory_before_vllm_builds_the_model(tmp_path, monkeypatch):
    """Issue 54 (part AI): the directory Triton reads is set before vLLM's load_model, so no Inductor
    kernel of vLLM's cold compile moves it; a bundle-only start too (no plan)."""
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    seen = []
    wrapped = plugin._load_model(lambda self: seen.append(os.environ.get("TRITON_CACHE_DIR")), RELEASES["0.25.0"],
                                 Settings(None, bundle_out=str(tmp_path / "b.warmup")))
    monkeypatch.setattr(plugin.bundle, "record_roots", lambda worker, out: None)
    wrapped(NS())
    assert seen == [str(tmp_path / ".triton" / "cache")]


@pytest.mark.parametrize("asked", [True, False])
def test_load_model_loads_the_compiled_model_beside_the_weights_only_where_asked(tmp_path, monkeypatch, asked):
    """Issue 54: WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS=1 installs vllm_bridge/compile_load.py's hooks before
    vLLM's load_model makes the model; unset, vLLM's loader is left as it is."""
    order = []
    monkeypatch.setattr(plugin.compile_load, "installed", lambda: order.append("hooks") or True)
    monkeypatch.setattr(plugin.bundle, "record_roots", lambda worker, out: None)
    wrapped = plugin._load_model(lambda self: order.append("vLLM's load_model"), RELEASES["0.25.0"],
                                 Settings(None, bundle_out=str(tmp_path / "b.warmup"), compile_load_beside_weights=asked))
    wrapped(NS())
    assert order == (["hooks"] if asked else []) + ["vLLM's load_model"]


def test_a_users_triton_directory_is_never_changed(tmp_path, monkeypatch):
    from vllm_bridge.warmup.executor_options import pin_triton_cache

    environ = {"TRITON_CACHE_DIR": str(tmp_path / "mine"), "TRITON_HOME": str(tmp_path)}
    assert pin_triton_cache(environ) == str(tmp_path / "mine") and environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine")
    environ = {"HOME": str(tmp_path)}
    assert pin_triton_cache(environ) == environ["TRITON_CACHE_DIR"]


def test_once_pinned_inductor_keeps_tritons_directory(tmp_path, monkeypatch):
    """What the pin is for, against torch itself: Inductor's CachingAutotuner sets TRITON_CACHE_DIR only
    where it is unset, from triton_cache_dir(), which returns the variable once it is set."""
    cache_dir_utils = pytest.importorskip("torch._inductor.runtime.cache_dir_utils")
    from vllm_bridge.warmup.executor_options import pin_triton_cache

    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    assert cache_dir_utils.triton_cache_dir(0) == str(tmp_path / "inductor" / "triton" / "0")  # unpinned: moves
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    pinned = pin_triton_cache()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "vllm-aot" / "inductor_cache"))  # vLLM's compile
    assert cache_dir_utils.triton_cache_dir(0) == pinned == str(tmp_path / ".triton" / "cache")


def test_a_failed_profile_run_ends_the_pool_at_once():
    ended = []
    state = NS(abandon=ended.append, finish_device_lane=lambda: ended.append("finished"))

    def profile_run():
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        then_finish_device_lane(state, profile_run)()
    assert ended == ["not needed: vLLM's profile run failed"]     # no bounded wait for a dying worker


def test_the_worker_is_patched_when_its_module_is_imported_not_before(tmp_path, monkeypatch):
    """vLLM's API server never imports the GPU worker's module; importing it there to patch it cost
    ~2-3 s before vLLM resolved the model (bench/RESULTS.md part Y). The patch waits for the import."""
    import inspect
    import sys

    from vllm_bridge import plugin

    package = tmp_path / "fakevllm_lazy"
    (package / "worker").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "worker" / "__init__.py").write_text("")
    (package / "worker" / "gpu_worker.py").write_text(
        "class Worker:\n"
        "    def load_model(self): return 'loaded'\n"
        "    def determine_available_memory(self): return 1\n"
        "    def compile_or_warm_up_model(self): return 'ready'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    release = RELEASES["0.25.0"]._replace(worker_module="fakevllm_lazy.worker.gpu_worker")
    finders = list(sys.meta_path)
    try:
        plugin.patch_worker(release, Settings("vllm-0.25-plugin"))
        assert "fakevllm_lazy.worker.gpu_worker" not in sys.modules  # nothing imported by the patch itself
        from fakevllm_lazy.worker import gpu_worker

        assert plugin.PATCHED in vars(gpu_worker.Worker)
        assert gpu_worker.Worker.load_model.__wrapped__(None) == "loaded"
        assert "class Worker" in inspect.getsource(gpu_worker)  # the module's loader still answers for its source
        assert sys.meta_path == finders  # the hook is gone once used
        plugin.patch_worker(release, Settings("vllm-0.25-plugin"))  # imported already: patched at once, once
        assert vars(gpu_worker.Worker)[plugin.PATCHED]["load_model"](None) == "loaded"
    finally:
        sys.meta_path[:] = finders
        for name in [n for n in sys.modules if n.startswith("fakevllm_lazy")]:
            del sys.modules[name]


def test_every_variable_the_settings_read_is_in_the_settings_reference():
    """One Settings reads every WARMUP_* variable of the plugin (issue 56 item 3), and docs/reference/settings.md
    names each: a setting added to the one and not the other fails here."""
    import re

    from vllm_bridge import settings

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    read = set(re.findall(r'"(WARMUP_[A-Z_]*[A-Z])"', open(settings.__file__).read()))
    documented = open(os.path.join(root, "docs", "reference", "settings.md")).read()
    assert "WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS" in read and len(read) > 10
    assert sorted(v for v in read if f"`{v}" not in documented) == []
