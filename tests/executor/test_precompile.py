"""`warmup execute --jobs N` on CPU: jobs per distinct compile key, the manifest that lets a warm
run skip the pool, worker failures reported per job, the report and summary fields, and two
processes writing one cache directory through the same atomic writes.

The pool tests run real `spawn` workers with a fake backend defined here (workers import this
module by name), so no GPU is needed; tests/executor/test_precompile_gpu.py runs the real
kernels on a GPU.
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from execlib import HERE, ROOT, run_cli

from executor import precompile as pc
from executor import registry
from executor.backends.base import BaseBackend
from executor.precompile.jobs.from_plan import step_content_key
from executor.precompile.jobs.job import JobResult
from executor.precompile.pool.deep_gemm_counts import attribute_deep_gemm
from executor.progress import Progress
from executor.records import StepRecord
from executor.report import Report, render_precompile
from planner.plan import steps as st
from planner.plan.expanded import ExpandedPlan

FAKE = ("test_precompile", "FakeBackend")


# --- a backend that "compiles" by writing files, in the main process or a worker ---------------------

def _in_worker() -> bool:
    return multiprocessing.parent_process() is not None


INSTRUCTIONS = "instructions.json"  # in $WARMUP_FAKE_LOG_DIR: step id -> what the fake does in workers


def _instructions(step_id: str) -> dict:
    log = os.environ.get("WARMUP_FAKE_LOG_DIR")
    try:
        with open(os.path.join(log, INSTRUCTIONS)) as f:
            return json.load(f).get(step_id, {})
    except (OSError, TypeError):
        return {}


class FakeBackend(BaseBackend):
    """Records each value it runs as a file in $WARMUP_FAKE_LOG_DIR (WARMUP_*: workers take it from the main process): worker-<pid>-<step>-<value> or main-...

    A step may ask (INSTRUCTIONS) for a failure in workers only (`fail_in_worker`: values), or
    for the worker to die (`crash_in_worker`) or sleep (`sleep_in_worker`)."""

    name = "fake"
    families = ("gemm", "grouped_gemm", "attention")

    def _run(self, step, values, tick):
        log = os.environ.get("WARMUP_FAKE_LOG_DIR")
        worker = _in_worker()
        asks = _instructions(step.id) if worker else {}
        for value in values:
            flat = value[0] if isinstance(value, list) else value
            if asks.get("sleep_in_worker"):
                open(os.path.join(log, f"started-{os.getpid()}"), "w").close()
                time.sleep(asks["sleep_in_worker"])
            if flat in (asks.get("crash_in_worker") or []):
                os._exit(3)
            if flat in (asks.get("fail_in_worker") or []):
                raise RuntimeError(f"fake compile error at {flat}")
            if log:
                who = f"worker-{os.getpid()}" if worker else "main"
                name = f"{who}-{step.id.replace('/', '_')}-{flat}"
                with open(os.path.join(log, name), "w") as f:
                    f.write(json.dumps(step.compile_keys))
        tick(len(values))
        return len(values)

    gemm = grouped_gemm = _run

    def attention(self, step, batches, tick):
        return self._run(step, batches, tick)


def gemm(name, m_values, keys=None, backend="fake", stage="s", firsts=None, **asks):
    """A gemm step; `keys` pair with `firsts` (default: the M-values, an exact step). `asks`:
    what the fake backend does in a worker for this step (written to INSTRUCTIONS)."""
    variants = ()
    if keys is not None:
        variants = tuple(st.Variant(k, m) for k, m in zip(keys, firsts or m_values))
    step = st.Gemm(f"{stage}/{name}", stage, kernel="fp8_gemm", backend=backend, n=256, k=128,
                   block_size=(128, 128), m_values=tuple(m_values), variants=variants,
                   exact=bool(variants) and firsts is None)
    if asks:
        path = os.path.join(os.environ["WARMUP_FAKE_LOG_DIR"], INSTRUCTIONS)
        known = json.load(open(path)) if os.path.exists(path) else {}
        with open(path, "w") as f:
            json.dump({**known, step.id: asks}, f)
    return step


def plan(*steps):
    return ExpandedPlan(plan="p", engine="e", planner_version="0", digest="", inputs={}, steps=tuple(steps))


@pytest.fixture
def fake_env(tmp_path, monkeypatch):
    """The fake backend registered, a private Triton cache directory and a log directory."""
    monkeypatch.setitem(registry.BACKENDS, "fake", FAKE)
    cache, log = tmp_path / "triton-cache", tmp_path / "log"
    cache.mkdir()
    log.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.setenv("WARMUP_FAKE_LOG_DIR", str(log))
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    return {"cache": cache, "log": log, "manifest": cache / pc.MANIFEST_NAME}


def options(**kw):
    from executor.run import Options

    base = dict(jobs=2, precompile_backends=("fake",), device="cpu", runner="none", jit_monitor="off")
    return Options(**{**base, **kw})


def run_report(expanded, **kw) -> Report:
    from executor.run import execute

    return execute(expanded, None, options(**kw))


def run(expanded, **kw) -> dict:
    return run_report(expanded, **kw).to_dict()


def logged(log) -> tuple[list[str], list[str]]:
    names = sorted(os.listdir(log))
    return [n for n in names if n.startswith("worker-")], [n for n in names if n.startswith("main-")]


# --- jobs ----------------------------------------------------------------------------------------------

def test_one_job_per_distinct_key_across_steps_at_its_first_value():
    steps = [gemm("a", [1, 16, 17], ["k1", "k2", "k3"]),
             gemm("b", [2, 32, 64], ["k1", "k2", "k4"]),   # k1, k2 already warmed by a
             gemm("c", [5, 6], ["k4", "k5"], backend="torch")]  # not a precompile backend
    jobs = pc.compile_jobs(steps, backends=("fake",))
    assert [(j.key, j.step_id, j.values) for j in jobs] == [
        ("k1", "s/a", [1]), ("k2", "s/a", [16]), ("k3", "s/a", [17]), ("k4", "s/b", [64])]
    # The worker runs the step reduced to its one value and key (the backend checks the pair).
    assert jobs[3].step.m_values == (64,) and jobs[3].step.compile_keys == ["k4"]
    assert jobs[3].step.n == 256 and not jobs[3].whole_step
    # Keys already in the disk cache (the manifest) get no job.
    assert [j.key for j in pc.compile_jobs(steps, backends=("fake",), have={("fake", "k2"), ("fake", "k4")})] == [
        "k1", "k3"]


def test_keys_are_per_backend_and_follow_the_chosen_backend():
    steps = [gemm("a", [1], ["k"]), gemm("b", [1], ["k"], backend="other")]
    jobs = pc.compile_jobs(steps, backends=("fake", "other"))
    assert [(j.backend, j.key) for j in jobs] == [("fake", "k"), ("other", "k")]
    # --backend gemm=torch: the keys describe the planned backend's variants, so no job.
    assert pc.compile_jobs(steps, backend_of=lambda step: "torch", backends=("fake", "other")) == []


def test_steps_that_pair_no_key_are_whole_step_jobs():
    legacy = gemm("legacy", [1, 2, 3])                          # a kernel no dispatch model covers
    again = gemm("again", [1, 2, 3], stage="t")                 # the same content: nothing new
    jobs = pc.compile_jobs([legacy, again], backends=("fake",))
    assert [(j.step_id, j.whole_step, j.values) for j in jobs] == [("s/legacy", True, [1, 2, 3])]
    assert jobs[0].key == step_content_key(legacy) and jobs[0].key.startswith("step:gemm:")
    # The content key ignores the id and stage (stable across plans), not the values.
    assert step_content_key(legacy.replace(id="x/y", stage="x")) == step_content_key(legacy)
    assert step_content_key(legacy.replace(m_values=(1, 2))) != step_content_key(legacy)


def test_full_and_relax_steps_get_one_job_per_key_at_its_first_m():
    """Outside exact mode a step pairs each key with its first M: one job per key there, not the
    whole step in one worker (DeepSeek-V3's relax stage: 9 jobs -> 141)."""
    full = gemm("full", [1, 2, 3, 4, 5], ["k1", "k2"], firsts=[1, 4])
    jobs = pc.compile_jobs([full], backends=("fake",))
    assert [(j.key, j.step_id, j.values, j.whole_step) for j in jobs] == [
        ("k1", "s/full", [1], False), ("k2", "s/full", [4], False)]
    assert jobs[1].step.m_values == (4,) and jobs[1].step.compile_keys == ["k2"] and jobs[1].step.exact


def test_attention_jobs_and_the_release_after_autotune():
    att = st.Attention("a/att", "a", kernel="context_attention_fwd", backend="triton", num_heads=2, num_kv_heads=1,
                       head_size=64, scale=0.125, logits_soft_cap=0.0, sliding_window=(-1, -1), dtype="bfloat16",
                       num_tokens=7, variants=(st.Variant("att-key", 7),), exact=True)
    tune = st.Autotune("t/tune", "t", library="triton", num_tokens=1, buckets=(1,), shapes=())
    decode = st.Decode("d/decode", "d", requests=(), total_num_scheduled_tokens=0)
    steps = [gemm("a", [1], ["k1"], backend="triton"), tune, gemm("b", [1, 2], ["k2", "k3"], backend="triton"),
             att, decode]
    jobs = pc.compile_jobs(steps)
    assert [(j.key, j.release) for j in jobs] == [("k1", -1), ("k2", 1), ("k3", 1), ("att-key", 1)]
    assert jobs[3].values == [[7]] and jobs[3].kind == "attention" and jobs[3].step.num_tokens == 7


def test_default_jobs_is_the_cpu_cores_capped():
    from executor.precompile.jobs.decide import MAX_DEFAULT_JOBS

    assert 1 <= pc.default_jobs() <= MAX_DEFAULT_JOBS


# --- the manifest --------------------------------------------------------------------------------------

def test_manifest_is_merged_written_whole_and_honoured_only_when_it_matches(tmp_path):
    path = str(tmp_path / "cache" / pc.MANIFEST_NAME)
    fp = {"triton": "3.6.0", "sources": "sha256:a"}
    assert pc.read_manifest(path, fp) == {}
    assert pc.update_manifest(path, {"triton": {"k1", "k2"}}, fp) == 2
    assert pc.update_manifest(path, {"triton": {"k3"}, "deep_gemm": set()}, fp) == 3
    assert pc.read_manifest(path, fp) == {"triton": {"k1", "k2", "k3"}}
    assert [f for f in os.listdir(tmp_path / "cache") if f != pc.MANIFEST_NAME] == []  # no temp file left
    # Another triton, or changed kernel sources: the keys say nothing about this cache.
    assert pc.read_manifest(path, {**fp, "sources": "sha256:b"}) == {}
    assert pc.update_manifest(path, {"triton": {"k9"}}, {**fp, "sources": "sha256:b"}) == 1
    assert pc.read_manifest(path, {**fp, "sources": "sha256:b"}) == {"triton": {"k9"}}
    # Unreadable or foreign: ignored, never an error.
    with open(path, "w") as f:
        f.write('{"format": "warmup-precompiled/v1", "keys": ')
    assert pc.read_manifest(path, fp) == {}


def test_manifest_lives_in_the_triton_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    monkeypatch.delenv("TRITON_REMOTE_CACHE_BACKEND", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert pc.manifest_path() == str(tmp_path / pc.MANIFEST_NAME)
    monkeypatch.delenv("TRITON_CACHE_DIR")
    monkeypatch.setenv("TRITON_HOME", str(tmp_path / "home"))
    assert pc.manifest_path() == str(tmp_path / "home" / ".triton" / "cache" / pc.MANIFEST_NAME)
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "my.module:Manager")  # no known directory: no manifest
    assert pc.manifest_path() is None


def test_fingerprint_names_versions_sources_and_settings(monkeypatch):
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    fp = pc.fingerprint()
    assert set(fp) == {"triton", "torch", "deep_gemm", "sources", "gpus", "env"}
    assert fp["sources"].startswith("sha256:") and fp["env"]["TRITON_DEFAULT_FP_FUSION"] == "0"
    assert "TRITON_CACHE_DIR" not in fp["env"]


# --- the pool, end to end (spawn workers, fake backend) ------------------------------------------------

def test_workers_compile_every_key_once_then_a_warm_run_skips_the_pool(fake_env):
    expanded = plan(gemm("a", [1, 16, 17], ["k1", "k2", "k3"]), gemm("b", [2, 32], ["k1", "k4"]),
                    gemm("c", [5], ["k5"], stage="t"))
    rep = run(expanded)
    assert rep["status"] == "ok", rep
    pre = rep["precompile"]
    assert pre["status"] == "ran" and pre["jobs"] == 5 and pre["workers"] == 2 and pre["ok"] == 5
    assert pre["keys_planned"] == 5 and pre["keys_in_manifest"] == 0 and pre["manifest_keys_written"] == 5
    assert sorted(r["key"] for r in pre["records"]) == ["k1", "k2", "k3", "k4", "k5"]
    assert pre["speedup"] is not None and pre["busy_s"] >= 0 and pre["wall_s"] > 0
    workers, main = logged(fake_env["log"])
    # Each key once in a worker, at the first value that reaches it; then every planned call in main.
    assert sorted(w.split("-", 2)[2] for w in workers) == ["s_a-1", "s_a-16", "s_a-17", "s_b-32", "t_c-5"]
    assert len({w.split("-")[1] for w in workers}) <= 2
    assert sorted(main) == ["main-s_a-1", "main-s_a-16", "main-s_a-17", "main-s_b-2", "main-s_b-32", "main-t_c-5"]
    steps = {s["id"]: s for s in rep["steps"]}
    assert steps["s/a"]["precompile"]["jobs"] == 3 and steps["s/b"]["precompile"]["jobs"] == 1
    assert steps["s/a"]["precompile"]["keys"] == 3 and steps["s/a"]["precompile"]["failed"] == 0
    manifest = json.loads(fake_env["manifest"].read_text())
    assert manifest["keys"] == {"fake": ["k1", "k2", "k3", "k4", "k5"]}

    for name in os.listdir(fake_env["log"]):
        os.unlink(fake_env["log"] / name)
    rep = run(expanded)
    pre = rep["precompile"]
    assert pre["status"] == "skipped" and pre["jobs"] == 0 and "all 5 compile keys" in pre["reason"]
    workers, main = logged(fake_env["log"])
    assert workers == [] and len(main) == 6  # no pool: only the main process's calls


def test_a_new_key_runs_only_its_job(fake_env):
    run(plan(gemm("a", [1, 2], ["k1", "k2"])))
    rep = run(plan(gemm("a", [1, 2, 3], ["k1", "k2", "k3"])))
    pre = rep["precompile"]
    assert pre["status"] == "ran" and pre["jobs"] == 1 and pre["keys_in_manifest"] == 2 and pre["workers"] == 1
    assert [r["key"] for r in pre["records"]] == ["k3"]


def test_worker_failures_are_reported_per_job_and_the_main_process_runs_the_step(fake_env):
    expanded = plan(gemm("a", [1, 2, 3], ["k1", "k2", "k3"], fail_in_worker=[2]))
    report = run_report(expanded)
    rep = report.to_dict()
    assert rep["status"] == "ok" and rep["steps"][0]["status"] == "ok" and rep["steps"][0]["kernel_calls"] == 3
    pre = rep["precompile"]
    assert (pre["ok"], pre["failed"]) == (2, 1)
    bad = [r for r in pre["records"] if r["status"] == "failed"]
    assert bad[0]["key"] == "k2" and "fake compile error at 2" in bad[0]["error"] and bad[0]["step"] == "s/a"
    assert rep["steps"][0]["precompile"]["failed"] == 1
    assert "precompile failed: s/a k2: RuntimeError: fake compile error at 2" in report.render_summary()
    # The main process ran the step: its keys are in the disk cache now, k2 included.
    assert json.loads(fake_env["manifest"].read_text())["keys"]["fake"] == ["k1", "k2", "k3"]


def test_a_crashed_worker_fails_its_jobs_not_the_run(fake_env):
    rep = run(plan(gemm("a", [1, 2, 3, 4], ["k1", "k2", "k3", "k4"], crash_in_worker=[2])))
    assert rep["status"] == "ok" and rep["steps"][0]["kernel_calls"] == 4
    pre = rep["precompile"]
    assert pre["failed"] >= 1 and pre["ok"] + pre["failed"] + pre["cancelled"] == 4
    assert any("BrokenProcessPool" in (r["error"] or "") for r in pre["records"])


def test_on_error_stop_cancels_the_jobs_still_queued(fake_env):
    from executor.run import execute

    expanded = plan(gemm("a", [1], ["k1"]),  # b's jobs are still running or queued when a fails
                    gemm("b", list(range(1, 41)), [f"b{i}" for i in range(1, 41)], sleep_in_worker=30))
    rep = execute(expanded, None, options(inject={"s/a": "error"})).to_dict()
    assert rep["status"] == "failed" and rep["steps"][1]["status"] == "skipped"
    pre = rep["precompile"]
    assert pre["status"] == "cancelled" and "s/a failed" in pre["reason"]
    assert pre["ok"] + pre["failed"] + pre["cancelled"] == 41 and pre["cancelled"] >= 1


# The child sets its own Ctrl-C disposition: Python installs KeyboardInterrupt only where SIGINT is not
# ignored at start, and a shell starts a background job (pytest ... &, nohup) with SIGINT ignored, which
# the child would inherit and then sleep through the test's SIGINT (issue 37: a newcomer's run hung on it).
INTERRUPTED_RUN = """
import json, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from executor import registry
registry.BACKENDS["fake"] = ("test_precompile", "FakeBackend")
import test_precompile as t
from executor.report import Report
from executor.run import execute
expanded = t.plan(t.gemm("a", [1, 2, 3], ["k1", "k2", "k3"], sleep_in_worker=120))
report = Report(expanded)
execute(expanded, None, t.options(), report=report)
json.dump(report.to_dict(), open(sys.argv[1], "w"))
"""


def _as_a_background_job() -> None:
    """The child starts as under `pytest ... &` or nohup, whatever this pytest was started as."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_ctrl_c_while_waiting_for_the_workers_ends_them_and_reports(fake_env, tmp_path):
    out = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED_RUN, str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=_as_a_background_job)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not any(n.startswith("started-") for n in os.listdir(fake_env["log"])):
            time.sleep(0.05)
        workers = [int(n.split("-")[1]) for n in os.listdir(fake_env["log"]) if n.startswith("started-")]
        assert workers, proc.communicate(timeout=30)[0]
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=60)[0]
    finally:  # a run that missed the signal must not outlive the test with its sleeping workers
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert proc.returncode == 0, output
    rep = json.loads(out.read_text())
    assert rep["interrupted"] is True and rep["precompile"]["status"] == "cancelled"
    assert rep["precompile"]["cancelled"] + rep["precompile"]["failed"] == 3
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers), "a worker outlived the interrupted run"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_jobs_1_compiles_in_the_main_process_and_still_writes_the_manifest(fake_env):
    rep = run(plan(gemm("a", [1, 2], ["k1", "k2"])), jobs=1)
    assert rep["precompile"]["status"] == "off" and "--jobs 1" in rep["precompile"]["reason"]
    assert logged(fake_env["log"])[0] == []
    assert json.loads(fake_env["manifest"].read_text())["keys"] == {"fake": ["k1", "k2"]}
    rep = run(plan(gemm("a", [1, 2], ["k1", "k2"])))
    assert rep["precompile"]["status"] == "skipped"


def test_monitor_counts_come_back_from_the_workers(fake_env):
    rep = run(plan(gemm("a", [1, 2], ["k1", "k2"])), jit_monitor="warn")
    pre = rep["precompile"]
    assert pre["status"] == "ran" and pre["compiled"] == 0 and pre["disk_loads"] == 0  # counted (nothing to count)
    assert all(r["compiled"] == 0 for r in pre["records"])
    stage = rep["stages"][0]
    assert (stage["compiled"], stage["compiled_main"], stage["compiled_pool"]) == (0, 0, 0)


def test_no_pool_on_cpu_for_gpu_backends_and_with_nothing_keyed(fake_env):
    from executor.run import Options, execute

    steps = plan(gemm("a", [1, 2], ["k1", "k2"], backend="triton"))
    rep = execute(steps, None, Options(jobs=4, device="cpu", runner="none", backends={"all": "null"})).to_dict()
    assert rep["precompile"]["status"] == "off" and "device cpu" in rep["precompile"]["reason"]
    rep = execute(plan(st.Decode("d/x", "d", requests=(), total_num_scheduled_tokens=0)), None,
                  Options(jobs=4, device="cpu", runner="none")).to_dict()
    assert rep["precompile"]["status"] == "off" and rep["precompile"]["jobs"] == 0


# --- report, summary table, progress, CLI ------------------------------------------------------------------

def test_stage_summary_adds_the_workers_compiles_and_the_table_shows_them():
    r = Report(plan())
    r.add_step(StepRecord(id="s/a", stage="s", kind="gemm", status="ok", kernel_calls=3, wall_s=0.1,
                          jit={"compiled": 1, "disk_loads": 4},
                          precompile={"keys": 4, "jobs": 3, "compiled": 3, "disk_loads": 0, "failed": 0}))
    r.add_step(StepRecord(id="s/b", stage="s", kind="gemm", status="ok", kernel_calls=2, wall_s=0.1,
                          jit={"compiled": 0, "disk_loads": 2}))
    s = r.stage_summary("s")
    assert (s["compiled"], s["compiled_main"], s["compiled_pool"], s["disk_loads"]) == (4, 1, 3, 6)
    r.precompile = {"status": "ran", "reason": None, "jobs": 3, "workers": 2, "compiled": 3, "disk_loads": 0,
                    "failed": 0, "unavailable": 0, "cancelled": 0, "busy_s": 3.0, "wall_s": 1.6, "speedup": 1.88,
                    "keys_planned": 4, "keys_in_manifest": 1, "records": []}
    table = r.render_summary()
    header = table.splitlines()[0].split()
    assert header[header.index("compiled") + 1] == "pool"
    total = [line for line in table.splitlines() if line.startswith("total")][0].split()
    assert total[header.index("compiled")] == "4" and total[header.index("pool")] == "3"
    assert ("precompile: 3 variants in 2 workers: 3 compiled, 0 loaded; 3.00 s of jobs in 1.60 s wall "
            "(speed-up 1.9x); 1 of 4 keys already cached") in table
    assert "precompile" in r.to_dict()


def test_render_precompile_lines():
    assert render_precompile(None) == ""
    assert render_precompile({"status": "off", "reason": "--jobs 1", "jobs": 0, "keys_planned": 3,
                              "jobs_option": 1}) == ""
    assert render_precompile({"status": "skipped", "reason": "all 3 compile keys are in the disk cache"}) == (
        "precompile: skipped: all 3 compile keys are in the disk cache")
    assert render_precompile({"status": "off", "reason": "device cpu", "jobs": 0, "keys_planned": 3,
                              "jobs_option": 8}) == "precompile: off: device cpu"


def test_progress_prints_one_line_for_the_phase():
    stream = io.StringIO()
    p = Progress(stream, tty=False)
    p.precompile({"status": "ran", "reason": None, "jobs": 1, "workers": 1, "compiled": 1, "disk_loads": 0,
                  "failed": 1, "busy_s": 0.5, "wall_s": 0.5, "speedup": 1.0, "keys_planned": 2,
                  "records": [{"status": "failed", "step": "s/a", "key": "k", "error": "boom"}]})
    assert stream.getvalue().splitlines() == [
        "precompile: 1 variant in 1 worker: 1 compiled, 0 loaded, 1 failed; 0.50 s of jobs in 0.50 s wall "
        "(speed-up 1.0x)"]
    p.stage_end({"stage": "s", "steps": 1, "ok": 1, "failed": 0, "unavailable": 0, "skipped": 0,
                 "kernel_calls": 4, "compiled": 3, "compiled_pool": 3, "disk_loads": 3, "wall_s": 0.2})
    assert stream.getvalue().splitlines()[-1] == (
        "stage s: 1 steps (1 ok), 4 kernel calls, 3 compiled (3 by workers), 3 from disk cache, 0.2 s")


def test_cli_jobs_option(capsys, monkeypatch, tmp_path):
    from execlib import TINY

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    code, _, err = run_cli(["triton", "--engine", TINY, "--dry-run", "--jobs", "-1"], capsys)
    assert code == 2 and "--jobs must be >= 0" in err
    report = tmp_path / "r.json"
    code, out, _ = run_cli(["triton", "--engine", TINY, "--dry-run", "--no-progress", "-j", "3",
                            "--report", str(report)], capsys)
    assert code == 0
    rep = json.loads(report.read_text())
    assert rep["options"]["jobs"] == 3 and rep["precompile"]["status"] == "off"
    code, out, _ = run_cli(["triton", "--engine", TINY, "--dry-run", "--no-progress", "--report", str(report)],
                           capsys)
    assert json.loads(report.read_text())["options"]["jobs"] == pc.default_jobs()


# --- two processes warming one directory --------------------------------------------------------------------

ENTRIES = 12
ROUNDS = 60


def _entry_text(name: str, writer: int, round_: int) -> str:
    body = f"{name}:{writer}:{round_}:" + "x" * (200_000 + 997 * writer + round_)
    return json.dumps({"name": name, "body": body, "sha": hashlib.sha256(body.encode()).hexdigest()})


def _warm_dir(folder: str, manifest: str, writer: int, start_at: float) -> None:
    """One of two processes: the same entries, rewritten over and over through write_atomic, and
    its keys merged into one manifest through update_manifest (the executor's own paths)."""
    from planner.output import write_atomic

    while time.time() < start_at:  # both start together
        time.sleep(0.001)
    fp = {"test": 1}
    for r in range(ROUNDS):
        name = f"entry-{r % ENTRIES}.json"
        write_atomic(os.path.join(folder, name), _entry_text(name, writer, r))
        pc.update_manifest(manifest, {"fake": {f"w{writer}-k{r}"}}, fp)


def _check_entry(path: str) -> None:
    with open(path) as f:
        doc = json.load(f)  # a partial file would not parse
    assert hashlib.sha256(doc["body"].encode()).hexdigest() == doc["sha"]
    assert doc["name"] == os.path.basename(path)


def test_two_processes_warming_one_directory_leave_every_entry_complete(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir()
    manifest = str(folder / pc.MANIFEST_NAME)
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 1.5
    procs = [ctx.Process(target=_warm_dir, args=(str(folder), manifest, w, start_at)) for w in (1, 2)]
    for p in procs:
        p.start()
    seen, errors, stop = [0], [], threading.Event()

    def reader():  # reads while both write: never a partial entry
        while not stop.is_set():
            for name in os.listdir(folder):
                path = os.path.join(folder, name)
                if name.startswith("entry-"):
                    try:
                        _check_entry(path)
                        seen[0] += 1
                    except FileNotFoundError:
                        pass
                    except Exception as e:  # noqa: BLE001
                        errors.append(f"{name}: {type(e).__name__}: {e}")
                elif name == pc.MANIFEST_NAME:
                    try:
                        with open(path) as f:
                            json.load(f)
                    except FileNotFoundError:
                        pass
                    except Exception as e:  # noqa: BLE001
                        errors.append(f"manifest: {type(e).__name__}: {e}")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for p in procs:
            p.join(120)
    finally:
        stop.set()
        thread.join()
    assert [p.exitcode for p in procs] == [0, 0]
    assert errors == [] and seen[0] > 0
    names = sorted(os.listdir(folder))
    assert names == sorted([f"entry-{i}.json" for i in range(ENTRIES)] + [pc.MANIFEST_NAME])  # no temp files
    for name in names:
        if name.startswith("entry-"):
            _check_entry(str(folder / name))
    keys = pc.read_manifest(manifest, {"test": 1})["fake"]
    # Concurrent merges may lose a key (only a slower next run), never corrupt the file.
    assert keys <= {f"w{w}-k{r}" for w in (1, 2) for r in range(ROUNDS)}
    assert {f"w1-k{ROUNDS - 1}", f"w2-k{ROUNDS - 1}"} & keys


# --- finish(): a serving engine's barrier (vllm_bridge calls it before vLLM's memory profile) -------------

def started_pool(expanded, **kw) -> pc.Precompiler:
    from executor.run import start_precompile

    return start_precompile(expanded, None, options(**kw))


def alive(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except OSError:
            continue
        out.append(pid)
    return out


def test_finish_waits_for_every_job_and_leaves_no_worker_process(fake_env):
    pre = started_pool(plan(gemm("a", [1, 2, 3], ["k1", "k2", "k3"])))
    assert pre.status == "ran"
    assert pre.finish(60) is None
    assert not pre.holds_workers and pre.finish_s is not None
    records = pre.summary()["records"]
    assert sorted(r["key"] for r in records) == ["k1", "k2", "k3"] and {r["status"] for r in records} == {"ok"}
    time.sleep(0.2)  # reaped by join: nothing of the pool is left to hold memory
    assert alive({r["pid"] for r in records}) == []


def test_finish_of_a_stuck_pool_ends_in_one_line_within_its_timeout(fake_env):
    pre = started_pool(plan(gemm("a", [1, 2], ["k1", "k2"], sleep_in_worker=120)))
    began = time.perf_counter()
    why = pre.finish(2)
    assert time.perf_counter() - began < 2 + 15  # the timeout, then the workers are killed and reaped
    assert why.startswith("timed out after 2 s with 0 of 2 jobs done") and "\n" not in why
    assert pre.status == "cancelled" and not pre.holds_workers
    started = [int(n.split("-")[1]) for n in os.listdir(fake_env["log"]) if n.startswith("started-")]
    assert started and alive(started) == []


def test_finish_says_when_no_job_succeeded(fake_env):
    pre = started_pool(plan(gemm("a", [1, 2], ["k1", "k2"], fail_in_worker=[1, 2])))
    why = pre.finish(60)
    assert why.startswith("no job succeeded (failed: RuntimeError: fake compile error at")


class SettingsBackend(BaseBackend):
    """Writes the settings its constructor got, in whichever process runs it."""

    name = "settings_probe"
    families = ("gemm",)

    def gemm(self, step, m_values, tick):
        where = "worker" if _in_worker() else "main"
        with open(os.path.join(os.environ["WARMUP_FAKE_LOG_DIR"], f"settings-{where}-{os.getpid()}"), "w") as f:
            json.dump({"settings": self.settings, "triton_cache_dir": os.environ.get("TRITON_CACHE_DIR")}, f)
        tick(len(m_values))
        return len(m_values)


def test_backend_settings_and_worker_env_reach_the_workers_through_the_constructor(fake_env, monkeypatch, tmp_path):
    """The cause of the vLLM plugin's serial start-up (issue 23): its DeepGEMM backend read a module
    global that only vLLM's process had set, so in a precompile worker it was unavailable. Settings
    now travel with the options to every worker's backend constructor."""
    monkeypatch.setitem(registry.BACKENDS, "settings_probe", ("test_precompile", "SettingsBackend"))
    staging = str(tmp_path / "staging")
    pre = started_pool(plan(gemm("a", [1, 2], ["k1", "k2"], backend="settings_probe")),
                       precompile_backends=("settings_probe",),
                       backend_settings={"settings_probe": {"module": "vllm.utils.deep_gemm"}},
                       worker_env={"TRITON_CACHE_DIR": staging})
    assert pre.finish(60) is None
    seen = [json.load(open(fake_env["log"] / n)) for n in os.listdir(fake_env["log"]) if n.startswith("settings-worker")]
    assert seen and all(s == {"settings": {"module": "vllm.utils.deep_gemm"}, "triton_cache_dir": staging}
                        for s in seen)
    assert os.environ["TRITON_CACHE_DIR"] == str(fake_env["cache"])  # the main process's is its own


def test_a_deep_gemm_kernel_seen_by_several_jobs_is_counted_once():
    """Workers share DeepGEMM's cache: a job's monitor also sees its neighbours' kernels. Each
    kernel is counted for one job, the earliest-ending that saw it (the H100 run of issue 23 had
    58 jobs report 133 kernels of 60 before)."""
    def result(key, end, entries):
        r = JobResult(key=key, keys=[key], step="s/a", backend="deep_gemm", kind="gemm", whole_step=False,
                         values=1, deep_gemm_jit=len(entries), deep_gemm_entries=list(entries))
        r.end = end
        return r
    a, b, c = result("k1", 10.0, ["e1"]), result("k2", 11.0, ["e1", "e2"]), result("k3", 12.5, ["e1", "e2", "e3"])
    attribute_deep_gemm([c, a, b])
    assert [(r.key, r.deep_gemm_entries, r.deep_gemm_jit) for r in (a, b, c)] == [
        ("k1", ["e1"], 1), ("k2", ["e2"], 1), ("k3", ["e3"], 1)]


def _pool_in_a_daemon(log_dir, cache, queue):
    """In a daemon process (as vLLM's tensor-parallel ranks are): a run with a pool of 2 workers."""
    os.environ.update(WARMUP_FAKE_LOG_DIR=log_dir, TRITON_CACHE_DIR=cache)
    registry.BACKENDS["fake"] = FAKE
    rep = run(plan(gemm("a", [1, 2, 3], ["k1", "k2", "k3"])))
    queue.put((multiprocessing.current_process().daemon, rep["precompile"]["status"], rep["precompile"]["ok"],
               os.getpid()))


def test_a_daemon_process_runs_its_jobs_in_worker_processes(fake_env):
    """Python refuses a daemon process children; the pool starts its workers anyway (issue 28:
    vLLM's ranks are daemons), and they compile the jobs."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_pool_in_a_daemon, args=(str(fake_env["log"]), str(fake_env["cache"]), queue),
                        daemon=True)
    child.start()
    child.join(120)
    daemon, status, ok, pid = queue.get(timeout=5)
    assert (daemon, status, ok) == (True, "ran", 3)
    workers, _ = logged(fake_env["log"])  # the daemon's own calls log as a worker's too: it has a parent
    assert len([w for w in workers if w.split("-")[1] != str(pid)]) == 3  # each key once, in a pool worker
