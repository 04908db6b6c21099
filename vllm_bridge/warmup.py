"""The plan-driven warmup inside one vLLM worker (vllm_bridge.plugin patches the worker to call it).

Per worker, in the order vLLM calls the three patched methods:

- ``load_model`` (``start``): the engine config from the live VllmConfig, the plan (a stale
  saved plan refused), the JIT monitor installed, and the precompile pool started before the
  weights load: one job per distinct compile key of the plan (DeepGEMM on vLLM's own DeepGEMM,
  into vLLM's cache; vLLM's own Triton kernels the plan warms), in as many worker processes as
  the machine and the key count allow (WARMUP_JOBS overrides);
- ``determine_available_memory`` (``finish_device_lane``): no global barrier. vLLM's memory
  profile counts every GPU byte in use when it measures, the workers' CUDA contexts included: so
  the pool's device lane (DeepGEMM, vLLM's Triton sampler launched for real) is finished and its
  processes gone once vLLM's profile run returns, before the measurement (at most
  WARMUP_PRECOMPILE_TIMEOUT seconds of waiting). The profile run itself (torch.compile first)
  runs beside the pool. The compile lane (executor/precompile/workers/lanes.py: no CUDA context) goes on
  through the KV allocation and the capture; a kernel of it is waited for only where it is first
  needed (a plan step's own jobs; vLLM's own FlashInfer call on FlashInfer's file lock), and what
  is left of it is ended WARMUP_PRECOMPILE_TIMEOUT seconds later (its kernels then compile where
  needed). A lane that fails or times out is one line in vLLM's log, and vLLM's own warmup then
  runs as it would without the plugin (WARMUP_STRICT=1: the worker stops instead);
- ``compile_or_warm_up_model`` (``warm_up``): vLLM's own method with the plan in place of what the
  plan models (``redirected``): vLLM's kernel_warmup runs with its serial DeepGEMM sweep off, then
  the plan's steps run through the executor (``plugin_plan``: each DeepGEMM shape at one call per
  compile key, loading what the pool compiled; the synthetic batches and the CUDA-graph capture on
  vLLM's model runner; the kernels vLLM leaves cold); vLLM's ``warmup_kernels`` is skipped (the
  plan ran its batches) and ``capture_model`` answers the bytes of the plan's capture. The monitor
  is sealed at the end: a compile it logs from then on happened after ready.

What the plugin runs differs from the plan in how, never in what: its compile keys are the
plan's (``plugin_plan``; tests/test_vllm_plugin_cpu.py checks it on every shipped engine). It sets
no VLLM_* variable (they feed vLLM's torch.compile cache key); vLLM's DeepGEMM sweep is skipped by
swapping the function in kernel_warmup's module for the duration of the call.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
from typing import NamedTuple

from planner.api import check_fresh, expand, load_engine, load_target, source_plan
from planner.errors import PlanError, one_line
from planner.plan.steps import Autotune, GemmLike
from planner.words import count

from . import phases as ph
from .flashinfer_waits import FlashInferWaits, prebuilt_line
from .releases import Release

log = logging.getLogger("vllm.warmup_planner")  # under vLLM's logger: its handler, level and format

DEEP_GEMM_BACKEND = "deep_gemm_vllm"   # vllm_bridge.deep_gemm: DeepGEMM as vLLM imports it
FLASHINFER_JIT = "flashinfer_jit"      # FlashInfer's JIT modules, built by the pool's compile lane
VLLM_RUNS = (Autotune,)  # steps vLLM's own kernel_warmup runs (FlashInfer tunes through the model)
DEFAULT_TIMEOUT_S = 300.0
TRUE, FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


class PluginError(RuntimeError):
    """A one-line reason the worker does not start with the warmup the user asked for."""


class Settings(NamedTuple):
    """What the user set (README, "vLLM plugin")."""

    plan: str | None               # WARMUP_PLAN: built-in plan name or path (unset: the plugin is inert)
    report: str | None = None      # WARMUP_PLAN_REPORT: the executor's JSON report (rank suffix added)
    jit_log: str | None = None     # WARMUP_JIT_LOG: JSONL of compiles after ready (rank suffix added)
    engine: str | None = None      # WARMUP_ENGINE: an engine config to use instead of deriving one
    jobs: int | None = None        # WARMUP_JOBS: precompile worker processes (unset: the machine's
    #                                cores, at most one per key; 0 or 1: none, the plan compiles serially)
    strict: bool = False           # WARMUP_STRICT: a failed precompile stops the worker (else vLLM's warmup)
    timeout_s: float = DEFAULT_TIMEOUT_S  # WARMUP_PRECOMPILE_TIMEOUT: longest wait for the pool
    bundle: str | None = None      # WARMUP_BUNDLE: a start-up bundle installed before vLLM compiles
    bundle_out: str | None = None  # WARMUP_BUNDLE_OUT: the start-up's caches packed there once ready

    @classmethod
    def from_env(cls, environ=os.environ) -> "Settings":
        return cls(environ.get("WARMUP_PLAN") or None, environ.get("WARMUP_PLAN_REPORT") or None,
                   environ.get("WARMUP_JIT_LOG") or None, environ.get("WARMUP_ENGINE") or None,
                   _jobs(environ.get("WARMUP_JOBS", "")), _flag(environ, "WARMUP_STRICT"),
                   _seconds(environ.get("WARMUP_PRECOMPILE_TIMEOUT", "")),
                   environ.get("WARMUP_BUNDLE") or None, environ.get("WARMUP_BUNDLE_OUT") or None)

    @property
    def active(self) -> bool:
        """Whether the plugin patches vLLM: a plan, a bundle to install or one to build."""
        return bool(self.plan or self.bundle or self.bundle_out)


def _jobs(text: str) -> int | None:
    if not text.strip():
        return None
    if not text.strip().isdigit():
        raise PluginError(f"warmup-planner: WARMUP_JOBS must be a whole number, got {text!r}")
    return int(text)


def _flag(environ, name: str) -> bool:
    value = environ.get(name, "").strip().lower()
    if value not in TRUE + FALSE:
        raise PluginError(f"warmup-planner: {name} must be 1 or 0, got {environ[name]!r}")
    return value in TRUE


def _seconds(text: str) -> float:
    if not text.strip():
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise PluginError(f"warmup-planner: WARMUP_PRECOMPILE_TIMEOUT must be a positive number of seconds, "
                          f"got {text!r}")
    return value


def derive_engine(vllm_config, settings: Settings):
    """The engine config of this worker: `warmup engine --from-vllm`'s own function on the live
    VllmConfig, or the engine config WARMUP_ENGINE names."""
    if settings.engine:
        return load_engine(settings.engine)
    from .engine import engine_from_vllm_config  # imports nothing of vLLM's: reads the live config

    return engine_from_vllm_config(vllm_config)


def make_plan(settings: Settings, engine):
    """The expanded plan to run: WARMUP_PLAN expanded for `engine`, or a saved plan checked fresh."""
    target = load_target(settings.plan, engine_hint="WARMUP_PLAN names a plan, not an engine config")
    if target.expanded is None:
        return expand(target.plan, engine)
    plan = source_plan(target.expanded, None, file=target.path)
    check_fresh(target.expanded, engine, plan, file=target.path)
    return target.expanded


def with_rank(path: str | None, rank: int) -> str | None:
    """One file per worker: rank 0 keeps the name, rank r writes NAME.rankR.EXT."""
    if path is None or rank == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


# --- what the plugin runs: the plan's keys, its own way -------------------------------------------------

def plugin_plan(expanded):
    """The plan as this worker runs it: the steps vLLM's kernel_warmup does not run itself, each
    DeepGEMM step on vLLM's DeepGEMM. The calls are the plan's own: the pool compiles each
    compile key once (at its first M), and the main process then makes every planned call, which
    loads (bench/RESULTS.md part S: the full sweep of cached kernels takes about a second). A
    kernel the dispatch model did not predict is then compiled during the warmup, counted in the
    stage, never first met after ready (Qwen3-30B-A3B on the V1 runner met two that way)."""
    return expanded._replace(steps=tuple(_on_vllms_deep_gemm(s) for s in expanded.steps
                                         if not isinstance(s, VLLM_RUNS)))


def _on_vllms_deep_gemm(step):
    if isinstance(step, GemmLike) and step.backend == "deep_gemm":
        return step.replace(backend=DEEP_GEMM_BACKEND)
    return step


def compile_keys(expanded) -> set[str]:
    """Every compile key the plan's steps name."""
    return {key for step in expanded.steps for key in getattr(step, "compile_keys", ())}


def precompile_jobs(settings: Settings, local_ranks: int = 1) -> int:
    """Worker processes for this rank's pool: WARMUP_JOBS, else the machine's cores shared by the
    node's ranks (each rank, a daemon process in vLLM's tensor parallelism, starts its own pool:
    executor/precompile/workers/processes.py; the pool takes at most one per job)."""
    from executor.precompile import default_jobs

    if settings.jobs is not None:
        return settings.jobs
    return max(1, default_jobs() // max(1, local_ranks))


def local_ranks(vllm_config) -> int:
    """vLLM's ranks on this node (ParallelConfig.local_world_size; 1 where it cannot tell)."""
    try:
        return max(1, int(vllm_config.parallel_config.local_world_size))
    except Exception:  # noqa: BLE001 - a stand-in config, or a release without it
        return 1


def options_for(worker, release: Release, jobs: int):
    """The executor's options inside a vLLM worker: vLLM's DeepGEMM and vLLM's own Triton kernels
    (their settings reach the precompile workers through the constructor), the monitor the plugin
    installed, steps failing on their own (the server starts)."""
    from executor.context import Options

    from .deep_gemm import release_settings

    device = str(getattr(worker, "device", "cuda"))
    staging = _triton_staging()
    return Options(on_error="continue", jit_monitor="warn", runner="reference", device=device, jobs=jobs,
                   precompile_backends=(DEEP_GEMM_BACKEND, "vllm_triton", "triton", FLASHINFER_JIT),
                   backend_settings={DEEP_GEMM_BACKEND: release_settings(release),
                                     "vllm_triton": {"module": release.sampler_module, "staging": staging}},
                   worker_env=_worker_env(staging))


def _worker_env(staging: str | None) -> dict:
    """The precompile workers' own environment: their Triton cache, and vLLM's logging quiet (each
    worker imports vLLM's DeepGEMM helpers, which log at INFO into the server's log)."""
    env = {"VLLM_LOGGING_LEVEL": "WARNING"}
    if staging:
        env["TRITON_CACHE_DIR"] = staging
    return env


def _triton_staging() -> str | None:
    """Where the pool's workers write vLLM's Triton kernels: the directory the user chose for
    Triton, else one under vLLM's cache root (vllm_bridge.triton copies them into the directory
    vLLM's process reads once Inductor has chosen it). None outside vLLM (tests)."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return os.environ["TRITON_CACHE_DIR"]
    try:
        import vllm.envs as envs
    except ImportError:
        return None
    return os.path.join(envs.VLLM_CACHE_ROOT, "warmup_planner", "triton")


def use_vllm_deep_gemm_cache() -> str:
    """DG_JIT_CACHE_DIR as vLLM sets it (vllm/utils/deep_gemm.py: $VLLM_CACHE_ROOT/deep_gemm unless
    set), early: the precompile workers and the JIT monitor read it before vLLM imports DeepGEMM."""
    import vllm.envs as envs

    return os.environ.setdefault("DG_JIT_CACHE_DIR", os.path.join(envs.VLLM_CACHE_ROOT, "deep_gemm"))


@contextlib.contextmanager
def swapped(owner, name: str, value):
    """`owner.name` is `value` inside, and what it was after (also when the body fails)."""
    had = name in vars(owner)
    before = vars(owner).get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if had:
            setattr(owner, name, before)
        else:
            delattr(owner, name)


# --- one worker ------------------------------------------------------------------------------------------

class WorkerWarmup:
    """One worker's plan: made before the weights load, its pool finished before vLLM's memory
    profile, run inside vLLM's compile_or_warm_up_model (see the module docstring)."""

    def __init__(self, worker, release: Release, settings: Settings, engine, expanded):
        from executor.jit_monitor import Monitor

        self.worker, self.release, self.settings = worker, release, settings
        self.engine, self.expanded = engine, expanded
        self.rank = int(getattr(worker, "rank", 0) or 0)
        self.options = options_for(worker, release, 0)
        self.monitor = Monitor("warn", with_rank(settings.jit_log, self.rank))
        self.phases = ph.Phases(self.monitor)
        self.precompiler = None
        self.fallback: str | None = None   # why vLLM's own warmup runs instead of the plan
        self.waited_s: float | None = None  # the device lane's barrier: vLLM's wait after its profile run
        self.runner = None
        self.report = None
        self.flashinfer_waits = FlashInferWaits()

    @classmethod
    def prepare(cls, worker, release: Release, settings: Settings) -> "WorkerWarmup":
        """Engine, plan and freshness, before anything slow: a stale plan stops the worker in one line."""
        try:
            engine = derive_engine(worker.vllm_config, settings)
            expanded = make_plan(settings, engine)
        except PlanError as e:
            raise PluginError(f"warmup-planner: {one_line(e)}") from None
        use_vllm_deep_gemm_cache()
        return cls(worker, release, settings, engine, expanded)

    def in_worker_plan(self):
        return plugin_plan(self.expanded)

    # --- load_model: the pool starts ---

    def start(self) -> None:
        """Install the monitor and start the pool, before vLLM loads the weights (they need none)."""
        self.monitor.install()
        jobs = precompile_jobs(self.settings, local_ranks(self.worker.vllm_config))
        if jobs > 1:
            self._start_pool(jobs)
        # After the pool's start, not before it: FlashInfer's import takes seconds.
        if any(getattr(step, "backend", None) == FLASHINFER_JIT for step in self.expanded.steps):
            self.flashinfer_waits.install()  # vLLM's own first calls may wait for the pool's builds
        p = self.precompiler.summary() if self.precompiler else {"status": "off", "reason": f"{jobs} jobs"}
        log.info("warmup-planner: plan %s for engine %s, %d steps; precompile: %s", self.expanded.plan,
                 self.expanded.engine, len(self.expanded.steps),
                 f"{p['jobs']} jobs on {p['workers']} worker processes" if p["status"] == "ran"
                 else f"{p['status']} ({p['reason']})")
        families = [gap["family"] for gap in self.expanded.not_modelled]
        if families:
            log.info("warmup-planner: not in the plan (vLLM's own warmup, or nothing, covers them): %s",
                     "; ".join(families))

    def _start_pool(self, jobs: int) -> None:
        from executor.run import start_precompile

        self.options = options_for(self.worker, self.release, jobs)
        try:
            # The monitor: the pool's DeepGEMM kernels are not this process's compiles.
            # A key another process (a rank) held and lost is taken over: one line of vLLM's log.
            self.precompiler = start_precompile(self.in_worker_plan(), self.engine.facts, self.options,
                                                monitor=self.monitor, note=self._note)
        except Exception as e:  # noqa: BLE001 - an optimisation: vLLM's warmup is the fallback
            self._give_up(f"the precompile pool did not start ({type(e).__name__}: {one_line(e)})")

    def check_live_kernels(self) -> str | None:
        """After the weights load: the live layers' block-FP8 kernels and shapes against the engine
        config's (the plan's DeepGEMM steps follow them); a difference is one warning line, returned.
        A shape the engine lacks (a router gate the checkpoint left in FP8, say) joins the engine and
        the plan is made again (_replan_with), so its kernels compile before ready."""
        from .engine import kernel_counts, kernels_mismatch, live_block_fp8_linears, shapes_mismatch

        model = getattr(getattr(self.worker, "model_runner", None), "model", None)
        if model is None or not hasattr(model, "modules"):
            return None
        try:
            live = live_block_fp8_linears(model)
            why = kernels_mismatch(self.engine.facts, kernel_counts(live))
            if not why:
                why = shapes_mismatch(self.engine.facts, live)
                why = why and self._replan_with(live, why)
        except Exception as e:  # noqa: BLE001 - a check: the server starts either way
            why = f"the live layers' kernels could not be read ({type(e).__name__}: {one_line(e)})"
        if why:
            log.warning("warmup-planner: %s", why)
        return why

    def _replan_with(self, live: dict, why: str) -> str:
        """The plan made again for the engine plus the live shapes it lacked, so that their kernels
        compile before ready (in vLLM's process, at the plan's run: the pool has its jobs already);
        a saved expanded plan is kept as it is (made for the engine it names). Returns the line."""
        from .engine import with_live_linears

        try:
            engine = with_live_linears(self.engine, live)
            expanded = make_plan(self.settings, engine) if engine is not None else None
        except PlanError as e:
            return f"{why}; the plan stays as it was ({one_line(e)})"
        if expanded is None:
            return why
        before = {step.id for step in self.expanded.steps}
        added = [step.id for step in expanded.steps if step.id not in before]
        self.engine, self.expanded = engine, expanded
        if not added:
            return f"{why}; the plan, made again with them, warms none of them (nor does the vLLM it mirrors)"
        return (f"{why}; the plan is made again with them: {count(len(added), 'step')} more ({', '.join(added)}), "
                "run before ready in vLLM's process")

    def _note(self, line: str) -> None:
        log.warning("warmup-planner: rank %d: %s", self.rank, line)

    # --- determine_available_memory: the device lane's barrier, after vLLM's profile run ---

    def then_finish_device_lane(self, profile_run):
        """vLLM's profile_run, then the pool's device lane finished (finish_device_lane)."""
        def profile_then_finish(*args, **kwargs):
            try:
                result = profile_run(*args, **kwargs)
            except BaseException:
                self.abandon("not needed: vLLM's profile run failed")  # the worker is going down
                raise
            self.finish_device_lane()
            return result
        return profile_then_finish

    def finish_device_lane(self) -> None:
        """Wait (bounded) for the jobs that hold a CUDA context and end their processes, so that
        vLLM's memory measurement counts none of theirs; the CUDA-free lane goes on, bounded too.
        On failure: fall back to vLLM's own warmup, or stop (strict)."""
        pre = self.precompiler
        if pre is None or not pre.running:
            return
        why = pre.finish_device_lane(self.settings.timeout_s)
        lane = pre.device_lane_wait
        self.waited_s = lane.get("waited_s")
        if why is None:
            log.info("warmup-planner: %s", device_lane_line(lane, self.rank))
            return
        self._give_up(f"the precompile pool {why}")

    def abandon(self, why: str) -> None:
        """vLLM's worker failed before the barrier: end the pool now (its processes hold GPU memory
        and would keep the dying process waiting for their jobs at exit)."""
        if self.precompiler is not None and self.precompiler.running:
            self.precompiler.cancel(why)

    def _give_up(self, why: str) -> None:
        if self.settings.strict:
            raise PluginError(f"warmup-planner: {why} (WARMUP_STRICT=1)")
        self.fallback = why
        log.warning("warmup-planner: %s; vLLM's own warmup will run instead", why)

    # --- compile_or_warm_up_model: the plan ---

    def warm_up(self, original):
        """vLLM's compile_or_warm_up_model with the plan in place of what it models; returns its value."""
        self.monitor.install()  # already, unless load_model was not ours to wrap
        try:
            result = self._run_vllm_method(original)
        except BaseException:
            self.phases.end()
            self.monitor.uninstall()  # the worker does not start: nothing to watch
            self.flashinfer_waits.uninstall()
            raise
        self.monitor.seal()  # stays installed: what compiles from here on is logged as after ready
        self._finish_report()
        return result

    def _run_vllm_method(self, original):
        if self.fallback:
            with self.phases.phase("warmup (vLLM's own, the plugin's fallback)"):
                return original()
        self.phases.begin("warmup before the plan")
        with self.redirected():
            result = original()
        self.phases.end()
        return result

    @contextlib.contextmanager
    def redirected(self):
        """vLLM's names that the plan replaces, swapped for the duration of one warmup."""
        module = importlib.import_module(self.release.worker_module)
        model_runner = self.worker.model_runner
        capture = getattr(model_runner, self.release.capture_method)
        with contextlib.ExitStack() as stack:
            plan_hook = self._plan_then_vllm(getattr(module, self.release.plan_hook))
            stack.enter_context(swapped(module, self.release.plan_hook, plan_hook))
            stack.enter_context(swapped(module, self.release.batches_hook, self._ran_by_plan))
            stack.enter_context(swapped(model_runner, self.release.capture_method, self._captured(capture)))
            yield

    def _plan_then_vllm(self, kernel_warmup):
        def plan_then_vllm(worker, *args, **kwargs):
            with self._modelled_off():
                kernel_warmup(worker, *args, **kwargs)
            self.phases.end()
            self.run_plan()
            self.phases.begin("warmup after the plan")
        return plan_then_vllm

    @contextlib.contextmanager
    def _modelled_off(self):
        """Inside vLLM's kernel_warmup, what the plan runs itself does nothing."""
        module = importlib.import_module(self.release.kernel_warmup_module)
        with contextlib.ExitStack() as stack:
            for name in self.release.modelled_in_kernel_warmup:
                stack.enter_context(swapped(module, name, lambda *a, **k: None))
            yield

    def _ran_by_plan(self, *args, **kwargs) -> None:
        log.info("warmup-planner: vLLM's %s skipped: the plan ran its batches", self.release.batches_hook)

    def _captured(self, capture):
        """capture_model as vLLM calls it after the plan: the plan's capture's bytes (vLLM logs them);
        the plan's own call, or a plan that captured nothing, reaches vLLM's capture_model."""
        def captured(*args, **kwargs):
            if self.runner is not None and self.runner.cudagraph_memory_bytes is not None:
                return self.runner.cudagraph_memory_bytes
            return capture(*args, **kwargs)
        return captured

    def run_plan(self) -> None:
        from executor.report import Report
        from executor.run import execute

        from .runner import VllmWorkerRunner

        plan = self.in_worker_plan()
        self._install_pool_triton_files()
        self.runner = VllmWorkerRunner(self.worker, plan.steps)
        self.report = Report(plan, self.options.public())
        progress = LogProgress(self.report, ph.step_kernels(plan.steps))
        self.report = execute(plan, self.engine.facts, self.options, progress=progress,
                              report=self.report, runner=self.runner, precompiler=self.precompiler,
                              monitor=self.monitor)
        for record in self.report.steps:
            if record.status == "failed":
                log.warning("warmup-planner: step %s failed: %s", record.id, record.error)

    def _install_pool_triton_files(self) -> None:
        """The pool's Triton files into the directory Triton reads now (Inductor has chosen it by
        this point), before the first stage: the synthetic batches' sampling launches a variant
        of the sampler kernel too (the first H100 run compiled it there, ahead of its own stage)."""
        staging = (self.options.backend_settings.get("vllm_triton") or {}).get("staging")
        if not staging or self.precompiler is None:
            return
        from executor.triton_cache import install_entries

        try:
            installed = install_entries(staging)
        except Exception as e:  # noqa: BLE001 - the launches then compile: slower, still correct
            log.warning("warmup-planner: the pool's Triton files were not installed: %s", one_line(e))
            return
        if installed:
            log.info("warmup-planner: %d Triton kernels of the pool installed where vLLM's Triton reads them",
                     installed)

    # --- the report and the summary line ---

    def _finish_report(self) -> None:
        from executor.registry import writes_deep_gemm
        from executor.report import Report

        if self.report is None:  # the fallback: no plan ran
            self.report = Report(self.in_worker_plan(), self.options.public())
            self.report.precompile = self.precompiler.summary() if self.precompiler else None
            self.report.finished = time.time()
        stages = ph.stage_rows(self.report.steps, writes_deep_gemm, ph.step_kernels(self.in_worker_plan().steps))
        self.flashinfer_waits.uninstall()
        self.report.host = {"engine": "vllm", "rank": self.rank, "fallback": self.fallback,
                            "precompile_wait_s": self.waited_s, "phases": self.phases.rows, "stages": stages,
                            "flashinfer_waits": list(self.flashinfer_waits.waits),
                            "after_ready_jsonl": self.monitor.jsonl_path}
        log.info(summary_line(self.expanded.plan, stages, self.phases.rows, self.report.precompile, self.fallback,
                              self.rank))
        for line in (self.flashinfer_waits.line(), prebuilt_line((self.report.precompile or {}).get("records") or [])):
            if line:
                log.info("warmup-planner: %s", line)
        self._write_report()

    def amend_report(self, key: str, value) -> None:
        """What was learnt after the report was written (the bundle's use), into its host part."""
        if self.report is not None:
            self.report.host = {**(self.report.host or {}), key: value}
            self._write_report()

    def _write_report(self) -> None:
        if self.settings.report:
            try:
                self.report.write(with_rank(self.settings.report, self.rank))
            except OSError as e:
                log.warning("warmup-planner: cannot write the report: %s", one_line(e))


def device_lane_line(lane: dict, rank: int = 0) -> str:
    """What the device lane's barrier cost vLLM, and what went on past it (the CUDA-free lane)."""
    running = lane.get("still_running") or []
    line = (f"precompile (rank {rank}): vLLM waited {lane.get('waited_s') or 0.0:.1f} s after its profile run "
            "for the jobs that hold a CUDA context, now ended")
    if running:
        line += (f"; still running in CUDA-free workers ({len(running)}): {', '.join(running[:4])}"
                 f"{' ...' if len(running) > 4 else ''}")
    return line


def _pool_line(p: dict, rank: int = 0) -> str:
    """The pool of one rank: its jobs, and of the keys the node's ranks share through one cache (the
    claims: executor/precompile/claims/) those this rank compiled, those it waited for or loaded
    (another process compiled them), and the node's total: each key once."""
    line = (f"precompile (rank {rank}): {p.get('ok', 0)} of {p['jobs']} jobs done on {p['workers']} workers in "
            f"{p.get('wall_s') or 0.0:.1f} s, {p.get('compiled') or 0} kernels compiled")
    c = p.get("claims")
    if c:
        line += (f"; keys: {c['compiled']} compiled by this rank, {c['waited']} waited for, {c['loaded']} loaded, "
                 f"{c['node_keys']} on the node by {c['node_processes']} processes")
        line += f", {len(c['taken_over'])} taken over" if c.get("taken_over") else ""
    return line


def summary_line(plan: str, stages: list, phases: list, precompile: dict | None, fallback: str | None,
                 rank: int = 0) -> str:
    """The one line vLLM's log gets at the end: what the plan ran, what the pool did, what each of
    vLLM's phases compiled (counts add up: each compile is counted in one row)."""
    if fallback:
        return f"warmup-planner: {fallback}; vLLM's own warmup ran"
    total = {}
    for row in stages:
        ph.add_counts(total, row)
    text = (f"warmup-planner: plan {plan} ran: {sum(r['steps'] for r in stages)} steps, "
            f"{sum(r['calls'] for r in stages)} calls in {sum(r['wall_s'] for r in stages):.1f} s "
            f"({ph.describe_counts(total)})")
    if precompile and precompile.get("jobs"):
        text += "; " + _pool_line(precompile, rank)
    for row in phases:
        compiled = row["compiled"]
        if any(compiled.values()):
            text += f"; vLLM {row['phase']} compiled " + ", ".join(f"{k} {v}" for k, v in compiled.items() if v)
    return text


class LogProgress:
    """The executor's progress events as lines of vLLM's log: one per stage (calls, compiles and
    loads by kind, the pool's jobs for it, wall time), one per failed step, one for the pool."""

    def __init__(self, report, kernels: dict | None = None):
        self.report, self.kernels = report, kernels

    def stage_start(self, name: str, steps: int, calls: int) -> None:
        pass

    def step_start(self, step) -> None:
        pass

    def tick(self, n: int) -> None:
        pass

    def step_end(self, record) -> None:
        if record.status in ("failed", "unavailable"):
            log.warning("warmup-planner: %s %s: %s", record.status, record.id, record.error or "")

    def stage_end(self, summary: dict) -> None:
        from executor.registry import writes_deep_gemm

        records = [r for r in self.report.steps if r.stage == summary["stage"]]
        for row in ph.stage_rows(records, writes_deep_gemm, self.kernels):
            log.info(ph.stage_line(row))

    def precompile(self, summary: dict) -> None:
        pass  # the barrier logged it

    def message(self, text: str) -> None:
        log.info("warmup-planner: %s", text)
