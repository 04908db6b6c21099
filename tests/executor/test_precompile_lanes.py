"""The pool's two lanes (executor/precompile/workers/lanes.py) on CPU: the device lane's barrier ends its
workers while the CUDA-free lane goes on; a CUDA-free job that hangs is ended by the watchdog with
what it started; FlashInfer's build-only twin builds without loading and skips prebuilt modules.

Real workers (forkserver) run fake backends defined in test_precompile.py and here (workers import
both modules by name); no GPU, no FlashInfer (a stand-in package for the twin's test).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from test_precompile import FakeBackend, _in_worker, _instructions, alive, fake_env, gemm, options, plan  # noqa: F401 - fake_env: a fixture
from test_registry import fictitious_row  # noqa: F401 - a fixture: one backend row, its classes in a module of its own

from executor import registry
from executor.precompile.workers import backend_classes
from executor.precompile.workers import setup as workers_setup
from executor.precompile.workers.build_ahead import BUILD_AHEAD_NICE
from executor.precompile.workers.lanes import DEVICE_LANE_NICE, lane_of

FREE = ("test_precompile_lanes", "FakeCompileOnly")


class FakeCompileOnly(FakeBackend):
    """The fake backend's CUDA-free twin: its jobs go to the compile lane. A step may ask for a
    child process that outlives nothing (`child_in_worker`: its pid is logged), then a sleep."""

    name = "fake_free"
    cuda_free = True

    def _run(self, step, values, tick):
        asks = _instructions(step.id) if _in_worker() else {}
        release = os.path.join(os.environ["WARMUP_FAKE_LOG_DIR"], "release")
        deadline = time.time() + 60
        while asks.get("wait_for_release") and not os.path.exists(release) and time.time() < deadline:
            time.sleep(0.05)  # held until the test lets it go: no race with the clock
        if asks.get("child_in_worker"):
            child = subprocess.Popen(["sleep", "300"])
            open(os.path.join(os.environ["WARMUP_FAKE_LOG_DIR"], f"child-{child.pid}"), "w").close()
        return super()._run(step, values, tick)

    gemm = grouped_gemm = _run


def running(pids) -> list[int]:
    """The processes of `pids` alive and not zombies (a killed orphan waits for init to reap it)."""
    out = []
    for pid in alive(pids):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z":
            out.append(pid)
    return out


@pytest.fixture
def lanes_env(fake_env, monkeypatch):
    """test_precompile's fake backend and caches, with its CUDA-free twin registered."""
    monkeypatch.setitem(registry.BACKENDS, "fake_free", FREE)
    monkeypatch.setitem(backend_classes.WORKER_CLASSES, "fake_free", FREE)
    return fake_env


def started(expanded, note=None, **kw):
    from executor.run import start_precompile

    return start_precompile(expanded, None, options(precompile_backends=("fake", "fake_free"), **kw), note=note)


def test_a_backend_with_a_cuda_free_twin_runs_in_the_compile_lane(lanes_env):
    assert lane_of("fake_free") == "compile" and lane_of("fake") == "device"
    assert lane_of("triton") == "compile" and lane_of("flashinfer_jit") == "compile"
    assert lane_of("deep_gemm") == "device"


def test_the_device_lanes_barrier_ends_its_workers_while_the_compile_lane_goes_on(lanes_env):
    pre = started(plan(gemm("d", [1, 2], ["d1", "d2"]),
                       gemm("c", [3], ["c1"], backend="fake_free", wait_for_release=True)), jobs=4)
    assert pre.status == "ran" and pre.summary()["lanes"] == {"compile": 1, "device": 2}
    assert pre.finish_lane("device", 60) is None                 # c1 is held: the barrier did not wait for it
    lane = pre.device_lane_wait
    assert lane["still_running"] == ["fake_free c1"] and lane["waited_s"] >= 0
    assert pre.pool is not None and not pre.pool.has("device") and pre.pool.has("compile")
    device_pids = {r.pid for r in pre.results() if r.backend == "fake"}
    time.sleep(0.2)
    assert device_pids and alive(device_pids) == []              # the device lane's processes are gone
    (lanes_env["log"] / "release").touch()
    pre.close()
    assert {(r.key, r.status) for r in pre.results()} == {("d1", "ok"), ("d2", "ok"), ("c1", "ok")}
    nice = {(w["lane"], w["nice"] - os.nice(0)) for w in pre.timings.ready}
    assert nice == {("device", DEVICE_LANE_NICE), ("compile", 0)}  # the short jobs yield to the long builds,
    assert DEVICE_LANE_NICE > BUILD_AHEAD_NICE > 0                 # also to those started ahead, which yield to vLLM
    assert pre.summary()["lane_waits"]["device"]["still_running"] == ["fake_free c1"]


def test_a_hung_compile_job_is_ended_with_what_it_started_and_said_in_one_line(lanes_env):
    notes = []
    pre = started(plan(gemm("d", [1], ["d1"]),
                       gemm("c", [3], ["c1"], backend="fake_free", child_in_worker=True, sleep_in_worker=120)),
                  note=notes.append)
    assert pre.finish_lane("device", 60) is None
    deadline = time.time() + 30
    while not any(n.startswith("child-") for n in os.listdir(lanes_env["log"])) and time.time() < deadline:
        time.sleep(0.1)
    child = [int(n.split("-")[1]) for n in os.listdir(lanes_env["log"]) if n.startswith("child-")]
    pre.bound(0.5)
    while pre.status == "ran" and time.time() < deadline:
        time.sleep(0.1)
    assert pre.status == "cancelled" and not pre.holds_workers
    assert len(notes) == 1 and notes[0].startswith("precompile: 1 jobs still running 0.5 s after") and "fake_free c1" in notes[0]
    time.sleep(0.3)
    assert child and running(child) == []                        # the job's own child is gone too
    c1 = next(r for r in pre.results() if r.key == "c1")
    assert c1.status != "ok"                                     # so its kernel compiles where needed


def test_the_compile_lane_is_told_the_gpus_architecture_for_flashinfer(monkeypatch):
    monkeypatch.setattr(workers_setup, "gpu_capability", lambda: 90)
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST", raising=False)
    free = workers_setup.worker_setup("cuda:0", cuda_free=True)
    assert free["env"]["FLASHINFER_CUDA_ARCH_LIST"] == "9.0" and free["cuda_free"] is True
    device = workers_setup.worker_setup("cuda:0")
    assert "FLASHINFER_CUDA_ARCH_LIST" not in device["env"] and device["cuda_free"] is False
    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "9.0a 10.0a")  # the user's own stays theirs
    assert "FLASHINFER_CUDA_ARCH_LIST" not in workers_setup.worker_setup("cuda:0", cuda_free=True)["env"]


FAKE_JIT = '''
import os
CALLS = []

class Spec:
    def __init__(self, name):
        self.name = name
    @property
    def is_aot(self):
        return self.name in os.environ.get("FAKE_AOT", "").split()
    def build(self, verbose, need_lock=True):
        CALLS.append(("build", self.name, need_lock))
    def build_and_load(self):
        CALLS.append(("build_and_load", self.name))

def gen_sampling_module():
    return Spec("sampling")

def gen_gemm_module():
    return Spec("gemm")
'''


def test_flashinfers_build_only_twin_builds_under_the_lock_and_loads_nothing(tmp_path, monkeypatch):
    from kernel_model.flashinfer_jit import JitModule
    from planner.plan import steps as st

    from executor.backends.flashinfer_jit import FlashInferJitBuildOnly

    pkg = tmp_path / "flashinfer" / "jit"
    pkg.mkdir(parents=True)
    (tmp_path / "flashinfer" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "fake.py").write_text(FAKE_JIT)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "flashinfer" or m.startswith("flashinfer.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST", raising=False)
    twin = FlashInferJitBuildOnly("cuda:0")
    ok, why = twin.available()
    assert not ok and "FLASHINFER_CUDA_ARCH_LIST unset" in why            # no target: vLLM builds them
    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "9.0")
    monkeypatch.setenv("FAKE_AOT", "gemm")                                  # flashinfer-jit-cache holds it
    assert twin.available() == (True, "")
    modules = [JitModule("sampling", "flashinfer.jit.fake:gen_sampling_module"),
               JitModule("gemm", "flashinfer.jit.fake:gen_gemm_module")]
    step = st.Kernel("fi/m", "fi", kernel="flashinfer_jit_module", backend="flashinfer_jit",
                     variants=tuple(st.Variant(m.key(), m) for m in modules))
    assert twin.kernel(step, modules, lambda n: None) == 2
    import flashinfer.jit.fake as fake

    assert fake.CALLS == [("build", "sampling", True)]                      # built, locked, never loaded
    assert twin.built == ["sampling"] and twin.prebuilt == ["gemm"]


def test_a_fictitious_backend_row_reaches_the_pool(fictitious_row):
    """The pool reads a new backend off its one row (tests/executor/test_registry.py adds it): its worker runs
    the row's compile-only twin, in the compile lane (the twin is CUDA-free), with its preloads."""
    from executor.precompile.workers.lanes import COMPILE_LANE, preload_of

    assert backend_classes.WORKER_CLASSES["fictitious"] == fictitious_row.worker
    assert backend_classes.worker_specs(["fictitious", "null"])["fictitious"] == fictitious_row.worker
    assert lane_of("fictitious") == COMPILE_LANE and preload_of(["fictitious"]) == ["json"]
