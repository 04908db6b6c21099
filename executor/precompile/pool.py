"""The precompile pool of one run (``Precompiler``), in the main process.

* The pool (``ProcessPoolExecutor``) starts before the main process imports torch or
  touches CUDA, so that worker start-up overlaps the main process's own; its processes are
  started, and the first jobs submitted, from a background thread (starting the first
  worker waits for the fork server's imports).
* A job is submitted once every ``autotune`` step before its step has run; DeepGEMM jobs go
  first.
* Before each step the main process waits for the jobs of that step's keys only, so
  compiling and loading overlap (the first step that has a job also waits for every
  DeepGEMM job: DeepGEMM is counted by kernels appearing in its cache directory, which would
  otherwise be charged to whatever step runs).
* A job that fails is reported with its error and the main process compiles that variant
  itself (the JIT monitor shows it); a crashed worker fails its jobs, not the run.
* Keys already listed in the manifest (executor.precompile.manifest) get no job; a run whose
  keys are all listed starts no pool.

Nothing here imports torch or triton.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from dataclasses import dataclass, field

from planner.steps import Autotune

from .. import dg_install, registry
from .jobs import PRECOMPILE_BACKENDS, Job, JobResult, compile_jobs, eligible, step_keys
from .manifest import fingerprint, manifest_path, read_manifest, update_manifest
from .worker import (WORKER_CLASSES, _init_worker, _ready, build_cuda_utils, run_job, worker_context,
                     worker_setup)



CANCEL_WAIT_S = 10.0  # how long cancel() waits for a starter thread that is still starting processes
JOIN_S = 5.0         # how long a finished pool's workers get to exit before they are terminated


@dataclass
class _Slot:
    job: Job
    future: object = None
    result: JobResult | None = None
    submitted: float | None = None


@dataclass
class _StepInfo:
    keys: list = field(default_factory=list)   # (backend, key) of the step
    jobs: list = field(default_factory=list)   # slots whose first step is this one


class Precompiler:
    """The precompile phase of one run (see the module docstring); a hook of the executor's
    loop (executor.hooks): before a step it waits for that step's jobs, after it it says what
    the workers did for the step, releases the jobs an autotune step held back, and cancels
    what is queued when a failure stops the run."""

    def __init__(self, steps, options, backend_of, progress=None):
        self.steps = steps
        self.index_of = {s.id: i for i, s in enumerate(steps)}
        self._waited: dict = {}        # step id -> seconds before_step waited for its jobs
        self.options = options
        self.backend_of = backend_of
        self.progress = progress
        self.requested = int(getattr(options, "jobs", 0) or 0)
        self.backends = tuple(getattr(options, "precompile_backends", None) or PRECOMPILE_BACKENDS)
        self.device = str(getattr(options, "device", "cuda"))
        self.status = "off"            # off | skipped | ran | cancelled
        self.reason: str | None = None
        self.manifest = manifest_path()
        self._fp: dict | None = None
        self.keys_planned = 0
        self.keys_in_manifest = 0
        self.slots: list[_Slot] = []
        self.by_key: dict = {}         # (backend, key) -> slot
        self.info: dict = {}           # step id -> _StepInfo
        self.workers = 0
        self.pool = None
        self.ready: list[dict] = []
        self.created: float | None = None   # time.time() of the pool's start
        self.start_s: float | None = None   # seconds the caller spent in start()
        self.spawned_s: float | None = None  # pool start -> every worker process started
        self.close_s: float | None = None   # seconds the caller spent in close()
        self._started = threading.Event()   # set once the starter thread submitted the first jobs
        self._start_error: str | None = None
        self.ready_at: float | None = None
        self.specs: dict = {}               # backend -> (module, class) the workers run
        self.setup: dict | None = None     # what the workers were started with (worker_setup)
        self.utils_s = None                # seconds a worker spent building Triton's CUDA utils (or why not)
        self.finished_at: float | None = None
        self.manifest_written: int | None = None
        self._lock = threading.Lock()
        self._announced = False
        self._dg_barrier_done = False
        self._released = -2
        self.absorb = None                 # callable(dirnames): the main monitor's absorb_deep_gemm
        self._absorbed = False
        self._dg_names: dict = {}          # backend name -> whether it compiles into DeepGEMM's cache
        self.finish_s: float | None = None  # seconds finish() waited for the pool (a caller's barrier)

    # --- start -----------------------------------------------------------------------------

    def start(self) -> "Precompiler":
        """Decide, then start the pool and submit the jobs that need no earlier step."""
        began = time.perf_counter()
        try:
            return self._start()
        finally:
            self.start_s = round(time.perf_counter() - began, 4)

    def _start(self) -> "Precompiler":
        why_not = self._effective_backends()
        for step in self.steps:
            backend = eligible(step, self.backend_of, self.backends)
            if backend is not None:
                self.info[step.id] = _StepInfo(keys=[(backend, k) for k in step_keys(step)])
        planned = {key for info in self.info.values() for key in info.keys}
        self.keys_planned = len(planned)
        if self.requested <= 1:
            return self._skip("off", f"--jobs {self.requested}: variants compile in the main process")
        if not planned:
            return self._skip("off", "; ".join(why_not) or "nothing to precompile (no gemm, grouped_gemm, kernel or "
                                                         f"attention step of {', '.join(self.backends)})")
        have_sets = read_manifest(self.manifest, self.fingerprint())
        have = {(b, k) for b, keys in have_sets.items() for k in keys}
        self.keys_in_manifest = len(planned & have)
        jobs = compile_jobs(self.steps, self.backend_of, self.backends, have)
        if not jobs:
            return self._skip("skipped", f"all {self.keys_planned} compile keys are in the disk cache "
                                         f"(manifest {self.manifest})")
        self.slots = [_Slot(job) for job in jobs]
        for slot in self.slots:
            for key in slot.job.keys:
                self.by_key.setdefault((slot.job.backend, key), slot)
            self.info[slot.job.step_id].jobs.append(slot)
        self.workers = min(self.requested, len(jobs))
        self.status = "ran"
        self._start_pool()
        return self

    def _effective_backends(self) -> list[str]:
        """Drop the backends that cannot compile here (no CUDA device, library missing); say why."""
        why = []
        if not self.device.startswith("cuda"):
            gpu = [b for b in self.backends if _backend_attr(b, "compiles_for_cuda", False)]
            if gpu:
                why.append(f"device {self.device}: {', '.join(gpu)} compile nothing off a CUDA device")
            self.backends = tuple(b for b in self.backends if b not in gpu)
        for backend in list(self.backends):
            missing = _missing_library(backend)
            if missing:
                why.append(f"{backend}: {missing} is not installed")
                self.backends = tuple(b for b in self.backends if b != backend)
        return why

    def _writes_dg(self, backend: str) -> bool:
        """Whether the backend's jobs compile into DeepGEMM's cache (counted by its entries)."""
        if backend not in self._dg_names:
            self._dg_names[backend] = registry.writes_deep_gemm(backend)
        return self._dg_names[backend]

    def _skip(self, status: str, reason: str) -> "Precompiler":
        self.status, self.reason = status, reason
        if status == "skipped":
            self._announce()
        return self

    def fingerprint(self) -> dict:
        if self._fp is None:
            self._fp = fingerprint()
        return self._fp

    def _specs(self) -> dict:
        """The class each worker runs a backend with: its compile-only twin where it has one."""
        names = sorted({s.job.backend for s in self.slots})
        return {name: WORKER_CLASSES.get(name) or registry.backend_spec(name) for name in names
                if name in registry.known_backends()}

    def _start_pool(self) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self.created = time.time()
        mode = getattr(self.options, "jit_monitor", "warn")
        self.specs = specs = self._specs()
        self.setup = worker_setup(self.device, getattr(self.options, "worker_env", None))
        # The offline driver compiles without CUDA, but a backend that launches Triton kernels
        # for real in the workers (vllm_bridge's) needs Triton's own driver there.
        self.setup["real_triton_driver"] = any(_backend_attr(n, "needs_triton_driver", False) for n in specs)
        preload = sorted({m for name in specs for m in _backend_attr(name, "worker_preload", ())})
        self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=worker_context(preload),
                                        initializer=_init_worker,
                                        initargs=(specs, self.device, mode, self.options, self.setup))
        threading.Thread(target=self._spawn, name="warmup-precompile-start", daemon=True).start()

    def _spawn(self) -> None:
        """The starter thread: start every worker (a submit starts a process, and the first
        one waits for the fork server to finish importing), then submit the first jobs."""
        try:
            for _ in range(self.workers):  # one no-op each: every worker starts now, not at its first job
                fut = self.pool.submit(_ready)
                fut.add_done_callback(self._on_ready)
            self.spawned_s = round(time.time() - self.created, 3)
            if (self.setup or {}).get("capability") and "triton" in self.specs:
                self.pool.submit(build_cuda_utils).add_done_callback(self._on_utils)
            self._submit(-1)
        except Exception as e:  # noqa: BLE001 - the jobs left unsubmitted are compiled by the main process
            self._start_error = f"{type(e).__name__}: {e}"
        finally:
            self._started.set()

    def _on_utils(self, fut) -> None:
        try:
            self.utils_s = fut.result()
        except BaseException as e:  # noqa: BLE001 - the main process builds it at its first kernel
            self.utils_s = f"{type(e).__name__}: {e}"

    def _await_start(self, timeout: float | None = None) -> bool:
        """Wait for the starter thread (at most `timeout` s); False if it has not finished."""
        if self.pool is not None:
            return self._started.wait(timeout)
        return True

    def _on_ready(self, fut) -> None:
        try:
            info = fut.result()
        except BaseException as e:  # noqa: BLE001
            info = {"error": f"{type(e).__name__}: {e}", "time": time.time()}
        with self._lock:
            self.ready.append(info)
            if self.ready_at is None:
                self.ready_at = info.get("time") or time.time()

    # --- during the run --------------------------------------------------------------------------

    def release(self, index: int) -> None:
        """Submit the jobs whose last autotune step is at or before `index` (DeepGEMM first)."""
        self._await_start()
        self._submit(index)

    def _submit(self, index: int) -> None:
        if self.pool is None or index <= self._released:
            return
        self._released = index
        todo = [s for s in self.slots if s.future is None and s.job.release <= index]
        todo.sort(key=lambda s: (not self._writes_dg(s.job.backend), s.job.index))
        for slot in todo:
            try:
                slot.future = self.pool.submit(run_job, slot.job)
            except Exception as e:  # noqa: BLE001 - a broken pool: the main process compiles
                slot.result = self._failed(slot, f"not submitted ({type(e).__name__}: {e})")
                continue
            slot.submitted = time.time()
            slot.future.add_done_callback(lambda fut, slot=slot: self._on_done(slot, fut))

    # --- the executor's hooks --------------------------------------------------------------------

    def stage_start(self, stage: str, steps: list) -> None:
        pass

    def before_step(self, step) -> None:
        self._waited[step.id] = self.wait_for(step)

    def after_step(self, step, record) -> None:
        if step.id in self._waited:
            self.annotate(record, self._waited.pop(step.id))
        if record.status == "failed" and getattr(self.options, "on_error", "stop") == "stop":
            self.cancel(f"not needed: step {step.id} failed (--on-error stop)")
        if isinstance(step, Autotune):
            self.release(self.index_of[step.id])
        self._maybe_finish()

    def stage_end(self, stage: str) -> None:
        pass

    def _on_done(self, slot: _Slot, fut) -> None:
        if fut.cancelled():
            result = self._failed(slot, "cancelled", status="cancelled")
        else:
            try:
                result = fut.result()
            except BaseException as e:  # noqa: BLE001 - a crashed worker (BrokenProcessPool)
                result = self._failed(slot, f"{type(e).__name__}: {e}")
        with self._lock:
            if slot.result is None:  # the first word stays (cancel() may have spoken already)
                slot.result = result

    def _failed(self, slot: _Slot, why: str, status: str = "failed") -> JobResult:
        return JobResult.of(slot.job).ended(status, why)

    def wait_for(self, step) -> float:
        """Block until the jobs of this step's keys are done; returns the seconds waited."""
        info = self.info.get(step.id)
        if self.pool is None or info is None:
            return 0.0
        start = time.perf_counter()
        self._await_start()  # the first jobs' futures exist from here
        futures = {self.by_key[k].future for k in info.keys if k in self.by_key}
        if not self._dg_barrier_done and futures:
            self._dg_barrier_done = True
            futures |= {s.future for s in self.slots if self._writes_dg(s.job.backend)}
        futures = {f for f in futures if f is not None and not f.done()}
        if futures:
            from concurrent.futures import wait

            wait(futures)
        for slot in [self.by_key[k] for k in info.keys if k in self.by_key]:
            self._settle(slot)
        self._absorb_deep_gemm()
        waited = time.perf_counter() - start
        self._maybe_finish()
        return waited

    def _settle(self, slot: _Slot) -> None:
        """Done callbacks run on the pool's thread: make sure the result is here."""
        if slot.result is None and slot.future is not None and slot.future.done():
            self._on_done(slot, slot.future)

    def deep_gemm_busy(self) -> bool:
        """Workers may still add DeepGEMM kernels to the shared cache (the main monitor waits)."""
        return any(self._writes_dg(s.job.backend) and s.result is None
                   and not (s.future is not None and s.future.done()) for s in self.slots)

    def deep_gemm_entries(self) -> set:
        """The DeepGEMM cache entries the workers compiled (each once, whichever worker saw it)."""
        return {e for r in self.results() for e in r.deep_gemm_entries}

    def _absorb_deep_gemm(self) -> None:
        """Once every DeepGEMM job is done, count each kernel the pool compiled once, and tell the
        main monitor which they are (they are not the main process's compiles)."""
        if self._absorbed or self.deep_gemm_busy():
            return
        for slot in self.slots:
            self._settle(slot)
        self._absorbed = True
        attribute_deep_gemm([r for r in self.results() if self._writes_dg(r.backend)])
        if self.absorb is not None:
            self.absorb(self.deep_gemm_entries())

    def _maybe_finish(self) -> None:
        if self.pool is None or not self._started.is_set():
            return
        if any(s.future is None and s.result is None for s in self.slots):
            return
        if all(s.future is None or s.future.done() for s in self.slots):
            for slot in self.slots:
                self._settle(slot)
            self._shutdown(wait=False)  # idle workers exit on their own; nobody waits for them
            self._announce()

    def annotate(self, record, waited: float) -> None:
        """Attribute the step's own jobs (those of keys it reaches first) to its record."""
        info = self.info.get(record.id)
        if info is None or self.status != "ran":
            return
        results = [s.result for s in info.jobs if s.result is not None]
        dg = {e for r in results for e in r.deep_gemm_entries}
        record.precompile = {
            "keys": len(info.keys), "jobs": len(info.jobs),
            "compiled": _sum([r.compiled for r in results] + ([len(dg)] if dg else [])),
            "deep_gemm_compiled": len(dg),
            "disk_loads": _sum(r.disk_loads for r in results),
            "compile_s": round(sum(r.wall_s for r in results), 4),
            "failed": sum(r.status != "ok" for r in results),
            "wait_s": round(waited, 4),
        }

    def cancel(self, why: str) -> None:
        """Stop: drop queued jobs, end the workers (a job cut short leaves no partial entry)."""
        if self.pool is None:
            return
        self._await_start(CANCEL_WAIT_S)  # a starter thread stuck in a process start is not waited for
        for slot in self.slots:
            if slot.future is None and slot.result is None:
                slot.result = self._failed(slot, why, status="cancelled")
            elif slot.future is not None and not slot.future.done():
                slot.future.cancel()
        self._shutdown(wait=False, kill=True)
        for slot in self.slots:
            self._settle(slot)
            if slot.result is None:
                slot.result = self._failed(slot, why, status="cancelled")
        if self.status == "ran":
            self.status = "cancelled"
            self.reason = why

    def _shutdown(self, wait: bool, kill: bool = False, join: float | None = None) -> None:
        """End the pool. `kill`: terminate its workers now; `join`: let them exit on their own
        for up to that many seconds, then terminate what is left (either way they are gone)."""
        pool, self.pool = self.pool, None
        if pool is None:
            return
        if self.finished_at is None:
            self.finished_at = time.time()
        processes = list((getattr(pool, "_processes", None) or {}).values())
        try:
            pool.shutdown(wait=wait and not kill and join is None, cancel_futures=True)
        except Exception:  # noqa: BLE001
            pass
        if join is not None:
            _join(processes, join)
        if kill or join is not None:
            _terminate(processes)

    # --- a caller's barrier: the pool done and gone before the caller goes on ------------------------

    def finish(self, timeout: float) -> str | None:
        """Release every job, wait for all of them (at most `timeout` s in all), then end the workers
        and wait for them to exit, so that nothing of the pool (its processes, their CUDA contexts)
        outlives this call. For a caller that runs the plan after the pool, with no tuning step in
        between (a serving engine's start-up: vllm_bridge). Returns None when the pool ran (or had
        nothing to do), else why it failed, in one line: its workers did not start, it timed out
        (its workers are killed), or no job succeeded."""
        if self.pool is None:
            return None
        began = time.perf_counter()
        try:
            return self._finish(began + max(0.0, timeout), timeout)
        finally:
            self.finish_s = round(time.perf_counter() - began, 3)

    def _finish(self, deadline: float, timeout: float) -> str | None:
        from concurrent.futures import wait

        if not self._await_start(max(0.0, deadline - time.perf_counter())):
            self.cancel(f"the workers did not start within {timeout:g} s")
            return self.reason
        self._submit(len(self.steps))
        pending = [s.future for s in self.slots if s.future is not None]
        _, not_done = wait(pending, timeout=max(0.0, deadline - time.perf_counter()))
        if not_done:
            done = sum(f.done() for f in pending)
            self.cancel(f"timed out after {timeout:g} s with {done} of {len(self.slots)} jobs done")
            return self.reason
        for slot in self.slots:
            self._settle(slot)
        self._absorb_deep_gemm()
        self._shutdown(wait=False, join=max(JOIN_S, deadline - time.perf_counter()))
        self._announce()
        results = self.results()
        if results and not any(r.status == "ok" for r in results):
            first = next((r for r in results if r.error), results[0])
            return f"no job succeeded ({first.status}: {first.error})"
        return None

    def close(self, interrupted: bool = False) -> None:
        began = time.perf_counter()
        try:
            self._close(interrupted)
        finally:
            if self.status in ("ran", "cancelled"):
                self.close_s = round((self.close_s or 0.0) + time.perf_counter() - began, 4)

    def _close(self, interrupted: bool) -> None:
        if self.pool is None:
            return
        self._await_start()
        if interrupted:
            self.cancel("interrupted (Ctrl-C)")
            return
        for slot in self.slots:
            if slot.future is None and slot.result is None:  # never released (the run stopped early)
                slot.result = self._failed(slot, "not run: the run ended first", status="cancelled")
        from concurrent.futures import wait

        wait([s.future for s in self.slots if s.future is not None])
        for slot in self.slots:
            self._settle(slot)
        self._absorb_deep_gemm()
        self._shutdown(wait=False)
        self._announce()

    # --- results --------------------------------------------------------------------------------------

    def results(self) -> list[JobResult]:
        return [s.result for s in self.slots if s.result is not None]

    def summary(self) -> dict:
        out = {"status": self.status, "reason": self.reason, "jobs_option": self.requested,
               "workers": self.workers, "jobs": len(self.slots), "keys_planned": self.keys_planned,
               "keys_in_manifest": self.keys_in_manifest, "manifest": self.manifest,
               "manifest_keys_written": self.manifest_written}
        if self.slots:
            out.update(self._timing(), **self._counts())
        return out

    def _timing(self) -> dict:
        """When the pool and its jobs ran, relative to the pool's start, and the speed-up."""
        ran = [r for r in self.results() if r.pid is not None]
        busy = sum(r.wall_s for r in ran)
        first = min((r.start for r in ran), default=None)
        wall = max(max(r.end for r in ran) - first, 1e-9) if ran else 0.0
        return {
            "wall_s": round(wall, 3),
            "busy_s": round(busy, 3),                       # the jobs' own seconds, summed over workers
            "compile_s": round(_sum((r.compile_ms for r in ran), 0.0) / 1000.0, 3),  # Triton's own
            "speedup": round(busy / wall, 2) if ran and wall > 0 else None,
            "created": self.created,                        # time.time() of the pool's start (records are relative)
            "finish_s": self.finish_s,                      # a caller's barrier: finish()'s wait
            "start_s": self.start_s,                        # the caller's time in start()
            "spawned_s": self.spawned_s,                    # pool start -> every worker process started
            "close_s": self.close_s,                        # the caller's time in close()
            "start_error": self._start_error,
            "first_worker_ready_s": (round(self.ready_at - self.created, 3)
                                     if self.ready_at and self.created else None),
            "first_job_s": round(first - self.created, 3) if first is not None and self.created else None,
            "worker_init_s": sorted(i["init_s"] for i in self.ready if i.get("init_s") is not None),
            "target": (self.setup or {}).get("capability"),  # compiled for cuda:<this> without CUDA; None: CUDA asked
            "cuda_utils_s": self.utils_s,
        }

    def _counts(self) -> dict:
        """What the jobs compiled and loaded, their statuses, and each job's record."""
        results = self.results()
        dg = self.deep_gemm_entries()
        dg_loads = _sum(r.deep_gemm_loads for r in results)
        # DeepGEMM kernels count with Triton's: compiled is every variant compiled, loaded every one
        # read from a disk cache (DeepGEMM loads only where its layout records them: 2.8).
        out = {"compiled": _sum([r.compiled for r in results] + ([len(dg)] if dg else [])),
               "disk_loads": _sum([r.disk_loads for r in results] + [dg_loads]),
               "deep_gemm_jit": len(dg) if any(self._writes_dg(r.backend) for r in results) else None,
               "deep_gemm_loads": dg_loads}
        for status in ("ok", "failed", "unavailable", "cancelled"):
            out[status] = sum(r.status == status for r in results)
        out["records"] = [r.public(self.created) for r in results]
        return out

    def _announce(self) -> None:
        if self._announced or self.progress is None:
            return
        self._announced = True
        self.progress.precompile(self.summary())

    # --- the manifest --------------------------------------------------------------------------------

    def write_manifest(self, records: list) -> None:
        """Record the keys now in the disk cache: ok jobs, and ok steps run by their planned backend."""
        add: dict = {}
        for result in self.results():
            if result.status == "ok":
                add.setdefault(result.backend, set()).update(result.keys)
        steps = {s.id: s for s in self.steps}
        for record in records:
            info = self.info.get(record.id)
            step = steps.get(record.id)
            if info is None or step is None or record.status != "ok":
                continue
            if record.backend != getattr(step, "backend", None) or record.backend not in self.backends:
                continue
            for backend, key in info.keys:
                add.setdefault(backend, set()).add(key)
        if not any(add.values()):
            return
        try:
            self.manifest_written = update_manifest(self.manifest, add, self.fingerprint())
        except OSError:
            self.manifest_written = None


def attribute_deep_gemm(results: list) -> None:
    """One job per DeepGEMM kernel. The workers share one cache, so a job's monitor also sees the
    kernels its neighbours compiled while it ran (16 workers made 58 jobs report 133 kernels of 60);
    each kernel goes to the earliest-ending job that saw it: its compiler, whose job ends right
    after the kernel lands (a neighbour would have to end within that moment to take it)."""
    owner: dict = {}
    for result in sorted(results, key=lambda r: (r.end or 0.0, r.key)):
        for entry in result.deep_gemm_entries:
            owner.setdefault(entry, result)
    for result in results:
        result.deep_gemm_entries = [e for e in result.deep_gemm_entries if owner[e] is result]
        if result.deep_gemm_jit is not None:
            result.deep_gemm_jit = len(result.deep_gemm_entries)


def _join(processes, seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    for proc in processes:
        try:
            proc.join(max(0.0, deadline - time.perf_counter()))
        except Exception:  # noqa: BLE001
            pass


def _terminate(processes) -> None:
    """Terminate this pool's own workers that are still alive (by their handles), and reap them."""
    for proc in processes:
        try:
            if proc.is_alive():
                proc.terminate()
        except Exception:  # noqa: BLE001
            pass
    _join(processes, JOIN_S)


def _backend_attr(name: str, attr: str, default):
    """A class attribute of a registered backend (its default when the backend is unknown)."""
    try:
        return getattr(registry.load_backend(name), attr, default)
    except Exception:  # noqa: BLE001 - unknown or broken: the jobs will say it
        return default


def _missing_library(backend: str) -> str | None:
    """The first library a backend's workers need that is not installed (None: all there)."""
    if backend == "triton" and importlib.util.find_spec("triton") is None:
        return "triton"
    if backend == "deep_gemm":
        if importlib.util.find_spec("torch") is None:
            return "torch"
        if dg_install.find_install() is None:
            return "deep_gemm"
    return None


def _sum(values, empty=None):
    values = [v for v in values if v is not None]
    return sum(values) if values else empty
