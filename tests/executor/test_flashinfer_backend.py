"""executor.backends.flashinfer with a fake `flashinfer` (CPU), and with the real one on a GPU.

The fake mimics FlashInfer 0.6.16's autotuner where the backend relies on it: the
``AutoTuner.get()`` singleton with ``profiling_cache`` / ``_file_configs`` /
``_profile_single_kernel`` / ``load_configs`` / ``save_configs``, and
``autotune(tune_mode, cache=...)`` that loads on entry and saves (mkstemp + os.replace) on exit
when something was tuned; ``bmm_fp8`` profiles 3 tactics per bucket not yet cached. A second
fake drops ``cache=`` (older FlashInfer): the backend then loads and saves by itself.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
import types

import pytest

from planner.engine.facts import Quant
from planner.plan.expanded import ExpandedPlan
from planner.plan.steps import Autotune

from executor.backends import flashinfer as fib
from executor.backends.base import Unavailable

BUCKETS = (1, 2, 4)  # the fake's buckets below num_tokens (FlashInfer: the hybrid buckets)


def make_fake(native_cache: bool = True, can_save: bool = True, save_breaks: bool = False) -> dict:
    """Modules for sys.modules: flashinfer, flashinfer.autotuner, flashinfer.gemm."""

    class AutoTuner:
        _instance = None

        def __init__(self):
            self.profiling_cache: dict = {}
            self._file_configs: dict = {}
            self._dirty = False
            self.is_tuning_mode = False
            self.saves: list[str] = []

        @classmethod
        def get(cls):
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

        def _profile_single_kernel(self, runner, inputs, tactic, config):
            return 1.0 + tactic

        def load_configs(self, path):
            with open(path) as f:
                data = json.load(f)
            data.pop("_metadata", None)
            self._file_configs.update({k: tuple(v) for k, v in data.items()})
            return True

        def _write(self, path):
            self.saves.append(path)
            data = {"_metadata": {"flashinfer_version": "0.0.fake"}}
            data.update({k: list(v) for k, v in self._file_configs.items()})
            data.update({k: ["FakeRunner", v] for k, v in self.profiling_cache.items()})
            with open(path, "w") as f:
                if save_breaks:
                    f.write('{"half": ')
                    raise OSError("disk full")
                json.dump(data, f)

    if can_save:
        AutoTuner.save_configs = AutoTuner._write

    def _enter(tune_mode):
        tuner = AutoTuner.get()
        tuner.is_tuning_mode = tune_mode

    if native_cache:
        @contextlib.contextmanager
        def autotune(tune_mode: bool = True, cache: str | None = None):
            tuner = AutoTuner.get()
            if cache is not None:
                tuner._file_configs.clear()
                if os.path.isfile(cache):
                    tuner.load_configs(cache)
            _enter(tune_mode)
            try:
                yield
            finally:
                tuner.is_tuning_mode = False
                if cache is not None and tune_mode and tuner._dirty:
                    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(cache)), prefix=".autotuner_")
                    os.close(fd)
                    tuner._write(tmp)
                    os.replace(tmp, cache)
                    tuner._dirty = False
    else:
        @contextlib.contextmanager
        def autotune(tune_mode: bool = True):
            _enter(tune_mode)
            try:
                yield
            finally:
                AutoTuner.get().is_tuning_mode = False

    calls: list = []

    class FakeRunner:
        pass

    def bmm_fp8(A, B, A_scale, B_scale, dtype, out=None, backend="cublas"):
        m, n, k = A.shape[1], B.shape[2], A.shape[2]
        calls.append((m, n, k, backend, str(A.dtype), tuple(B.stride())))
        tuner = AutoTuner.get()
        if tuner.is_tuning_mode:
            for bucket in sorted(set(BUCKETS) | {m}):
                key = f"('fp8_gemm', 'FakeRunner', ({bucket}, {n}, {k}))"
                if key in tuner.profiling_cache or key in tuner._file_configs:
                    continue
                times = [tuner._profile_single_kernel(FakeRunner(), [A, B], t, None) for t in range(3)]
                tuner.profiling_cache[key] = times.index(min(times))
                tuner._dirty = True

    root = types.ModuleType("flashinfer")
    root.__version__ = "0.0.fake"
    root.__path__ = []
    root.__spec__ = importlib.machinery.ModuleSpec("flashinfer", None, is_package=True)
    at = types.ModuleType("flashinfer.autotuner")
    at.AutoTuner, at.autotune = AutoTuner, autotune
    gemm = types.ModuleType("flashinfer.gemm")
    gemm.bmm_fp8 = bmm_fp8
    root.autotuner, root.gemm, root.autotune = at, gemm, autotune
    return {"flashinfer": root, "flashinfer.autotuner": at, "flashinfer.gemm": gemm, "calls": calls,
            "AutoTuner": AutoTuner}


@pytest.fixture
def fake(monkeypatch):
    def install(**kw):
        f = make_fake(**kw)
        for name in ("flashinfer", "flashinfer.autotuner", "flashinfer.gemm"):
            monkeypatch.setitem(sys.modules, name, f[name])
        return f
    return install


@pytest.fixture(scope="module")
def engine():
    from planner.engine.config import load_engine

    return load_engine("llama-3.1-8b-fp8-h100").facts


class Ctx:
    def __init__(self, engine, runner=None, capturing=False):
        self.engine, self.runner, self.capturing = engine, runner, capturing

    def get_runner(self, required=True):
        return self.runner


def step(cache="persistent", num_tokens=8):
    return Autotune("flashinfer_autotune/autotune", "flashinfer_autotune", library="flashinfer",
                    num_tokens=num_tokens, buckets=(1, 2, 4, 8), cache=cache, randomize_inputs=True)


def one_step_plan(only):
    return ExpandedPlan(plan="t", engine="llama-3.1-8b-fp8-h100", planner_version="0", digest="", inputs={},
                        steps=(only,))


def backend(cache_file=None):
    return fib.FlashInferBackend("cpu", types.SimpleNamespace(flashinfer_cache=cache_file))


# --- availability: never a crash -------------------------------------------------------------------

def test_not_installed_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    ok, why = backend().available()
    assert not ok and "not installed" in why


def test_broken_flashinfer_is_unavailable_with_the_reason(monkeypatch):
    pytest.importorskip("torch")

    class Broken(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            return importlib.machinery.ModuleSpec(name, self) if name == "flashinfer" else None

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            raise OSError("libcudart.so.12: cannot open shared object file")

    monkeypatch.delitem(sys.modules, "flashinfer", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    ok, why = backend().available()
    assert not ok and "failed to import" in why and "libcudart" in why


def test_flashinfer_without_autotuner_is_unavailable(monkeypatch, fake):
    pytest.importorskip("torch")
    f = fake()
    del f["flashinfer.autotuner"].autotune
    ok, why = backend().available()
    assert not ok and "autotune" in why


def test_fake_flashinfer_is_available(fake):
    pytest.importorskip("torch")
    fake()
    assert backend().available() == (True, "")


# --- the tuning run ------------------------------------------------------------------------------------

def bf16_linears(engine):
    """`engine` with one unquantized linear, and no other."""
    linear = engine.model.linear[0]._replace(name="x", n=8, k=8, quant=Quant("none", None), kernel=None)
    return engine._replace(model=engine.model._replace(linear=(linear,)))


def test_fp8_linear_shapes(engine):
    assert fib.fp8_shapes(engine.model.linear) == [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
    assert fib.fp8_shapes(bf16_linears(engine).model.linear) == []


def test_persistent_cache_written_then_loaded_with_no_tuning(tmp_path, fake, engine):
    pytest.importorskip("torch")
    f = fake()
    path = str(tmp_path / "c" / "autotune_configs.json")
    ticks: list = []
    d1 = backend(path).autotune(step(), ticks.append, Ctx(engine))
    shapes = fib.fp8_shapes(engine.model.linear)
    assert [(c[1], c[2]) for c in f["calls"]] == shapes                    # one call per shape...
    assert {c[0] for c in f["calls"]} == {8} and {c[3] for c in f["calls"]} == {"auto"}  # ...at num_tokens
    assert all(c[4] == "torch.float8_e4m3fn" and c[5][1] == 1 for c in f["calls"])  # FP8, B column-major
    assert d1["profiles_tuned"] == 4 * len(shapes) and d1["tactics_profiled"] == 3 * 4 * len(shapes)
    assert ticks == [d1["tactics_profiled"]]
    assert d1["cache_written"] and d1["cache_api"] == "autotune(cache=...)" and d1["cache_entries_loaded"] == 0
    assert not [n for n in os.listdir(tmp_path / "c") if n.startswith(".")]  # no temp file left
    saved = json.load(open(path))
    assert len(saved) == 1 + 4 * len(shapes)

    # A fresh process: a new AutoTuner; the file is loaded and nothing is profiled or rewritten.
    f["AutoTuner"]._instance = None
    before = os.stat(path).st_mtime_ns
    ticks.clear()
    d2 = backend(path).autotune(step(), ticks.append, Ctx(engine))
    assert d2["cache_entries_loaded"] == 4 * len(shapes)
    assert d2["tactics_profiled"] == 0 and d2["profiles_tuned"] == 0 and ticks == [0]
    assert not d2["cache_written"] and os.stat(path).st_mtime_ns == before


def test_memory_cache_writes_nothing(tmp_path, fake, engine, monkeypatch):
    pytest.importorskip("torch")
    fake()
    monkeypatch.setenv("WARMUP_FLASHINFER_CACHE_DIR", str(tmp_path / "default"))
    d = backend().autotune(step(cache="memory"), lambda n: None, Ctx(engine))
    assert d["tactics_profiled"] > 0 and "cache_file" not in d and not d["cache_written"]
    assert not (tmp_path / "default").exists()


def test_default_cache_path(tmp_path, fake, engine, monkeypatch):
    pytest.importorskip("torch")
    fake()
    monkeypatch.setenv("WARMUP_FLASHINFER_CACHE_DIR", str(tmp_path))
    d = backend().autotune(step(), lambda n: None, Ctx(engine))
    assert d["cache_file"] == str(tmp_path / "0.0.fake" / "cpu" / "autotune_configs.json")
    assert os.path.isfile(d["cache_file"])


def test_older_flashinfer_loads_and_saves_atomically_itself(tmp_path, fake, engine, monkeypatch):
    pytest.importorskip("torch")
    f = fake(native_cache=False)
    path = str(tmp_path / "autotune_configs.json")
    d1 = backend(path).autotune(step(), lambda n: None, Ctx(engine))
    assert d1["cache_api"] == "load_configs/save_configs" and d1["cache_written"]
    (src,) = f["AutoTuner"].get().saves  # the library wrote a temporary file, never the cache
    assert src != path and not os.path.exists(src) and os.listdir(tmp_path) == ["autotune_configs.json"]
    f["AutoTuner"]._instance = None
    d2 = backend(path).autotune(step(), lambda n: None, Ctx(engine))
    assert d2["cache_loaded"] and d2["tactics_profiled"] == 0


def test_a_save_that_breaks_leaves_the_old_cache_whole(tmp_path, fake, engine):
    pytest.importorskip("torch")
    fake(native_cache=False, save_breaks=True)
    path = tmp_path / "autotune_configs.json"
    path.write_text('{"_metadata": {}}')
    with pytest.raises(OSError, match="disk full"):
        backend(str(path)).autotune(step(), lambda n: None, Ctx(engine))
    assert path.read_text() == '{"_metadata": {}}' and os.listdir(tmp_path) == ["autotune_configs.json"]


def test_no_save_support_tunes_in_memory_and_says_why(tmp_path, fake, engine):
    pytest.importorskip("torch")
    fake(native_cache=False, can_save=False)
    d = backend(str(tmp_path / "c.json")).autotune(step(), lambda n: None, Ctx(engine))
    assert d["tactics_profiled"] > 0 and "tuned in memory only" in d["cache_error"]
    assert not d["cache_written"] and not (tmp_path / "c.json").exists()


def test_runner_dummy_run_is_the_tuning_run(tmp_path, fake, engine):
    pytest.importorskip("torch")
    f = fake()

    class Runner:
        seen: list = []

        def dummy_run(self, n):
            self.seen.append(n)

    d = backend(str(tmp_path / "c.json")).autotune(step(num_tokens=16), lambda n: None, Ctx(engine, Runner()))
    assert Runner.seen == [16] and d["tuning_run"] == "runner.dummy_run" and f["calls"] == []


def test_refuses_during_capture_and_without_fp8_linears(fake, engine):
    pytest.importorskip("torch")
    fake()
    with pytest.raises(RuntimeError, match="capture"):
        backend().autotune(step(cache="memory"), lambda n: None, Ctx(engine, capturing=True))
    with pytest.raises(Unavailable, match="no FP8 linear"):
        backend().autotune(step(cache="memory"), lambda n: None, Ctx(bf16_linears(engine)))


def test_executor_runs_the_step_with_the_fake(tmp_path, fake, engine):
    pytest.importorskip("torch")
    fake()
    from executor.run import Options, execute

    path = str(tmp_path / "autotune_configs.json")
    expanded = one_step_plan(step())
    rep = execute(expanded, engine, Options(runner="none", device="cpu", flashinfer_cache=path,
                                            jit_monitor="off")).to_dict()
    (s,) = rep["steps"]
    assert s["status"] == "ok" and s["backend"] == "flashinfer" and s["kernel_calls"] == 48
    assert s["details"]["cache_written"] and os.path.isfile(path)


def test_executor_reports_a_missing_flashinfer_as_unavailable(monkeypatch, engine):
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    from executor.run import Options, execute

    expanded = one_step_plan(step(cache="memory"))
    rep = execute(expanded, engine, Options(runner="none", device="cpu", jit_monitor="off")).to_dict()
    (s,) = rep["steps"]
    assert s["status"] == "unavailable" and "not installed" in s["error"]


# --- the real FlashInfer on an SM90 GPU ------------------------------------------------------------

@pytest.mark.gpu
def test_real_flashinfer_tunes_then_loads(tmp_path):
    pytest.importorskip("flashinfer")
    import torch

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("FlashInfer autotune runs on SM90 and later")
    from flashinfer.autotuner import AutoTuner

    eng = {"model": {"linear": [{"name": "x", "n": 512, "k": 512, "quant": {"method": "fp8"}}]}}
    path = str(tmp_path / "autotune_configs.json")
    b = fib.FlashInferBackend("cuda", types.SimpleNamespace(flashinfer_cache=path))
    assert b.available() == (True, "")
    d1 = b.autotune(step(num_tokens=256), lambda n: None, Ctx(eng))
    assert d1["tactics_profiled"] > 0 and d1["cache_written"] and os.path.isfile(path)
    AutoTuner._instance = None  # as a fresh process would
    d2 = b.autotune(step(num_tokens=256), lambda n: None, Ctx(eng))
    assert d2["tactics_profiled"] == 0 and d2["cache_entries_loaded"] > 0 and not d2["cache_written"]
