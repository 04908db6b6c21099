"""Issue 45 item 2: the plugin's start-up bundle (WARMUP_BUNDLE_OUT) is written after vLLM is
ready, off its critical path: the caches are listed when compile_or_warm_up_model returns and a
daemon thread packs them, each file as it was listed; a failure is one line; the process's exit
waits for the bundle (bounded), and a bundle stopped at exit leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from executor.bundle import archive, environment, startup
from vllm_bridge.bundles import writer as bundle_writer
from test_startup_bundle import environ, fill_startup, plugin_worker, vllm_fp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def start_up(monkeypatch):
    """One vLLM start-up with WARMUP_BUNDLE_OUT through the plugin's wrappers; returns what
    compile_or_warm_up_model returned, the bundle's writer still running."""
    from vllm_bridge import plugin as plugin_module
    from vllm_bridge.releases import RELEASES
    from vllm_bridge.settings import Settings

    monkeypatch.setattr(environment, "current", lambda: vllm_fp(vllm_config_hash=None))
    for key in ("TRITON_CACHE_DIR", "DG_JIT_CACHE_DIR", "XDG_CACHE_HOME", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)

    def start(base, out, compile_or_warm_up):
        for key, value in environ(base).items():
            monkeypatch.setenv(key, value)
        release, settings, worker = RELEASES["0.25.0"], Settings(None, bundle_out=str(out)), plugin_worker()
        plugin_module._load_model(lambda self: "loaded", release, settings)(worker)
        return plugin_module._compile_or_warm_up_model(compile_or_warm_up, release, settings)(worker)
    yield start
    bundle_writer.finish_at_exit(30)


@pytest.fixture
def held(monkeypatch):
    """The writer's thread held before it hashes anything, until `go` is set."""
    go, holding = threading.Event(), []

    def write_listed(out, listed, cancelled=None, real=startup.write_listed):
        holding.append(threading.current_thread())
        assert go.wait(30)
        return real(out, listed, cancelled)
    monkeypatch.setattr(startup, "write_listed", write_listed)
    return go, holding


def bundle_logs(caplog):
    return [r for r in caplog.records if r.name == "vllm.warmup_planner"]


def test_the_bundle_is_written_after_the_warmup_returns_not_inside_it(start_up, held, tmp_path, caplog):

    go, holding = held
    out = tmp_path / "s.warmup"

    def compile_or_warm_up(self):
        fill_startup(tmp_path / "b")
        return "ready"
    with caplog.at_level("INFO", logger="vllm.warmup_planner"):
        assert start_up(tmp_path / "b", out, compile_or_warm_up) == "ready"  # returned: vLLM reports ready
        assert not out.exists() and len(holding) == 1  # the bundle is still to be written, in its own thread
        assert holding[0] is not threading.current_thread() and holding[0].daemon
        assert bundle_logs(caplog) == []
        go.set()
        bundle_writer.finish_at_exit(30)
    assert not holding[0].is_alive()
    manifest = archive.read_manifest(str(out))
    archive.verify_members(str(out), manifest)  # complete: every listed member, its size and sha256
    assert {f.path.split("/")[0] for f in manifest.files} == {"deep_gemm", "triton", "torch_compile", "inductor",
                                                              "flashinfer_autotune", "vllm_modelinfo"}
    [line] = [r.getMessage() for r in bundle_logs(caplog)]
    assert line.startswith(f"warmup-planner: bundle {out} written ") and " after ready, in " in line
    assert "listed at ready in " in line and "deep_gemm 4 files" in line


def test_the_bundle_holds_what_a_build_at_ready_holds(start_up, tmp_path):
    """Identical in content to the bundle the plugin wrote before ready (startup.build, at once)."""
    out, before = tmp_path / "after.warmup", tmp_path / "before.warmup"
    seen = {}

    def compile_or_warm_up(self):
        from vllm_bridge.bundles import startup as bridge

        fill_startup(tmp_path / "b")
        seen["manifest"] = startup.build(str(before), bridge.roots_now(), vllm_fp(), startup.Origin())
        return "ready"
    start_up(tmp_path / "b", out, compile_or_warm_up)

    bundle_writer.finish_at_exit(30)
    after = archive.read_manifest(str(out))
    assert after.files == seen["manifest"].files and after.deep_gemm == seen["manifest"].deep_gemm
    assert after.roots == seen["manifest"].roots and after.fingerprint == seen["manifest"].fingerprint


def test_a_file_compiled_after_ready_is_not_packed(start_up, held, tmp_path):
    """A compile on the first request (vLLM serving while the bundle is written) is no part of it."""

    go, _ = held
    out, base = tmp_path / "s.warmup", tmp_path / "b"
    start_up(base, out, lambda self: fill_startup(base) and "ready")
    late = base / "home" / ".triton" / "cache" / "LATEHASH" / "late_kernel.json"
    late.parent.mkdir(parents=True)
    late.write_text("{}")  # after ready, before the writer lists nothing more: it listed at ready
    go.set()
    bundle_writer.finish_at_exit(30)
    names = [f.path for f in archive.read_manifest(str(out)).files]
    assert names and not any("LATEHASH" in n for n in names)


def test_a_file_rewritten_after_ready_writes_no_bundle_and_says_so_in_one_line(start_up, held, tmp_path, caplog):

    go, _ = held
    out, base = tmp_path / "s.warmup", tmp_path / "b"
    with caplog.at_level("INFO", logger="vllm.warmup_planner"):
        start_up(base, out, lambda self: fill_startup(base) and "ready")
        model = base / "vllm" / "torch_compile_cache" / "torch_aot_compile" / ("a0" * 32) / "rank_0_0" / "model"
        model.write_text("aot artifact, written again at the first request")  # in place: same inode
        go.set()
        bundle_writer.finish_at_exit(30)
    [record] = bundle_logs(caplog)
    assert record.levelname == "WARNING" and "\n" not in record.getMessage()
    assert record.getMessage().startswith(f"warmup-planner: no bundle written: {model}: changed size (12 -> ")
    assert sorted(os.listdir(tmp_path)) == ["b"]  # no bundle, no temporary file


def test_a_file_changed_while_packed_writes_nothing(tmp_path):
    """Between the hash and the tar (executor/bundle/archive.py checks each member as it writes it)."""
    roots = fill_startup(tmp_path / "b")
    out = tmp_path / "s.warmup"
    listed = startup.listing(str(out), roots, vllm_fp(), startup.Origin())
    manifest = __import__("executor.bundle.packing", fromlist=["x"]).hashed(listed)
    member = next(f for f in manifest.files if f.size)
    with open(listed.sources[member.path], "r+b") as f:  # same size, other bytes
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 1]))
    with pytest.raises(archive.PlanError, match="was written after it was hashed"):
        archive.write_bundle(str(out), manifest, listed.sources)
    assert sorted(os.listdir(tmp_path)) == ["b"]


def test_empty_caches_are_one_line_at_ready_and_no_thread(start_up, tmp_path, caplog):
    import threading as th

    out = tmp_path / "s.warmup"
    with caplog.at_level("INFO", logger="vllm.warmup_planner"):
        assert start_up(tmp_path / "b", out, lambda self: "ready") == "ready"
    assert not any(t.name == "warmup-planner-bundle" for t in th.enumerate())
    [record] = bundle_logs(caplog)
    assert record.levelname == "WARNING" and "the start-up's caches are empty" in record.getMessage()
    assert not out.exists()


# --- the process's exit --------------------------------------------------------------------------------

SCRIPT = r"""
import json, logging, sys, time
from executor.bundle import archive, startup
from executor.caches.registry import CacheRoots
from vllm_bridge.bundles import startup as bundle, writer as bundle_writer

logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s", stream=sys.stdout)
env, fp, out, slow = json.loads(sys.argv[1])
if slow:  # a bundle whose writing outlasts the wait at exit
    bundle_writer.EXIT_WAIT_S = 0.5
    read = archive._Hashing.read
    archive._Hashing.read = lambda self, size=-1: time.sleep(0.2) or read(self, size)
listed = startup.listing(out, CacheRoots.resolve(env), fp, startup.Origin())
bundle.Writer(out, listed, time.monotonic()).start()
print("ready", flush=True)
"""  # and the script ends: the interpreter exits right after ready


def exits_after_ready(tmp_path, slow: bool):
    base = tmp_path / "b"
    roots = fill_startup(base)
    env = {**environ(base), "TORCHINDUCTOR_CACHE_DIR": roots["inductor"]}
    out = tmp_path / "out" / "s.warmup"
    out.parent.mkdir()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([env, vllm_fp(), str(out), slow])],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    return out, done.stdout.splitlines(), time.monotonic() - started


def test_a_process_that_exits_right_after_ready_waits_for_a_complete_bundle(tmp_path):
    out, lines, _ = exits_after_ready(tmp_path, slow=False)
    assert lines[0] == "ready" and len(lines) == 2 and " written " in lines[1]
    manifest = archive.read_manifest(str(out))
    archive.verify_members(str(out), manifest)
    assert os.listdir(out.parent) == ["s.warmup"]


def test_a_bundle_outlasting_the_wait_at_exit_is_stopped_leaving_nothing(tmp_path):
    out, lines, took = exits_after_ready(tmp_path, slow=True)
    assert took < 20  # 0.5 s of wait, a block of 0.2 s to stop, and the interpreter's start
    assert lines[0] == "ready" and len(lines) == 2
    assert lines[1].startswith("vllm.warmup_planner WARNING warmup-planner: no bundle written: the process exited ")
    assert os.listdir(out.parent) == []  # no bundle, no temporary file
