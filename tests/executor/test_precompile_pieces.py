"""The precompile pool's pieces alone, without a worker process: the job book (which jobs a step
waits for, which an autotune step holds back, the first word on a job), the decision (whether a
run gets a pool, and why not), the DeepGEMM barrier (the first wait, busy, the monitor told
once), the timings record, the report's share of the book, and the loop's hook on a fake pool.

The pool end to end, with spawned workers, is tests/executor/test_precompile.py."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace as NS

from executor.precompile.jobs.decide import Decision, decide, usable_backends
from executor.precompile.pool.barrier import DeepGemmBarrier
from executor.precompile.pool.book import JobBook
from executor.precompile.pool.hook import PrecompileHook
from executor.precompile.pool.summary import cached_keys, failure_line, pool_counts, step_share
from executor.precompile.pool.timings import Timings
from executor.records import StepRecord
from planner.plan import steps as st


def gemm(name, keys, backend="fake", stage="s"):
    """An exact gemm step whose M-values pair one to one with `keys`."""
    ms = tuple(range(1, len(keys) + 1))
    return st.Gemm(f"{stage}/{name}", stage, kernel="fp8_gemm", backend=backend, n=256, k=128, block_size=(128, 128),
                   m_values=ms, variants=tuple(st.Variant(k, m) for k, m in zip(keys, ms)), exact=True)


def tune(name="tune"):
    return st.Autotune(f"t/{name}", "t", library="triton", num_tokens=1, buckets=(1,), shapes=())


def book_of(steps, backends=("fake", "deep_gemm"), have=frozenset()) -> JobBook:
    book = JobBook(steps, lambda step: step.backend)
    book.plan(backends)
    book.open(set(have))
    return book


class Manifest:
    """A RunManifest that lists `have`."""

    path = "/cache/warmup-precompiled.json"

    def __init__(self, have=()):
        self.have = set(have)

    def listed(self):
        return self.have


def options(**kw):
    from executor.run import Options

    return Options(**{**dict(jobs=4, precompile_backends=("fake",), device="cpu"), **kw})


def done(result=None) -> Future:
    fut = Future()
    fut.set_result(result)
    return fut


# --- the book ------------------------------------------------------------------------------------------

def test_the_book_knows_each_steps_keys_and_the_job_that_warms_each():
    a, b = gemm("a", ["k1", "k2"]), gemm("b", ["k2", "k3"])
    book = book_of([a, b])
    assert [s.job.key for s in book.slots] == ["k1", "k2", "k3"]
    assert [s.job.key for s in book.step_slots("s/b")] == ["k2", "k3"]  # k2's job is a's: b waits for it too
    assert [s.job.key for s in book.info["s/b"].jobs] == ["k3"]           # but only k3's is b's own
    assert book.step_slots("s/none") == [] and book.index_of["s/b"] == 1


def test_jobs_after_an_autotune_step_wait_for_it_and_the_longest_go_first(tmp_path):
    from executor.precompile.jobs.costs import JobCosts

    steps = [gemm("a", ["k1"]), gemm("d", ["d1"], backend="deep_gemm"), tune(), gemm("b", ["k2"]),
             gemm("e", ["d2"], backend="deep_gemm")]
    book = book_of(steps)
    costs = JobCosts(str(tmp_path / "costs.json"))  # none measured: DeepGEMM's 4 s guess beats the others' 1 s
    released = book.due(-1, costs.order)
    assert [s.job.key for s in released] == ["d1", "k1"]
    for slot in released:
        book.submitted(slot, done())
    assert book.due(-1, costs.order) == []                                   # released once
    costs.seconds["fake:k2"] = 30.0                                          # measured at the last start
    assert [s.job.key for s in book.due(2, costs.order)] == ["k2", "d2"]   # after the autotune step at index 2


def test_job_costs_are_kept_for_the_next_start_and_a_bad_file_only_loses_the_order(tmp_path):
    from executor.precompile.jobs.costs import JobCosts
    from executor.precompile.jobs.job import JobResult

    path = tmp_path / "costs.json"
    book = book_of([gemm("a", ["k1", "k2"])])
    results = [JobResult.of(s.job, pid=1, compiled=1, wall_s=w) for s, w in zip(book.slots, (2.5, 7.0))]
    results.append(JobResult.of(book.slots[0].job, pid=1, compiled=0, wall_s=99.0))  # a load: not a cost
    results[1].key = "k2"
    assert JobCosts(str(path)).record(results) == 2
    again = JobCosts(str(path))
    assert again.of(book.slots[1].job) == (7.0, True) and again.of(book.slots[0].job) == (2.5, True)
    assert [s.job.key for s in again.order(list(book.slots))] == ["k2", "k1"]
    path.write_text("{not json")
    assert JobCosts(str(path)).seconds == {}                                 # unreadable: guesses, no error


def test_the_first_word_on_a_job_stays_and_every_job_ends_with_a_record():
    book = book_of([gemm("a", ["k1", "k2", "k3"])])
    ok, queued, held = book.slots
    fut = Future()
    fut.set_running_or_notify_cancel()              # a worker has it: cancelling cannot stop it
    book.submitted(ok, fut)
    book.submitted(queued, Future())
    book.cancel_queued("not needed")                # held: never submitted; queued: its future cancelled
    assert (held.result.status, held.result.error) == ("cancelled", "not needed")
    assert queued.result.status == "cancelled" and not book.all_done()
    fut.set_result("the worker's record")
    assert ok.result == "the worker's record" and book.all_done()
    book.settle_all(missing="gone")
    assert [s.result.status if s is not ok else s.result for s in book.slots] == [
        "the worker's record", "cancelled", "cancelled"]


def test_a_crashed_worker_fails_the_job_it_was_running():
    book = book_of([gemm("a", ["k1"])])
    fut = Future()
    book.submitted(book.slots[0], fut)
    fut.set_exception(RuntimeError("BrokenProcessPool"))
    assert (book.slots[0].result.status, book.slots[0].result.error) == ("failed", "RuntimeError: BrokenProcessPool")


# --- the decision -----------------------------------------------------------------------------------------

def test_jobs_1_plans_the_keys_but_starts_no_pool():
    book = JobBook([gemm("a", ["k1", "k2"])], lambda step: step.backend)
    d = decide(Decision.of(options(jobs=1)), book, Manifest())
    assert (d.status, d.keys_planned, d.workers, book.slots) == ("off", 2, 0, [])
    assert d.reason == "--jobs 1: variants compile in the main process"


def test_a_listed_key_gets_no_job_and_all_listed_skip_the_pool():
    steps = [gemm("a", ["k1", "k2", "k3"])]
    d = decide(Decision.of(options()), JobBook(steps, lambda step: step.backend), Manifest({("fake", "k1")}))
    assert (d.status, d.keys_in_manifest, d.workers) == ("ran", 1, 2)  # 2 jobs: at most one worker each
    listed = {("fake", k) for k in ("k1", "k2", "k3")}
    d = decide(Decision.of(options()), JobBook(steps, lambda step: step.backend), Manifest(listed))
    assert d.status == "skipped" and d.reason.startswith("all 3 compile keys are in the disk cache (manifest /cache")


def test_gpu_backends_compile_nothing_off_a_cuda_device():
    assert usable_backends(("triton", "fake"), "cpu") == (("fake",), ["device cpu: triton compile nothing off a "
                                                                       "CUDA device"])
    book = JobBook([gemm("a", ["k1"], backend="triton")], lambda step: step.backend)
    d = decide(Decision.of(options(precompile_backends=("triton",))), book, Manifest())
    assert (d.status, d.backends, d.keys_planned) == ("off", (), 0) and d.reason.startswith("device cpu: triton")


# --- the DeepGEMM barrier ------------------------------------------------------------------------------------

def dg_result(key, end, entries):
    from executor.precompile.jobs.job import JobResult

    r = JobResult(key=key, keys=[key], step="s/d", backend="deep_gemm", kind="gemm", whole_step=False, values=1,
                  pid=1, deep_gemm_jit=len(entries), deep_gemm_entries=list(entries))
    r.end = end
    return r


def test_the_first_wait_takes_every_deep_gemm_job_and_the_monitor_is_told_once():
    book = book_of([gemm("a", ["k1"]), gemm("d", ["d1", "d2"], backend="deep_gemm")])
    told = []
    monitor = NS(pool_busy=None, absorb=lambda family, entries: told.append((family, entries)))
    barrier = DeepGemmBarrier(book, monitor)
    assert monitor.pool_busy == barrier.busy
    a, d1, d2 = book.slots
    futures = {slot.job.key: Future() for slot in book.slots}
    for slot in book.slots:
        book.submitted(slot, futures[slot.job.key])
    assert barrier.with_first_wait({a.future}) == {a.future, d1.future, d2.future}
    assert barrier.with_first_wait({a.future}) == {a.future}           # only the first step waits for them
    assert barrier.busy()
    barrier.absorb()
    assert told == []                                                 # not while workers may add kernels
    futures["d1"].set_result(dg_result("d1", 1.0, ["e1"]))
    futures["d2"].set_result(dg_result("d2", 2.0, ["e1", "e2"]))      # saw d1's kernel too
    assert not barrier.busy()
    barrier.absorb()
    barrier.absorb()
    assert told == [("deep_gemm", {"e1", "e2"})] and d2.result.deep_gemm_entries == ["e2"]  # each kernel counted for one job


# --- timings, the report's share ------------------------------------------------------------------------------

def test_the_clock_adds_only_what_counts():
    t = Timings()
    with t.clock("close_s", 4, add=True):
        pass
    first = t.close_s
    with t.clock("close_s", 4, add=True, keep=lambda: False):
        pass
    assert t.close_s == first is not None
    assert t.report([])["speedup"] is None and t.report([])["first_worker_ready_s"] is None


def test_the_manifest_learns_ok_jobs_and_ok_steps_on_their_planned_backend():
    from executor.precompile.jobs.job import JobResult

    a, b = gemm("a", ["k1"]), gemm("b", ["k2"])
    book = book_of([a, b])
    book.slots[0].result = JobResult.of(book.slots[0].job)                   # ok in a worker
    book.slots[1].result = JobResult.of(book.slots[1].job).ended("failed", "boom")
    on_torch = StepRecord.for_step(b, backend="torch", planned_backend="fake")  # --backend chose another
    assert cached_keys(book, [on_torch]) == {"fake": {"k1"}}
    on_fake = StepRecord.for_step(b, backend="fake", planned_backend="fake")
    assert cached_keys(book, [on_fake]) == {"fake": {"k1", "k2"}}
    assert failure_line(book.results()) is None
    assert failure_line(book.results()[1:]) == "no job succeeded (failed: boom)"


def test_a_steps_share_counts_its_own_jobs_and_the_pool_counts_each_kernel_once():
    book = book_of([gemm("d", ["d1", "d2"], backend="deep_gemm")])
    for slot, r in zip(book.slots, [dg_result("d1", 1.0, ["e1"]), dg_result("d2", 2.0, ["e2"])]):
        slot.result = r
    share = step_share(book.info["s/d"], 0.25)
    assert (share["jobs"], share["compiled"], share["deep_gemm_compiled"], share["wait_s"]) == (2, 2, 2, 0.25)
    counts = pool_counts(book.results(), {"e1", "e2"}, lambda backend: True, created=None)
    assert (counts["compiled"], counts["deep_gemm_jit"], counts["ok"]) == (2, 2, 2)


# --- the loop's hook, on a pool that is not running ---------------------------------------------------------------

def test_the_hook_stops_the_queue_on_a_failure_and_releases_after_autotune():
    calls = []
    book = book_of([gemm("a", ["k1"]), tune(), gemm("b", ["k2"])])
    pre = NS(options=options(), book=book, status="ran", pool=None,
             cancel=lambda why: calls.append(("cancel", why)), submit=lambda index: calls.append(("submit", index)))
    hook = PrecompileHook(pre)
    a, autotune, _ = book.steps
    hook.before_step(a)                                                # no pool: nothing to wait for
    record = StepRecord.for_step(a, backend="fake", planned_backend="fake", status="failed")
    hook.after_step(a, record)
    assert record.precompile["jobs"] == 1 and record.precompile["wait_s"] == 0.0
    pre.pool = NS(await_start=lambda timeout=None: True, started=NS(is_set=lambda: False))
    hook.before_step(autotune)
    hook.after_step(autotune, StepRecord.for_step(autotune, backend="triton", planned_backend="triton"))
    assert calls == [("cancel", "not needed: step s/a failed (--on-error stop)"), ("submit", 1)]


def test_a_pool_that_ends_idle_tells_the_monitor_its_deep_gemm_kernels():
    """Every job answered while the loop is between steps (an autotune step held DeepGEMM jobs back):
    the pool ends there, and the monitor must learn its kernels then, or the next step's count
    would take them for the main process's compiles."""
    from executor.precompile import Precompiler

    book = book_of([gemm("d", ["d1"], backend="deep_gemm")])
    told = []
    barrier = DeepGemmBarrier(book, NS(pool_busy=None, absorb=lambda family, entries: told.append((family, entries))))
    (slot,) = book.slots
    book.submitted(slot, done(dg_result("d1", 1.0, ["e1"])))
    ended = []
    Precompiler.end_idle(NS(book=book, barrier=barrier, _end_pool=lambda: ended.append(True),
                            _announce=lambda: None))
    assert told == [("deep_gemm", {"e1"})] and ended == [True]


def test_a_rank_pool_worker_launches_on_its_rank_gpu(monkeypatch):
    """The pool of a tensor-parallel rank on cuda:1: its workers' current device is cuda:1 (a fresh
    process starts on cuda:0, where DeepGEMM then launched over GPU 1's memory on the H100 pair);
    a worker without torch (offline Triton) stays without it."""
    import sys
    import types

    from executor.precompile.workers import device as worker_device

    calls = []
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(set_device=calls.append))
    monkeypatch.setitem(sys.modules, "torch", fake)
    worker_device.use_device("cuda:1")
    worker_device.use_device("cuda")     # no index: the current device is the one meant
    worker_device.use_device("cpu")
    assert calls == [1]
    monkeypatch.delitem(sys.modules, "torch")
    worker_device.use_device("cuda:1")   # torch not imported: nothing imported for it
    assert "torch" not in sys.modules and calls == [1]


def test_the_worker_initializer_sets_the_device_for_its_backends(monkeypatch):
    import sys
    import types

    from executor.precompile.workers import worker

    calls = []
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(set_device=calls.append))
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(worker, "_WORKER", None)
    monkeypatch.setattr(worker, "apply_setup", lambda setup: None)  # this process's environment stays
    monkeypatch.setattr(worker.signal, "signal", lambda *a: None)    # and its Ctrl-C
    worker.init_worker({}, "cuda:1", "off", NS(), {"env": {}, "capability": None})
    assert calls == [1, 1] and "device" not in worker._WORKER["errors"]


def test_the_engine_device_reaches_the_kernels_by_argument_not_the_environment(tmp_path, monkeypatch):
    """Issue 26 item 4: the tables of the engine's device (an H100 engine run on an H200 reads the
    H100 tables) reach every backend, the pool's included, through Options; nothing is put in the
    environment, so nothing outlives a run."""
    import os

    from executor.backends.base import BaseBackend
    from executor.context import Options
    from executor.kernels import configs
    from executor.run import with_engine_tables

    from planner.engine.config import load_engine

    engine = load_engine("llama-3.1-8b-fp8-h100").facts
    options = with_engine_tables(Options(), engine)
    assert options.table_device == "H100" and Options().table_device is None
    h200 = engine._replace(device=engine.device._replace(name="H200"))
    assert with_engine_tables(options, h200).table_device == "H100"  # the caller's stays
    assert with_engine_tables(Options(), None).table_device is None
    assert BaseBackend("cuda:1", options).table_device == "H100"
    assert configs.device_name("cuda:1", "H100") == "H100"  # no torch, no GPU asked
    monkeypatch.setenv("WARMUP_KERNEL_CONFIG_DIR", str(tmp_path))
    (tmp_path / "fp8_gemm,N=256,K=512,device=H100.json").write_text('{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, '
                                                                    '"BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, '
                                                                    '"num_warps": 4, "num_stages": 3}}')
    configs.clear_table_cache()
    assert configs.lookup_table("fp8_gemm", 256, 512, "cuda:1", "H100") is not None
    configs.clear_table_cache()
    assert not any(k.startswith("WARMUP_TABLE") for k in os.environ)


def test_a_flashinfer_module_a_worker_builds_counts_as_compiled(monkeypatch):
    """The pool's counts hold FlashInfer's JIT module builds (on the H100 its 90 s nvcc build of
    fp8_blockscale_gemm_90 was a job that said 0 compiled): one per module built, none for a load."""
    from executor.jit_monitor import Monitor
    from executor.precompile.jobs.job import Job
    from executor.precompile.workers import worker

    monitor = Monitor("warn")

    class Builds:
        def kernel(self, step, values, tick):
            for built in values:
                if built:
                    monitor.count("flashinfer_jit", kernel="sampling")

        def synchronize(self):
            pass

        def release(self, step):
            pass

    monkeypatch.setattr(worker, "_WORKER", {"backends": {"flashinfer_jit": Builds()}, "errors": {},
                                            "monitor": monitor, "device": "cpu", "pid": 0, "target": None})
    step = NS(family="kernel", id="flashinfer_jit/flashinfer_jit")
    job = Job("k", ["k"], "flashinfer_jit", "kernel", step.id, 0, step, [True])
    assert (worker.run_job(job).status, worker.run_job(job).compiled) == ("ok", 1)
    assert worker.run_job(Job("k", ["k"], "flashinfer_jit", "kernel", step.id, 0, step, [False])).compiled == 0
