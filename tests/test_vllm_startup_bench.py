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

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


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


def write_run(runs, name, rc=0, **result):
    os.makedirs(runs / name)
    (runs / name / "run.json").write_text(json.dumps({"rc": rc, "wall_s": 1.0}))
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
    assert checks["KV cache = stock-warm's"]["pass"] is True
    assert "plugin active only in the plugin arm" not in checks


def test_summary_checks_with_runs_missing_or_wrong(tmp_path):
    summary = load("vllm_startup_summary")
    runs = tmp_path / "runs"
    write_run(runs, "plugin-cold", **result("plugin", 200.0, 999, active=False))
    write_run(runs, "stock-cold", rc=124)  # killed by its time limit before ready: no result
    write_run(runs, "stock-warm", **result("stock", 70.0, 1000))
    rows = {n: r for n in summary.RUNS if (r := summary.row(str(runs), n))}
    checks = {c["check"]: c for c in summary.checks(rows)}
    assert checks["cold start >= 2x faster"]["pass"] is None
    assert checks["KV cache = stock-warm's"]["pass"] is False
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
