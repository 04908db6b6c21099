"""The vLLM start-up proof's harness, on CPU: no vLLM, no GPU, no matplotlib.

- bench/vllm_plugin_trace.py's phase wrappers are transparent (the plugin patches the same
  Worker methods after them and keeps them as its originals): same return value, same name and
  docstring, methods, classmethods and staticmethods keep their kind, exceptions pass through and
  the phase is still recorded, wrapping twice is a no-op;
- bench/vllm_startup_summary.py's three checks read the runs as the proof script writes them;
- bench/plot_startup_timeline.py's layout nests phases by containment and gives each precompile
  worker its own row (drawing itself needs matplotlib and is not tested here).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(BENCH, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def trace():
    module = load("vllm_plugin_trace")
    module.PHASES.clear()
    module.WRAPPED.clear()
    module.NOT_FOUND.clear()
    return module


def test_wrappers_are_transparent(trace):
    class Worker:
        def load_model(self, *, load_dummy_weights=False):
            """vLLM's docstring."""
            return ("loaded", load_dummy_weights)

        @classmethod
        def make(cls, x):
            return (cls.__name__, x)

        @staticmethod
        def helper(x, y=1):
            return x + y

        def fails(self):
            raise ValueError("boom")

    assert trace.wrap(Worker, "load_model", "weights")
    assert trace.wrap(Worker, "make", "make")
    assert trace.wrap(Worker, "helper", "helper")
    assert trace.wrap(Worker, "fails", "fails")
    assert trace.wrap(Worker, "load_model", "again")  # a no-op: wrapped once
    assert not trace.wrap(Worker, "absent", "absent")

    assert Worker().load_model(load_dummy_weights=True) == ("loaded", True)
    assert Worker.load_model.__name__ == "load_model" and Worker.load_model.__doc__ == "vLLM's docstring."
    assert Worker.make(3) == ("Worker", 3) and Worker().make(4) == ("Worker", 4)
    assert isinstance(vars(Worker)["make"], classmethod) and isinstance(vars(Worker)["helper"], staticmethod)
    assert Worker.helper(1, y=2) == 3 and Worker().helper(5) == 6
    with pytest.raises(ValueError, match="boom"):
        Worker().fails()
    names = [p["name"] for p in trace.PHASES]
    assert names == ["weights", "make", "make", "helper", "helper", "fails"]
    assert all(p["start"] <= p["end"] for p in trace.PHASES)
    assert any(w.endswith("Worker.load_model") for w in trace.WRAPPED)
    assert any(n.endswith("Worker.absent") for n in trace.NOT_FOUND)


def test_a_later_patch_keeps_the_wrapper_as_its_original(trace):
    """What the plugin does at load: store what it finds, call it from its own wrapper."""
    class Worker:
        def compile_or_warm_up_model(self):
            return 42

    trace.wrap(Worker, "compile_or_warm_up_model", "compile_or_warm_up_model")
    original = Worker.compile_or_warm_up_model

    def patched(self, *args, **kwargs):
        return original(self, *args, **kwargs) + 1

    Worker.compile_or_warm_up_model = patched
    assert Worker().compile_or_warm_up_model() == 43
    assert [p["name"] for p in trace.PHASES] == ["compile_or_warm_up_model"]


def test_module_functions_are_wrapped_in_the_importing_namespace(trace):
    import types

    module = types.ModuleType("fake_gpu_worker")
    module.kernel_warmup = lambda worker: ("warmed", worker)
    assert trace.wrap(module, "kernel_warmup", "kernel_warmup")
    assert module.kernel_warmup("w") == ("warmed", "w")
    assert trace.PHASES[0]["name"] == "kernel_warmup"
    assert trace.WRAPPED == ["fake_gpu_worker.kernel_warmup"]


def write_run(runs, name, rc=0, proof=None, **result):
    """A run's directory; a bundle-cold run's tripwire (issue 43 item 5): watched, nothing opened, unless `proof`."""
    os.makedirs(runs / name)
    watched = {"builder_roots": "/build/vllm/torch_compile_cache", "builder_opens": "0"} if "bundle-cold" in name else {}
    (runs / name / "run.json").write_text(json.dumps({"rc": rc, "wall_s": 1.0, **watched, **(proof or {})}))
    if result:
        (runs / name / "result.json").write_text(json.dumps(result))


def result(arm, ready, blocks, compiles=None, active=None):
    counts = dict.fromkeys(("triton", "deep_gemm", "torch_compile", "flashinfer"), 0) | (compiles or {})
    return {"arm": arm, "ready_s": ready, "kv_cache": {"num_gpu_blocks": blocks}, "trace_s": 10.0,
            "first_request_s": 0.1, "compiles_after_ready": {**counts, "events": 0},
            "plugin_active": arm == "plugin" if active is None else active}


def test_summary_checks(tmp_path):
    summary = load("vllm_startup_summary")
    runs = tmp_path / "runs"
    write_run(runs, "stock-cold", **result("stock", 300.0, 1000))
    write_run(runs, "plugin-cold", **result("plugin", 120.0, 1000))
    write_run(runs, "plugin-warm", **result("plugin", 60.0, 1000, {"triton": 2}))
    write_run(runs, "stock-warm", **result("stock", 70.0, 1000))
    rows = {n: summary.row(str(runs), n) for n in summary.RUNS}
    checks = {c["check"]: c for c in summary.checks(rows)}
    assert checks["cold start >= 2x faster"]["pass"] is True
    assert "2.50x" in checks["cold start >= 2x faster"]["detail"]
    assert checks["0 compiles after ready (plugin)"]["pass"] is False  # plugin-warm compiled 2 Triton kernels
    assert checks["KV cache = stock-warm's (within 1%)"]["pass"] is True
    assert "plugin active only in the plugin arm" not in checks


def test_kv_cache_is_within_one_percent_of_stock_warm_with_stock_at_its_temperature_beside_it(tmp_path):
    """Issue 23: within 1% of a warm stock boot. A cold process of either arm holds more memory than
    a warm one (H100 with FlashInfer: 25 of 29,104 blocks), so the same-temperature stock run is shown."""
    summary = load("vllm_startup_summary")

    def check(blocks: dict):
        runs = tmp_path / str(len(list(tmp_path.iterdir())))
        for name, n in blocks.items():
            write_run(runs, name, **result(name.split("-")[0], 100.0, n))
        rows = {n: r for n in summary.RUNS if (r := summary.row(str(runs), n))}
        return next(c for c in summary.checks(rows) if c["check"] == "KV cache = stock-warm's (within 1%)")
    ok = check({"stock-cold": 29079, "plugin-cold": 29078, "stock-warm": 29104, "plugin-warm": 29104})
    assert ok["pass"] is True and "plugin-cold 29078 (stock at its temperature 29079)" in ok["detail"]
    assert check({"plugin-cold": 28000, "stock-warm": 29104})["pass"] is False  # 3.8% fewer
    assert check({"plugin-cold": 28000})["pass"] is None


def test_summary_checks_with_runs_missing_or_wrong(tmp_path):
    summary = load("vllm_startup_summary")
    runs = tmp_path / "runs"
    write_run(runs, "plugin-cold", **result("plugin", 200.0, 999, active=False))
    write_run(runs, "stock-cold", rc=124)  # killed by its time limit before ready: no result
    write_run(runs, "stock-warm", **result("stock", 70.0, 1000))
    rows = {n: r for n in summary.RUNS if (r := summary.row(str(runs), n))}
    checks = {c["check"]: c for c in summary.checks(rows)}
    assert checks["cold start >= 2x faster"]["pass"] is None
    assert checks["KV cache = stock-warm's (within 1%)"]["pass"] is True  # 999 of 1000 blocks
    assert checks["plugin active only in the plugin arm"]["pass"] is False
    assert rows["stock-cold"]["rc"] == 124 and rows["stock-cold"]["ready_s"] is None


def test_plot_layout_nests_by_containment():
    plot = load("plot_startup_timeline")
    t = 100.0
    phases = [{"name": n, "start": t + s, "end": t + e} for n, s, e in [
        ("LLM() to ready", 1, 50), ("memory profile", 10, 30), ("profile run", 10, 29), ("torch.compile", 11, 20),
        ("compile_or_warm_up_model", 31, 49), ("CUDA graphs", 40, 45), ("first request", 50, 51)]]
    phases.append({"name": "plan: deep_gemm", "start": t + 32, "end": t + 33, "derived": True})
    run = {"arm": "plugin", "process_start": t, "ready_at": t + 50, "phases": phases,
           "plugin": {"lanes": [{"pid": 7, "jobs": [{"start": t + 5, "end": t + 6, "backend": "deep_gemm_vllm"}]},
                                {"pid": 8, "jobs": [{"start": t + 5, "end": t + 7, "backend": "triton"}]}]}}
    lay = plot.layout([("plugin-cold", run)])
    row = {b["name"]: b["row"] for b in lay["bars"]}
    labels = [r["label"] for r in lay["rows"]]
    assert row["LLM() to ready"] == row["first request"] == 0
    assert row["memory profile"] == row["compile_or_warm_up_model"] == 1
    assert row["profile run"] == row["CUDA graphs"] == 2
    assert row["torch.compile"] == 3
    assert labels[row["plan: deep_gemm"]].endswith("plan stages (report)")
    assert labels[-2:] == ["plugin-cold: precompile pid 7", "plugin-cold: precompile pid 8"]
    assert lay["marks"][0]["at"] == 50 and lay["end"] == 51
    assert plot.category("DeepGEMM warmup")[0] == plot.category("plan: deep_gemm")[0] == "DeepGEMM"
    from vllm_bridge.ahead import BUILT_AHEAD  # the plugin's span for its build-ahead process has a colour of its own
    assert plot.category(BUILT_AHEAD)[0] == "FlashInfer modules built ahead"


def test_cache_listing_counts_kernels_new_after_ready(trace, tmp_path, monkeypatch):
    """Tensor-parallel ranks compile in other processes: the arm's caches say what they compiled."""
    vllm, triton, inductor = (tmp_path / n for n in ("vllm", "triton", "inductor"))
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(vllm))
    monkeypatch.setenv("TRITON_HOME", str(triton))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))

    def put(path, text="x"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    put(vllm / "deep_gemm/cache/kernel.gemm.aa/kernel.cubin")
    before = trace.cache_files()
    put(vllm / "deep_gemm/cache/kernel.gemm.bb/kernel.cubin")
    put(vllm / "deep_gemm/cache/kernel.gemm.bb/kernel.cu")
    put(vllm / "deep_gemm/cache/warmup-claims/kernel.gemm.cc.claim")  # bookkeeping, not a compile
    put(triton / ".triton/cache/HASH1/_topk_topp_kernel.cubin")
    put(triton / ".triton/cache/HASH1/_topk_topp_kernel.json")
    put(inductor / "triton/0/HASH2/triton_poi.cubin")
    put(vllm / "torch_compile_cache/abc/rank_0_0/backbone/artifact")
    got = trace.new_cache_entries(before, trace.cache_files())
    assert got["kernels"] == {"deep_gemm": 1, "triton": 2}
    assert got["files"] == {"deep_gemm": 2, "torch_compile": 1, "triton": 3}
    assert not any("warmup-claims" in p for p in got["examples"])
    assert trace.new_cache_entries(before, before)["kernels"] == {}


def test_rank_reports_and_events_read_every_rank(trace, tmp_path, monkeypatch):
    report, log = tmp_path / "plan_report.json", tmp_path / "plugin_jit.jsonl"
    monkeypatch.setenv("WARMUP_PLAN_REPORT", str(report))
    monkeypatch.setenv("WARMUP_JIT_LOG", str(log))
    claims = {"compiled": 30, "waited": 2, "loaded": 0, "node_keys": 58, "node_processes": 2, "taken_over": []}
    report.write_text(json.dumps({"status": "ok", "precompile": {"jobs": 58, "claims": claims}}))
    (tmp_path / "plan_report.rank1.json").write_text(json.dumps(
        {"status": "ok", "precompile": {"jobs": 58, "failed": 0, "claims": {**claims, "compiled": 28}}}))
    (tmp_path / "plugin_jit.rank1.jsonl").write_text(json.dumps({"backend": "triton"}) + "\n")
    ranks = trace.rank_reports(2)
    assert [r["claims"]["compiled"] for r in ranks] == [30, 28] and "taken_over" not in ranks[0]["claims"]
    events = trace.rank_events(2)
    assert [e["events"] for e in events] == [0, 1] and events[1]["by_backend"] == {"triton": 1}

    summary = load("vllm_startup_summary")
    result = {"tensor_parallel_size": 2, "ranks": ranks, "rank_events_after_ready": events,
              "cache_new_after_ready": {"kernels": {"deep_gemm": 1}}}
    assert summary.node_keys(result) == {"node_compiled": 58, "node_keys": 58, "node_failed": 0, "startup_compiles": 0,
                                         "startup_dynamo_frames": 0}
    assert summary.after_ready_elsewhere(result) == {"cache_kernels": 1, "rank_events": 1}


def test_summary_node_check_and_compiles_seen_outside_the_harness(tmp_path):
    summary = load("vllm_startup_summary")
    runs = tmp_path / "runs"
    cold = result("plugin", 120.0, 1000) | {
        "tensor_parallel_size": 2, "cache_new_after_ready": {"kernels": {"triton": 1}},
        "ranks": [{"claims": {"compiled": 40, "node_keys": 58}}, {"claims": {"compiled": 20, "node_keys": 58}}]}
    write_run(runs, "plugin-cold", **cold)
    rows = {n: r for n in summary.RUNS if (r := summary.row(str(runs), n))}
    checks = {c["check"]: c for c in summary.checks(rows)}
    assert checks["node compiles = distinct keys"]["pass"] is False  # 60 compiled for 58 keys
    assert "60 compiled across the ranks, 58 distinct keys" in checks["node compiles = distinct keys"]["detail"]
    # What the H100 pair showed: the claims add up, but rank 1's pool failed 57 jobs (wrong GPU).
    cold["ranks"] = [{"claims": {"compiled": 73, "node_keys": 73}, "failed": 0},
                     {"claims": {"compiled": 0, "node_keys": 73}, "failed": 57}]
    write_run(runs, "plugin-cold-again", **cold)
    row = summary.row(str(runs), "plugin-cold-again")
    checks = {c["check"]: c for c in summary.checks({"plugin-cold": row})}
    assert checks["node compiles = distinct keys"]["pass"] is False
    assert "57 pool jobs failed" in checks["node compiles = distinct keys"]["detail"]
    assert checks["0 compiles after ready (plugin)"]["pass"] is False  # a Triton kernel in the cache


def test_precompile_race_verdicts(tmp_path):
    race = load("precompile_race")

    def report(name, status="ok", claims=None, stages=(), post_seal=0):
        body = {"status": status, "counts": {"ok": 3}, "precompile": {"status": "ran", "claims": claims} if claims else None,
                "stages": [{"stage": s, "compiled": n} for s, n in stages],
                "jit_monitor": {"post_seal_events": [{}] * post_seal}}
        (tmp_path / f"{name}.json").write_text(json.dumps(body))

    report("dg.a", claims={"compiled": 20, "waited": 5, "loaded": 0, "node_keys": 33})
    report("dg.b", claims={"compiled": 13, "waited": 7, "loaded": 0, "node_keys": 33})
    report("dg.warm", stages=[("deep_gemm", 0)])
    report("triton.a", claims={"compiled": 7, "waited": 0, "loaded": 0, "node_keys": 7})
    report("triton.b", claims={"compiled": 1, "waited": 0, "loaded": 0, "node_keys": 7})  # a key twice
    report("triton.warm", stages=[("triton", 0)], post_seal=1)
    dg, triton = (race.verdicts(str(tmp_path), n) for n in race.RACES)
    assert dg["checks"] == {"each key once on the node": True, "both racers ok": True, "warm run compiles nothing": True}
    assert triton["checks"]["each key once on the node"] is False
    assert triton["checks"]["warm run compiles nothing"] is False and triton["warm"]["compiled"] == 1
    missing = race.verdicts(str(tmp_path / "none"), "dg")
    assert missing["checks"] == {"each key once on the node": None, "both racers ok": False,
                                 "warm run compiles nothing": None}


def test_bundle_check_needs_speed_and_no_compiles(tmp_path):
    summary = load("vllm_startup_summary")
    trace_module = load("vllm_plugin_trace")
    report = {"host": {"phases": [{"compiled": {"triton": 0, "torch_compile": 1}}],
                       "stages": [{"compiled": {"triton": 2, "deep_gemm": 0}}]},
              "precompile": {"compiled": 0}}
    assert trace_module.startup_compiles(report) == {"triton": 2, "torch_compile": 1, "deep_gemm": 0, "pool": 0}
    runs = tmp_path / "runs"
    name = "bundle-cold: median ready <= 1.0x stock-warm's, 0 compiles, no building cache opened"
    warm_ranks = [{"claims": {"compiled": 0, "node_keys": 0}, "startup_compiles": {"triton": 0, "pool": 0}}]
    # three alternations: the medians are compared (49 against 50), not one lucky run
    for n, (stock, bundle) in enumerate(((50.0, 49.0), (52.0, 48.0), (47.0, 60.0)), 1):
        write_run(runs, f"stock-warm_{n}", **result("stock", stock, 1000))
        write_run(runs, f"bundle-cold_{n}", **(result("plugin", bundle, 1000) | {"ranks": warm_ranks}))
    assert summary.run_names(str(runs))[:4] == ["stock-cold", "plugin-cold", "plugin-warm", "stock-warm"]
    rows = {n: r for n in summary.run_names(str(runs)) if (r := summary.row(str(runs), n))}
    check = {c["check"]: c for c in summary.checks(rows)}[name]
    assert check["pass"] is True and "0.98x" in check["detail"] and "median of 3: 49.0, 48.0, 60.0" in check["detail"]
    # slower than stock warm: not met
    write_run(runs, "bundle-cold_4", **(result("plugin", 54.0, 1000) | {"ranks": warm_ranks}))
    write_run(runs, "bundle-cold_5", **(result("plugin", 55.0, 1000) | {"ranks": warm_ranks}))
    rows = {n: r for n in summary.run_names(str(runs)) if (r := summary.row(str(runs), n))}
    assert {c["check"]: c for c in summary.checks(rows)}[name]["pass"] is False  # median 54 of 5 against 50
    # vLLM's Dynamo trace of its model (stock warm does it too) is shown, not counted; a kernel is
    runs = tmp_path / "runs2"
    write_run(runs, "stock-warm", **result("stock", 50.0, 1000))
    dynamo_ranks = [{"claims": {"compiled": 0, "node_keys": 0}, "startup_compiles": {"torch_compile": 1}}]
    write_run(runs, "bundle-cold", **(result("plugin", 48.0, 1000) | {"ranks": dynamo_ranks}))
    rows = {n: r for n in summary.run_names(str(runs)) if (r := summary.row(str(runs), n))}
    check = {c["check"]: c for c in summary.checks(rows)}[name]
    assert check["pass"] is True and "kernel compiles to ready 0 (torch.compile frames traced by Dynamo: [1]" \
        in check["detail"]
    slow_ranks = [{"claims": {"compiled": 0, "node_keys": 0}, "startup_compiles": {"triton": 1, "torch_compile": 1}}]
    runs = tmp_path / "runs3"
    write_run(runs, "stock-warm", **result("stock", 50.0, 1000))
    write_run(runs, "bundle-cold", **(result("plugin", 48.0, 1000) | {"ranks": slow_ranks}))
    rows = {n: r for n in summary.run_names(str(runs)) if (r := summary.row(str(runs), n))}
    check = {c["check"]: c for c in summary.checks(rows)}[name]
    assert check["pass"] is False and "kernel compiles to ready 1" in check["detail"]


def test_bundle_check_fails_where_the_building_caches_were_opened_or_not_watched(tmp_path):
    """Issue 43 item 5: a bundle-cold run that touched the building machine's caches, or ran without
    the tripwire watching them, cannot pass, however fast."""
    summary = load("vllm_startup_summary")
    name = "bundle-cold: median ready <= 1.0x stock-warm's, 0 compiles, no building cache opened"
    ranks = [{"claims": {"compiled": 0, "node_keys": 0}, "startup_compiles": {"triton": 0}}]
    for case, proof, verdict in (("watched", None, True), ("opened", {"builder_opens": "2"}, False),
                                 ("unwatched", {"builder_roots": ""}, False)):
        runs = tmp_path / case
        write_run(runs, "stock-warm", **result("stock", 50.0, 1000))
        write_run(runs, "bundle-cold", proof=proof, **(result("plugin", 40.0, 1000) | {"ranks": ranks}))
        rows = {n: r for n in summary.run_names(str(runs)) if (r := summary.row(str(runs), n))}
        check = {c["check"]: c for c in summary.checks(rows)}[name]
        assert check["pass"] is verdict, (case, check["detail"])
    assert "attempts on them [2]" in check["detail"] or "watched: NO" in check["detail"]


def test_the_summarys_compile_kinds_are_the_monitored_families():
    """bench/vllm_startup_summary.py runs with Python alone, so it names the kinds itself: the same as
    the families the JIT monitor counts (executor/caches/registry.py, vllm_bridge/warmup/phases.py)."""
    from vllm_bridge.warmup.phases import KINDS

    assert load("vllm_startup_summary").KINDS == KINDS


def test_cache_listing_counts_flashinfer_modules_and_its_deep_gemm_fork(trace, tmp_path, monkeypatch):
    """With FlashInfer (WITH_FLASHINFER=1): a JIT module is one .so in its workspace; the DeepGEMM
    fork inside its SM 9.0 block-FP8 GEMM writes cubins under TRTLLM_DG_CACHE_DIR."""
    fi, trt = tmp_path / "fi", tmp_path / "trt"
    for var in ("VLLM_CACHE_ROOT", "TRITON_HOME", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(fi))
    monkeypatch.setenv("TRTLLM_DG_CACHE_DIR", str(trt))
    before = trace.cache_files()
    for path in (fi / ".cache/flashinfer/0.6.13/90a/cached_ops/fp8_blockscale_gemm_90/fp8_blockscale_gemm_90.so",
                 fi / ".cache/flashinfer/0.6.13/90a/cached_ops/fp8_blockscale_gemm_90/build.ninja",
                 trt / "cache/gemm_2048_4096_64_128_128_1_5_1_1_Normal/kernel.cubin"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    got = trace.new_cache_entries(before, trace.cache_files())
    assert got["kernels"] == {"flashinfer": 1, "flashinfer_deep_gemm": 1}
    assert got["files"] == {"flashinfer": 2, "flashinfer_deep_gemm": 1}
