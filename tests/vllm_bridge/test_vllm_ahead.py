"""FlashInfer's modules started from vLLM's first process (vllm_bridge/ahead.py) and built in a
process of their own (executor/precompile/workers/build_ahead.py): what the plan ahead names from the
model's config.json, that it starts once and never blocks vLLM, and that the builder builds without
loading, skips prebuilt modules and ends what it started when its time is up. No GPU, no vLLM, no
FlashInfer: stand-ins."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import types

import pytest

from executor import precompile
from vllm_bridge import ahead
from vllm_bridge.settings import Settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMA = os.path.join(ROOT, "tests", "fixtures", "hf", "llama-3.1-8b-instruct-fp8-block.json")


@pytest.fixture
def h100(monkeypatch, tmp_path):
    monkeypatch.setattr(precompile, "gpu_capability", lambda: 90)  # what vllm_bridge.ahead asks NVML through
    monkeypatch.setattr(precompile, "gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    monkeypatch.setattr(ahead, "_started", threading.Event())
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(LLAMA, model / "config.json")
    return str(model)


def test_the_plan_ahead_names_the_modules_the_release_plan_builds_for_the_model(h100, monkeypatch):
    modules, arch = ahead.modules_ahead(ahead.Request(h100, max_model_len=4096), Settings("vllm-0.25-plugin"))
    assert [m.name for m in modules] == ["fp8_blockscale_gemm_90", "sampling"] and arch == "9.0"
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "0")          # vLLM samples with Triton: no sampling module
    modules, _ = ahead.modules_ahead(ahead.Request(h100, max_model_len=4096), Settings("vllm-0.25-plugin"))
    assert [m.name for m in modules] == ["fp8_blockscale_gemm_90"]
    modules, _ = ahead.modules_ahead(ahead.Request(h100), Settings("vllm-0.25"))  # the plain mirror builds none
    assert modules == []


def test_it_starts_once_from_a_thread_and_says_so_in_one_line(h100, caplog, monkeypatch):
    launched = []
    args = types.SimpleNamespace(model=h100, revision=None, tensor_parallel_size=1, max_model_len=4096)
    monkeypatch.setattr(ahead, "prebuilt_cache_installed", lambda: True)
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        thread = ahead.start(args, Settings("vllm-0.25-plugin", timeout_s=120),
                             launch=lambda gens, arch, t: launched.append((gens, arch, t)) or 4242)
        thread.join(30)
        assert ahead.start(args, Settings("vllm-0.25-plugin")) is None  # once per process
    assert launched == [(["flashinfer.jit.gemm:gen_fp8_blockscale_gemm_sm90_module",
                          "flashinfer.jit.sampling:gen_sampling_module"], "9.0", 120)]
    assert [r.getMessage() for r in caplog.records] == [
        "warmup-planner: building FlashInfer's modules fp8_blockscale_gemm_90, sampling ahead of vLLM's engine, "
        "in process 4242 (plan vllm-0.25-plugin for the model's config.json)"]


def test_modules_a_bundle_holds_are_not_built_ahead(h100, caplog, monkeypatch, tmp_path):
    """WARMUP_BUNDLE's modules land in FlashInfer's AOT directory at load_model: building them
    ahead would be nvcc for nothing, and its library a 'compiled again' after ready."""
    from executor.bundle import archive

    manifest = archive.Manifest(archive.FORMAT, "", "", "", {}, [archive.FileRecord(
        "flashinfer_jit/fp8_blockscale_gemm_90/fp8_blockscale_gemm_90.so", "0" * 64, 1)], [], {}, origin=archive.VLLM)
    monkeypatch.setattr(archive, "read_manifest", lambda path: manifest)
    monkeypatch.setattr(ahead, "prebuilt_cache_installed", lambda: True)
    launched = []
    args = types.SimpleNamespace(model=h100, revision=None, tensor_parallel_size=1, max_model_len=4096)
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        ahead.start(args, Settings("vllm-0.25-plugin", bundle=str(tmp_path / "b.warmup")),
                    launch=lambda gens, arch, t: launched.append(gens) or 1).join(30)
    assert launched == [["flashinfer.jit.sampling:gen_sampling_module"]]
    assert caplog.records[0].getMessage() == ("warmup-planner: FlashInfer's modules fp8_blockscale_gemm_90 are not "
                                              "built ahead: WARMUP_BUNDLE holds them")
    assert ahead.bundled_modules(None) == set()


def test_a_bundle_named_by_its_directory_or_a_registry_is_read_through_its_local_file(h100, caplog, monkeypatch,
                                                                                     tmp_path):
    """WARMUP_BUNDLE as a directory (an image volume) or an oci:// reference: the modules its local file
    holds are not built ahead either (on the H200, part AD, the oci:// start built both for nothing)."""
    from executor.bundle import archive
    from planner.errors import PlanError
    from vllm_bridge.bundles import source as bundle_source

    manifest = archive.Manifest(archive.FORMAT, "", "", "", {}, [archive.FileRecord(
        "flashinfer_jit/sampling/sampling.so", "0" * 64, 1)], [], {}, origin=archive.VLLM)

    def read_manifest(path):  # as the real one: a directory or a reference is no readable bundle
        if not os.path.isfile(path):
            raise PlanError("not a readable warmup bundle", file=path)
        return manifest

    monkeypatch.setattr(archive, "read_manifest", read_manifest)
    monkeypatch.setattr(ahead, "prebuilt_cache_installed", lambda: True)
    monkeypatch.setattr(bundle_source, "_STARTED", {})
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "b.warmup").write_text("a bundle (its manifest stood in for)")
    launched = []
    args = types.SimpleNamespace(model=h100, revision=None, tensor_parallel_size=1, max_model_len=4096)
    ahead.start(args, Settings("vllm-0.25-plugin", bundle=str(volume)),
                launch=lambda gens, arch, t: launched.append(gens) or 1).join(30)
    assert launched == [["flashinfer.jit.gemm:gen_fp8_blockscale_gemm_sm90_module"]]
    pulled = bundle_source.Source("oci://r.example/w@sha256:" + "a" * 64, str(volume / "b.warmup"))
    monkeypatch.setattr(bundle_source, "for_process", lambda value, timeout_s: pulled)
    monkeypatch.setattr(ahead, "_started", threading.Event())
    launched.clear()
    ahead.start(args, Settings("vllm-0.25-plugin", bundle=pulled.value),
                launch=lambda gens, arch, t: launched.append(gens) or 1).join(30)
    assert launched == [["flashinfer.jit.gemm:gen_fp8_blockscale_gemm_sm90_module"]]


def test_no_config_on_disk_starts_nothing_in_one_line(h100, caplog, tmp_path):
    args = types.SimpleNamespace(model=str(tmp_path / "empty"), revision=None, tensor_parallel_size=1,
                                 max_model_len=None)
    (tmp_path / "empty").mkdir()
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        ahead.start(args, Settings("vllm-0.25-plugin"), launch=lambda *a: pytest.fail("nothing to build")).join(30)
    assert [r.getMessage() for r in caplog.records] == [
        "warmup-planner: FlashInfer's modules are not built ahead (no config.json on disk yet); the pool builds them"]


def test_vllms_create_engine_config_starts_it_then_runs_as_it_was(h100, monkeypatch):
    calls = []

    class EngineArgs:
        model = h100

        def create_engine_config(self, usage_context=None):
            calls.append(("vLLM", usage_context))
            return "VllmConfig"

    arg_utils = types.ModuleType("vllm.engine.arg_utils")
    arg_utils.EngineArgs = EngineArgs
    for name, module in (("vllm", types.ModuleType("vllm")), ("vllm.engine", types.ModuleType("vllm.engine")),
                         ("vllm.engine.arg_utils", arg_utils)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(ahead.importlib.util, "find_spec", lambda name: object())  # FlashInfer "installed"
    monkeypatch.setattr(ahead, "start", lambda args, settings: calls.append(("ahead", args.model)))
    assert ahead.watch_engine_args(Settings("p")) and ahead.watch_engine_args(Settings("p"))  # wrapped once
    assert EngineArgs().create_engine_config("serve") == "VllmConfig"
    assert calls == [("ahead", h100), ("vLLM", "serve")]


FAKE_JIT = '''
import os, subprocess, time

class Spec:
    def __init__(self, name):
        self.name = name
    @property
    def is_aot(self):
        return self.name == "prebuilt"
    def get_library_path(self):
        return os.path.join(os.environ["FAKE_LOG"] + "-lib", self.name + ".so")
    def build(self, verbose, need_lock=True):
        log = os.environ["FAKE_LOG"]
        open(os.path.join(log, "build-" + self.name + "-" + os.environ.get("FLASHINFER_CUDA_ARCH_LIST", "")), "w").close()
        with open(log + "-nice", "w") as f:   # the builder's niceness, which its nvcc inherits
            f.write(str(os.nice(0)))
        os.makedirs(log + "-lib", exist_ok=True)
        if not os.path.exists(self.get_library_path()):   # as ninja: an up-to-date library is left alone
            open(self.get_library_path(), "w").close()
        if self.name == "slow":
            child = subprocess.Popen(["sleep", "300"])
            open(os.path.join(log, "child-%d" % child.pid), "w").close()
            time.sleep(300)
    def build_and_load(self):
        raise AssertionError("the builder never loads a module")

def gen_sampling_module():
    return Spec("sampling")

def gen_prebuilt_module():
    return Spec("prebuilt")

def gen_slow_module():
    return Spec("slow")
'''


@pytest.fixture
def fake_flashinfer(tmp_path):
    pkg = tmp_path / "pkgs" / "flashinfer" / "jit"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "fake.py").write_text(FAKE_JIT)
    log = tmp_path / "log"
    log.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "FLASHINFER_CUDA_ARCH_LIST"}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path / "pkgs"), ROOT]), FAKE_LOG=str(log))
    return env, log


def builder(env, *generators, timeout="30"):
    command = precompile.build_ahead_command([f"flashinfer.jit.fake:{g}" for g in generators], "9.0", timeout)
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)


def test_the_builder_builds_without_loading_and_skips_prebuilt_modules(fake_flashinfer):
    env, log = fake_flashinfer
    proc = builder(env, "gen_sampling_module", "gen_prebuilt_module")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert sorted(os.listdir(log)) == ["build-sampling-9.0"]        # FlashInfer told the target: no CUDA asked
    lines = sorted(err.strip().splitlines())
    assert len(lines) == 2 and lines[0].startswith("warmup-planner: FlashInfer module gen_prebuilt_module prebuilt")
    assert lines[1].startswith("warmup-planner: FlashInfer module gen_sampling_module built ahead in ")
    _, err = builder(env, "gen_sampling_module").communicate(timeout=60)  # the next start: nothing to do
    assert err.startswith("warmup-planner: FlashInfer module gen_sampling_module up to date (nothing built) in ")


def test_the_builder_yields_the_cores_to_vllms_own_processes(fake_flashinfer):
    env, log = fake_flashinfer
    _, err = builder(env, "gen_sampling_module").communicate(timeout=60)
    assert "built ahead" in err
    assert int((log.parent / "log-nice").read_text()) > os.nice(0)   # nvcc, started by the build, inherits it


def test_the_builder_ends_what_it_started_when_its_time_is_up(fake_flashinfer):
    env, log = fake_flashinfer
    began = time.monotonic()
    proc = builder(env, "gen_slow_module", timeout="2")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and time.monotonic() - began < 30
    assert err.strip().splitlines()[-1] == "warmup-planner: FlashInfer build ahead stopped: not done after 2 s"
    children = [int(n.split("-")[1]) for n in os.listdir(log) if n.startswith("child-")]
    time.sleep(0.3)
    assert children and all(_gone(pid) for pid in children)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"     # a zombie waiting for init: ended
    except OSError:
        return True


def test_the_builder_ends_with_the_process_that_started_it(fake_flashinfer, tmp_path):
    env, log = fake_flashinfer
    script = ("import subprocess, time\n"
              "from executor.precompile import build_ahead_command\n"
              "p = subprocess.Popen(build_ahead_command(['flashinfer.jit.fake:gen_slow_module'], '9.0', '60'))\n"
              "print(p.pid, flush=True)\n"
              "time.sleep(3)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    parent.wait(30)                                                # the parent ends after 3 s
    deadline = time.monotonic() + 20
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _gone(pid)
    children = [int(n.split("-")[1]) for n in os.listdir(log) if n.startswith("child-")]
    time.sleep(0.3)
    assert children and all(_gone(c) for c in children)


SLOW_IMPORT = '''
import os, time
LOG = os.environ["FAKE_LOG"]
began = time.time()
time.sleep(0.5)
open(os.path.join(LOG, "import-%s-%.3f-%.3f" % (__name__.rsplit(".", 1)[1], began, time.time())), "w").close()
from flashinfer.jit.fake import Spec

def gen():
    return Spec(__name__.rsplit(".", 1)[1])
'''


def test_the_builder_imports_flashinfers_modules_one_after_the_other(fake_flashinfer, tmp_path):
    # two threads importing two of FlashInfer's submodules at once deadlocked on the H100
    env, log = fake_flashinfer
    for name in ("one", "two"):
        (tmp_path / "pkgs" / "flashinfer" / "jit" / f"{name}.py").write_text(SLOW_IMPORT)
    command = precompile.build_ahead_command(["flashinfer.jit.one:gen", "flashinfer.jit.two:gen"], "9.0", "30")
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err.count("built ahead") == 2, err
    spans = sorted(tuple(map(float, n.split("-")[2:])) for n in os.listdir(log) if n.startswith("import-"))
    assert len(spans) == 2 and spans[0][1] <= spans[1][0]           # the second began after the first ended
    assert sorted(n for n in os.listdir(log) if n.startswith("build-")) == ["build-one-9.0", "build-two-9.0"]


def test_the_build_ahead_process_is_one_span_of_the_api_servers_timeline(monkeypatch, tmp_path):
    """Issue 54 item 1: a cold start's longest pole (FlashInfer's modules, part AK) is a process of the plugin's own;
    its life, start to end, is a background span of the timeline of the process that started it."""
    from vllm_bridge import timeline

    monkeypatch.setattr(precompile, "build_ahead_command",
                        lambda generators, arch, timeout: [sys.executable, "-c", "import time; time.sleep(0.3)"])
    monkeypatch.delenv(timeline.START, raising=False)
    timeline.reset()
    try:
        recorder = timeline.begin(Settings("vllm-0.25-plugin", timeline=str(tmp_path)), environ=dict(os.environ))
        pid = ahead.build_ahead(["flashinfer.jit.sampling:gen_sampling_module"], "9.0", 60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not [m for m in recorder.marks if m["phase"] == ahead.BUILT_AHEAD]:
            time.sleep(0.05)
        [built] = [m for m in recorder.marks if m["phase"] == ahead.BUILT_AHEAD]
    finally:
        timeline.reset()
    assert built["background"] and built["owner"] == timeline.PLUGIN and built["pid"] == pid
    assert built["returncode"] == 0 and built["modules"] == ["gen_sampling_module"]
    assert built["end"] - built["start"] >= 0.3
