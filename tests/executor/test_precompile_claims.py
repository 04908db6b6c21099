"""Claims (executor/precompile/claims/: on_disk.py, owner.py, waits.py, node.py): several processes that
precompile the same keys into one cache compile each key once, nobody waits past the bounds, and
every process ends warm (issue 28, items 1-3).

The protocol's pieces are tested on files alone; then real `warmup execute` runs (a stand-in
backend whose "compile" sleeps and writes a cache entry, in real forkserver workers) race on one
cache, one of them killed with SIGKILL (its whole process group) while its workers hold keys.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import Future

import pytest

from execlib import HERE, ROOT

from executor.backends.base import BaseBackend
from executor.precompile.claims import on_disk as cl
from executor.precompile.claims.key_future import KeyFuture
from executor.precompile.claims.owner import take
from executor.precompile.claims.waits import Waits
from executor.precompile.jobs.job import Job, JobResult
from planner.plan import steps as st
from planner.plan.expanded import ExpandedPlan

KEYS = [f"k{i}" for i in range(10)]


def claim(tmp_path, **kw) -> cl.KeyClaim:
    return cl.KeyClaim(str(tmp_path / "claims" / "key"), process=os.getpid(), **kw)


def foreign(c: cl.KeyClaim, gen: int, host: str = "elsewhere", pid: int = 1, age: float = 0.0) -> None:
    """A claim of generation `gen` written by another process, its heartbeat `age` seconds old."""
    os.makedirs(c.path, exist_ok=True)
    path = os.path.join(c.path, str(gen))
    with open(path, "w") as f:
        json.dump({"host": host, "pid": pid, "process": pid, "gen": gen}, f)
    os.utime(path, (time.time() - age, time.time() - age))


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# --- the protocol on files ------------------------------------------------------------------------------

def test_one_taker_per_key_then_done_for_everyone(tmp_path):
    c = claim(tmp_path)
    how, held = take(c)
    assert how == "mine" and os.listdir(c.path) == ["0"]
    seen = cl.look(c)
    assert seen.held and seen.owner["pid"] == os.getpid()   # a live owner: this process
    how, owner = take(c)
    assert (how, owner["gen"]) == ("held", 0)
    held.end(ok=True, entries=["kernel.b", "kernel.a"])
    assert os.listdir(c.path) == ["done"]                    # the claim removed once the mark is there
    how, done = take(c)
    assert how == "done" and done["entries"] == ["kernel.a", "kernel.b"] and done["pid"] == os.getpid()


def test_a_failed_job_gives_its_claim_back(tmp_path):
    c = claim(tmp_path)
    _, held = take(c)
    held.end(ok=False)
    assert os.listdir(c.path) == [] and not cl.look(c).held
    assert take(c)[0] == "mine"


def test_a_dead_or_silent_owner_holds_nothing_and_the_next_generation_is_taken(tmp_path):
    c = claim(tmp_path, stale_s=30)
    foreign(c, 0, host=cl.HOST, pid=dead_pid())
    assert cl.look(c).free.endswith("is gone")
    how, held = take(c)
    assert how == "mine" and held.owner["gen"] == 1 and sorted(os.listdir(c.path)) == ["0", "1"]  # 0 left as it was
    held.end(ok=True)

    c = cl.KeyClaim(str(tmp_path / "other"), process=os.getpid(), stale_s=30)
    foreign(c, 0, age=5)                            # another host: its pid cannot be checked, its heartbeat can
    assert cl.look(c).held and take(c)[0] == "held"
    foreign(c, 0, age=31)
    assert cl.look(c).free == "its heartbeat is 31 s old (bound 30 s)"
    assert take(c)[0] == "mine"


def test_a_takeover_past_the_wait_bound_takes_the_next_generation(tmp_path):
    c = claim(tmp_path)
    foreign(c, 0)                                   # live (fresh heartbeat), but given up by a waiter
    assert take(c)[0] == "held"
    how, held = take(cl.KeyClaim(c.path, os.getpid(), after=0))
    assert how == "mine" and held.owner["gen"] == 1
    assert take(cl.KeyClaim(c.path, os.getpid(), after=0))[0] == "held"   # gen 1 is live: nobody takes 2


def test_the_heartbeat_keeps_a_long_job_fresh(tmp_path):
    c = claim(tmp_path, beat_s=0.05)
    _, held = take(c)
    path = os.path.join(c.path, "0")
    os.utime(path, (0, 0))
    time.sleep(0.3)
    assert time.time() - os.stat(path).st_mtime < 1
    held.end(ok=True)


# --- the main process's waits ---------------------------------------------------------------------------

def job_with(c: cl.KeyClaim) -> Job:
    step = st.Gemm("s/a", "s", kernel="fp8_gemm", backend="fake", n=256, k=128, block_size=(128, 128),
                   m_values=(1,), variants=(st.Variant("k", 1),), exact=True)
    return Job(key="k", keys=["k"], backend="fake", kind="gemm", step_id="s/a", index=0, step=step, values=[1],
               claim=c)


def held_result(job: Job) -> Future:
    result = JobResult.of(job).ended("held", None)
    result.claim = {"how": "held", "by": "someone"}
    fut = Future()
    fut.set_result(result)
    return fut


def wait_until(predicate, seconds=10.0):
    deadline = time.time() + seconds
    while time.time() < deadline and not predicate():
        time.sleep(0.02)
    return predicate()


def test_a_key_held_elsewhere_is_waited_for_until_its_done_mark(tmp_path):
    c = claim(tmp_path)
    foreign(c, 0)
    waits = Waits(submit=None, note=None, wait_s=60, poll_s=0.02)
    fut = waits.follow(job_with(c), held_result(job_with(c)))
    time.sleep(0.2)
    assert not fut.done()
    with open(os.path.join(c.path, "done"), "w") as f:
        json.dump({"host": "elsewhere", "pid": 1, "process": 1, "time": 5.0, "entries": ["kernel.x"]}, f)
    assert wait_until(fut.done)
    result = fut.result()
    assert result.status == "ok" and result.pid is None
    assert result.claim["how"] == "waited" and result.claim["entries"] == ["kernel.x"] and result.claim["end"] == 5.0
    assert "claim" in result.public(None) and "entries" not in result.public(None)["claim"]


def test_a_live_owner_past_the_wait_bound_is_taken_over_in_one_line(tmp_path):
    c = claim(tmp_path)
    foreign(c, 0, host=cl.HOST, pid=os.getpid())   # alive, and it never finishes
    submitted, notes = [], []
    again = Future()
    waits = Waits(submit=lambda job: submitted.append(job) or again, note=notes.append, wait_s=0.3, poll_s=0.02)
    fut = waits.follow(job_with(c), held_result(job_with(c)))
    assert wait_until(lambda: submitted)
    assert submitted[0].claim.after == 0 and len(notes) == 1
    assert notes[0].startswith(f"precompile: taking over fake key k from pid {os.getpid()}")
    assert "bound 0.3 s" in notes[0]
    mine = JobResult.of(submitted[0])
    mine.claim = {"how": "mine"}
    again.set_result(mine)
    assert fut.result().claim["took_over"] == notes[0] and fut.result().claim["waited_s"] >= 0.3


def test_a_wait_can_be_cancelled_and_a_running_job_cannot():
    running = Future()
    running.set_running_or_notify_cancel()
    fut = KeyFuture()
    fut.inner = running
    assert not fut.cancel() and not fut.done()        # as the executor's own future of a running job
    running.set_result("answer")
    assert fut.cancel() and fut.cancelled()           # its answer held elsewhere: a wait, cancelled
    fut.settle("late")                                # the first word stays
    assert fut.cancelled()


# --- processes racing on one cache, one killed -----------------------------------------------------------

class ClaimFake(BaseBackend):
    """A compile that takes $WARMUP_FAKE_SLEEP s in a worker and leaves `entry-<key>` in the cache;
    logs started-/compiled-<tag>-<key> there, and main-<tag>-<key>-warm|cold in the main process."""

    name = "claimfake"
    families = ("gemm",)

    def gemm(self, step, m_values, tick):
        import multiprocessing

        from planner.output import write_atomic

        log, tag, cache = (os.environ[k] for k in ("WARMUP_FAKE_LOG_DIR", "WARMUP_FAKE_TAG", "TRITON_CACHE_DIR"))
        keys = {v.first: v.key for v in step.variants}
        for m in m_values:
            key, entry = keys[m], os.path.join(cache, f"entry-{keys[m]}")
            if multiprocessing.parent_process() is None:  # the main process: a load, or a compile
                open(os.path.join(log, f"main-{tag}-{key}-{'warm' if os.path.exists(entry) else 'cold'}"), "w").close()
                continue
            open(os.path.join(log, f"started-{tag}-{key}"), "w").close()
            time.sleep(float(os.environ["WARMUP_FAKE_SLEEP"]))
            write_atomic(entry, key)
            open(os.path.join(log, f"compiled-{tag}-{key}"), "w").close()
        tick(len(m_values))
        return len(m_values)


def claims_plan() -> ExpandedPlan:
    step = st.Gemm("s/a", "s", kernel="fp8_gemm", backend="claimfake", n=256, k=128, block_size=(128, 128),
                   m_values=tuple(range(1, len(KEYS) + 1)),
                   variants=tuple(st.Variant(k, m) for m, k in enumerate(KEYS, 1)), exact=True)
    return ExpandedPlan(plan="p", engine="e", planner_version="0", digest="", inputs={}, steps=(step,))


def run_plan() -> dict:
    from executor.run import Options, execute

    return execute(claims_plan(), None, Options(jobs=2, precompile_backends=("claimfake",), device="cpu",
                                                runner="none", jit_monitor="off")).to_dict()


RUN = """
import json, sys
from executor import registry
registry.BACKENDS["claimfake"] = ("test_precompile_claims", "ClaimFake")
import test_precompile_claims as t
json.dump(t.run_plan(), open(sys.argv[1], "w"))
"""


def start(tag: str, tmp_path, sleep: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")]),
           "TRITON_CACHE_DIR": str(tmp_path / "cache"), "WARMUP_FAKE_LOG_DIR": str(tmp_path / "log"),
           "WARMUP_FAKE_TAG": tag, "WARMUP_FAKE_SLEEP": str(sleep)}
    env.pop("TRITON_CACHE_MANAGER", None)
    return subprocess.Popen([sys.executable, "-c", RUN, str(tmp_path / f"report-{tag}.json")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def logged(tmp_path, prefix: str) -> list[str]:
    return sorted(n for n in os.listdir(tmp_path / "log") if n.startswith(prefix))


def test_processes_racing_on_one_cache_compile_each_key_once_and_survive_one_killed(tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "log").mkdir()
    killed = start("C", tmp_path, sleep=60)           # its workers claim two keys and hold them
    assert wait_until(lambda: len(logged(tmp_path, "started-C-")) == 2, 90), killed.communicate(timeout=30)[0]
    began = time.time()
    racers = {tag: start(tag, tmp_path, sleep=0.3) for tag in ("A", "B")}
    assert wait_until(lambda: len(logged(tmp_path, "compiled-")) >= 4, 90)  # A and B compile the others...
    os.killpg(killed.pid, signal.SIGKILL)             # ...while C is mid-job: main, fork server, workers
    killed.wait(30)
    killed_at = time.time()
    out = {tag: proc.communicate(timeout=120)[0] for tag, proc in racers.items()}
    ended = time.time()
    assert [racers[t].returncode for t in "AB"] == [0, 0], out
    cut_short = [n.split("-", 2)[2] for n in logged(tmp_path, "started-C-")]
    compiles = [n.split("-", 2)[2] for n in logged(tmp_path, "compiled-")]
    assert sorted(compiles) == sorted(KEYS)           # each key once: C's two by a takeover, none twice
    assert logged(tmp_path, "compiled-C-") == []
    reports = {t: json.loads((tmp_path / f"report-{t}.json").read_text())["precompile"] for t in "AB"}
    lines = [line for p in reports.values() for line in p["claims"]["taken_over"]]
    assert sorted({line.split(" key ")[1].split()[0] for line in lines}) == sorted(cut_short)
    assert all(" is gone" in line for line in lines), lines
    for tag, p in reports.items():
        c = p["claims"]
        assert p["status"] == "ran" and p["ok"] == len(KEYS), p
        assert c["compiled"] + c["waited"] + c["loaded"] == len(KEYS) and c["node_keys"] == len(KEYS)
        assert c["compiled"] == len(logged(tmp_path, f"compiled-{tag}-"))
        waited = [r["claim"].get("waited_s", 0) for r in p["records"]]
        assert max(waited) <= killed_at - began + 5   # nobody waited past the kill by more than the bounds
        assert logged(tmp_path, f"main-{tag}-") == sorted(f"main-{tag}-{k}-warm" for k in KEYS)  # ends warm
    assert sum(p["claims"]["compiled"] for p in reports.values()) == len(KEYS)
    assert ended - killed_at < 60
    # A later run finds every key done by others: skipped as a manifest hit, even without the manifest.
    os.unlink(tmp_path / "cache" / "warmup-precompiled.json")
    later = start("D", tmp_path, sleep=0.3)
    assert later.wait(120) == 0, later.communicate()[0]
    p = json.loads((tmp_path / "report-D.json").read_text())["precompile"]
    assert p["status"] == "skipped" and f"{len(KEYS)} compiled by other processes" in p["reason"]
    assert p["claims"]["loaded"] == len(KEYS) and p["claims"]["node_keys"] == len(KEYS)


# --- counts: the kernels of other processes, the rank's line -----------------------------------------

def test_a_deep_gemm_kernel_another_process_compiled_is_not_counted_here():
    """The ranks share DeepGEMM's cache: a job's monitor also sees the kernels another rank compiles
    meanwhile. Its done mark says what its job saw and when it ended, so each kernel is counted for
    the job, of any process, that ended first after seeing it (barrier.py)."""
    from executor.precompile.pool.deep_gemm_counts import attribute_deep_gemm, compiled_elsewhere

    def result(key, end, entries, claim=None):
        r = JobResult(key=key, keys=[key], step="s/d", backend="deep_gemm", kind="gemm", whole_step=False, values=1,
                      pid=1, deep_gemm_jit=len(entries), deep_gemm_entries=list(entries), claim=claim)
        r.end = end
        return r
    ours = result("k1", 10.0, ["e1", "e2"], {"how": "mine"})             # compiled e1, saw e2 land
    waited = result("k2", 11.0, [], {"how": "waited", "entries": ["e2"], "end": 9.0})  # the other rank's e2
    theirs = compiled_elsewhere([ours, waited])
    attribute_deep_gemm([ours, waited] + theirs)
    assert (ours.deep_gemm_entries, ours.deep_gemm_jit) == (["e1"], 1) and theirs[0].deep_gemm_entries == ["e2"]


def test_the_rank_line_says_what_it_compiled_waited_for_and_the_node_total():
    from vllm_bridge.warmup.log_lines import _pool_line, summary_line

    p = {"ok": 6, "jobs": 6, "workers": 4, "wall_s": 2.0, "compiled": 3,
         "claims": {"compiled": 3, "waited": 2, "loaded": 1, "taken_over": ["precompile: taking over ..."],
                    "node_keys": 6, "node_processes": 2}}
    assert _pool_line(p, 1) == ("precompile (rank 1): 6 of 6 jobs done on 4 workers in 2.0 s, 3 kernels compiled; "
                                "keys: 3 compiled by this rank, 2 waited for, 1 loaded, 6 on the node by 2 processes, "
                                "1 taken over")
    assert "; precompile (rank 3): 6 of 6 jobs" in summary_line("p", [], [], p, None, 3)


RUN_DG = """
import json, sys, types
sys.modules["deep_gemm"] = types.ModuleType("deep_gemm")   # this process's own stand-in (test_precompile_counts)
from executor import registry
registry.BACKENDS["stand_in_dg"] = ("test_precompile_counts", "StandInDeepGemm")
import test_precompile_claims as t
json.dump(t.run_dg_plan(), open(sys.argv[1], "w"))
"""


def run_dg_plan() -> dict:
    from test_precompile_counts import KEYS as DG_KEYS

    from executor.run import Options, execute

    step = st.Gemm("s/a", "s", kernel="fp8_gemm_nt", backend="stand_in_dg", n=256, k=128, block_size=(128, 128),
                   m_values=tuple(range(1, len(DG_KEYS) + 1)),
                   variants=tuple(st.Variant(k, m) for m, k in enumerate(DG_KEYS, 1)), exact=True)
    expanded = ExpandedPlan(plan="p", engine="e", planner_version="0", digest="", inputs={}, steps=(step,))
    return execute(expanded, None, Options(jobs=2, precompile_backends=("stand_in_dg",), device="cpu",
                                           runner="none", jit_monitor="warn")).to_dict()


@pytest.mark.parametrize("second", ["at_once", "late"])
def test_two_processes_sharing_deep_gemms_cache_count_each_kernel_once_on_the_node(tmp_path, second):
    """Issue 28, item 3 with DeepGEMM's counting (by the entries that appear in its shared cache):
    the two pools' kernels add up to the distinct keys, and neither main process counts the other's
    kernels as its own compiles. The invariant, not a timing (issue 37's audit: the test asserted
    that both pools ran, which fails when the second starts late and finds its keys done): each key
    compiled once on the node, whether the second process starts with the first ("at_once") or
    once the first has compiled some of them ("late", where its pool may also find them all done)."""
    from test_precompile_counts import KEYS as DG_KEYS

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")]),
           "DG_JIT_CACHE_DIR": str(tmp_path / "dg"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}

    def launch(i):
        return subprocess.Popen([sys.executable, "-c", RUN_DG, str(tmp_path / f"r{i}.json")], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    procs = [launch(0)]
    if second == "late":
        cache = tmp_path / "dg" / "cache"
        assert wait_until(lambda: cache.is_dir() and len(os.listdir(cache)) >= 2, 90), procs[0].communicate(30)[0]
    procs.append(launch(1))
    out = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], out
    reports = [json.loads((tmp_path / f"r{i}.json").read_text()) for i in (0, 1)]
    pools = [r["precompile"] for r in reports]
    assert len(os.listdir(tmp_path / "dg" / "cache")) == len(DG_KEYS)
    assert sum(p["claims"]["compiled"] for p in pools) == len(DG_KEYS), pools   # each key compiled once
    assert sum(p.get("deep_gemm_jit") or 0 for p in pools) == len(DG_KEYS)      # each kernel counted once
    for p in pools:   # every key accounted for in each process: its own, waited for, or found done
        c = p["claims"]
        assert c["compiled"] + c["waited"] + c["loaded"] == len(DG_KEYS) and c["node_keys"] == len(DG_KEYS), p
        assert p["status"] == "ran" or (p["status"] == "skipped" and "compiled by other processes" in p["reason"]), p
    assert pools[0]["status"] == "ran"                                           # the first finds nothing done
    assert [r["stages"][0]["compiled_main"] for r in reports] == [0, 0]          # the other's are not ours


def test_a_job_that_fails_in_a_worker_leaves_no_done_mark_and_one_that_succeeds_does(tmp_path, monkeypatch):
    # issue 37's audit: a worker marking a failed job's key done passed every test
    from executor.precompile.workers import worker

    class Flaky(BaseBackend):
        name = "flaky"
        families = ("gemm",)

        def gemm(self, step, values, tick):
            if values == [2]:
                raise RuntimeError("nvcc failed")
            return len(values)

    monkeypatch.setattr(worker, "_WORKER", {"backends": {"flaky": Flaky()}, "errors": {}, "monitor": None,
                                            "device": "cpu"})
    outcomes = {}
    for m in (1, 2):
        step = st.Gemm(f"s/{m}", "s", kernel="fp8_gemm", backend="flaky", n=256, k=128, block_size=(128, 128),
                       m_values=(m,))
        c = cl.KeyClaim(str(tmp_path / "claims" / f"key{m}"), process=os.getpid())
        job = Job(key=f"key{m}", keys=[f"key{m}"], backend="flaky", kind="gemm", step_id=step.id, index=0,
                  step=step, values=[m], claim=c)
        result = worker.run_job(job)
        outcomes[m] = (result.status, sorted(os.listdir(c.path)))
    assert outcomes == {1: ("ok", ["done"]), 2: ("failed", [])}  # the failed key stays free for the next taker


def test_two_triton_or_deep_gemm_builds_never_share_a_claim_or_a_done_mark(tmp_path, monkeypatch):
    """A key done under one build of Triton or DeepGEMM is not done for another (issue 37's audit:
    claims shared across two builds passed every test): the claims of two fingerprints live apart
    (node.py), so run_job under the second compiles the key again, and the first build's mark still
    skips it under the first."""
    import importlib

    from executor.precompile.claims import node
    from executor.precompile.workers import worker

    fp = importlib.import_module("executor.precompile.jobs.fingerprint")   # the package exports its function

    compiled = []

    class Counting(BaseBackend):
        name = "counting"
        families = ("gemm",)

        def gemm(self, step, values, tick):
            compiled.append(tuple(values))
            return len(values)

    monkeypatch.setattr(worker, "_WORKER", {"backends": {"counting": Counting()}, "errors": {}, "monitor": None,
                                            "device": "cpu"})
    cache = {"TRITON_CACHE_DIR": str(tmp_path / "cache")}       # one cache directory shared by both builds
    step = st.Gemm("s/1", "s", kernel="fp8_gemm", backend="counting", n=256, k=128, block_size=(128, 128),
                   m_values=(1,))

    def build(triton: str, deep_gemm: str) -> dict:
        """The fingerprint a process of this Triton and DeepGEMM computes (fingerprint.py)."""
        monkeypatch.setattr(fp, "_dist_version", lambda name: triton if name == "triton" else "2.13.0")
        monkeypatch.setattr(fp, "deep_gemm_fingerprint", lambda: {"version": deep_gemm, "include_dir": "/dg",
                                                                  "headers": "sha256:0"})
        return fp.fingerprint()

    def run_under(fingerprint: dict):
        claims = node.NodeClaims(cache)
        claims.open(fingerprint, ("counting",))
        found_done = claims.done({("counting", "k1")})   # as decide.py asks, before the pool starts
        job = Job(key="k1", keys=["k1"], backend="counting", kind="gemm", step_id=step.id, index=0, step=step,
                  values=[1], claim=claims.claim("counting", "k1"))
        result = worker.run_job(job)
        return result.status, result.claim["how"], found_done

    first, other_triton, other_dg = build("3.6.0", "2.5.0"), build("3.8.0", "2.5.0"), build("3.6.0", "2.8.0")
    assert run_under(first) == ("ok", "mine", set()) and compiled == [(1,)]
    assert run_under(first) == ("ok", "done", {("counting", "k1")}) and compiled == [(1,)]   # done: skipped
    assert run_under(other_triton) == ("ok", "mine", set()) and compiled == [(1,), (1,)]     # not the first's
    assert run_under(other_dg) == ("ok", "mine", set()) and compiled == [(1,), (1,), (1,)]
    assert run_under(other_triton)[1] == "done" and run_under(other_dg)[1] == "done"
