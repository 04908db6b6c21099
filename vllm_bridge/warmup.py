"""The plan-driven warmup inside one vLLM worker (vllm_bridge.plugin patches the worker to call it).

Per worker: ``prepare`` (before the weights load) derives the engine config from the live
VllmConfig, expands the plan, refuses a stale saved plan and starts the precompile pool;
``redirected`` wraps vLLM's own compile_or_warm_up_model so that the parts the plan models run
from the plan and everything else still runs as vLLM wrote it:

- at vLLM's ``kernel_warmup`` call: vLLM's kernel_warmup runs with its DeepGEMM warmup off
  (model-specific warmups and FlashInfer's autotune, which tunes through the model, stay vLLM's),
  then the plan's steps run through the executor: DeepGEMM exact keys on vLLM's DeepGEMM into
  vLLM's cache, the synthetic batches and CUDA-graph capture on vLLM's model runner;
- vLLM's ``warmup_kernels`` (Model Runner V2's synthetic batches): the plan ran them;
- the model runner's ``capture_model``: the plan captured its sizes; vLLM gets the bytes it returned.

The compile-size dummy runs, V1's sampler dummy run, the seed reset, inductor's lazy init, vLLM's
own JIT monitor, the GC freeze and the return value stay vLLM's. This project's JIT monitor is
installed before and sealed after the whole method: a compile it logs happened after ready.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
from typing import NamedTuple

from planner.api import check_fresh, expand, load_engine, load_target, source_plan
from planner.errors import PlanError
from planner.steps import Autotune

from .releases import Release

log = logging.getLogger("warmup_planner.vllm")

DEEP_GEMM_FAMILIES = ("gemm", "grouped_gemm")
VLLM_RUNS = (Autotune,)  # steps vLLM's own kernel_warmup runs (FlashInfer tunes through the model)


class PluginError(RuntimeError):
    """A one-line reason the worker does not start with the warmup the user asked for."""


class Settings(NamedTuple):
    """What the user set (README, "vLLM plugin")."""

    plan: str | None               # WARMUP_PLAN: built-in plan name or path (unset: the plugin is inert)
    report: str | None = None      # WARMUP_PLAN_REPORT: the executor's JSON report (rank suffix added)
    jit_log: str | None = None     # WARMUP_JIT_LOG: JSONL of compiles after ready (rank suffix added)
    engine: str | None = None      # WARMUP_ENGINE: an engine config to use instead of deriving one
    jobs: int = 0                  # WARMUP_JOBS: precompile worker processes (0 or 1: none)

    @classmethod
    def from_env(cls, environ=os.environ) -> "Settings":
        jobs = environ.get("WARMUP_JOBS", "0")
        if not jobs.isdigit():
            raise PluginError(f"warmup-planner: WARMUP_JOBS must be a whole number, got {jobs!r}")
        return cls(environ.get("WARMUP_PLAN") or None, environ.get("WARMUP_PLAN_REPORT") or None,
                   environ.get("WARMUP_JIT_LOG") or None, environ.get("WARMUP_ENGINE") or None, int(jobs))


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


def one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def with_rank(path: str | None, rank: int) -> str | None:
    """One file per worker: rank 0 keeps the name, rank r writes NAME.rankR.EXT."""
    if path is None or rank == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


def options_for(worker, settings: Settings):
    """The executor's options inside a vLLM worker: DeepGEMM through vLLM's DeepGEMM, the JIT
    monitor off inside (the plugin's own monitor spans all of vLLM's warmup)."""
    from executor.context import Options

    backends = dict.fromkeys(DEEP_GEMM_FAMILIES, "deep_gemm_vllm")
    return Options(backends=backends, on_error="continue", jit_monitor="off", runner="reference",
                   device=str(getattr(worker, "device", "cuda")), jobs=settings.jobs,
                   precompile_backends=("deep_gemm_vllm", "triton"))


def register_backend(release: Release) -> None:
    """The executor finds the vLLM-DeepGEMM backend by name (executor.registry), idempotently."""
    from executor import registry

    from . import deep_gemm

    registry.BACKENDS.setdefault("deep_gemm_vllm", ("vllm_bridge.deep_gemm", "VllmDeepGemmBackend"))
    deep_gemm.RELEASE = release


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


class WorkerWarmup:
    """One worker's plan: made before the weights load, run inside vLLM's compile_or_warm_up_model."""

    def __init__(self, worker, release: Release, settings: Settings, engine, expanded):
        self.worker, self.release, self.settings = worker, release, settings
        self.engine, self.expanded = engine, expanded
        self.rank = int(getattr(worker, "rank", 0) or 0)
        self.options = options_for(worker, settings)
        self.precompiler = None
        self.runner = None
        self.report = None

    @classmethod
    def prepare(cls, worker, release: Release, settings: Settings) -> "WorkerWarmup":
        """Engine, plan and freshness, before anything slow: a stale plan stops the worker in one line."""
        try:
            engine = derive_engine(worker.vllm_config, settings)
            expanded = make_plan(settings, engine)
        except PlanError as e:
            raise PluginError(f"warmup-planner: {one_line(e)}") from None
        register_backend(release)
        use_vllm_deep_gemm_cache()
        return cls(worker, release, settings, engine, expanded)

    def in_worker_plan(self):
        """The steps the executor runs here: all but those vLLM's kernel_warmup still runs."""
        return self.expanded._replace(steps=tuple(s for s in self.expanded.steps if not isinstance(s, VLLM_RUNS)))

    def start_precompile(self) -> None:
        """DeepGEMM and Triton compile in worker processes while vLLM loads the weights (they need none)."""
        if self.settings.jobs > 1:
            from executor.run import start_precompile

            self.precompiler = start_precompile(self.in_worker_plan(), self.engine.data, self.options)

    def warm_up(self, original):
        """vLLM's compile_or_warm_up_model with the plan in place of what it models; returns its value."""
        from executor.jit_monitor import Monitor

        self.log_plan()
        monitor = Monitor("warn", with_rank(self.settings.jit_log, self.rank)).install()
        try:
            with self.redirected():
                result = original()
        except BaseException:
            monitor.uninstall()  # the worker does not start: nothing to watch
            raise
        monitor.seal()  # stays installed: what compiles from here on is logged as after ready
        if self.settings.report and self.report is not None:
            self.report.write(with_rank(self.settings.report, self.rank))
        return result

    def log_plan(self) -> None:
        log.info("warmup-planner: plan %s for engine %s, %d steps", self.expanded.plan, self.expanded.engine,
                 len(self.expanded.steps))
        for step in self.expanded.steps:
            if isinstance(step, VLLM_RUNS):
                log.info("warmup-planner: %s runs in vLLM's own kernel_warmup (it tunes through the model)", step.id)
        for gap in self.expanded.not_modelled:
            log.info("warmup-planner: not in the plan, vLLM's own warmup runs it: %s", gap["family"])

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
            self.run_plan()
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
        from executor.run import execute

        from .runner import VllmWorkerRunner

        plan = self.in_worker_plan()
        self.runner = VllmWorkerRunner(self.worker, plan.steps)
        self.report = execute(plan, self.engine.data, self.options, runner=self.runner,
                              precompiler=self.precompiler)
        counts: dict = {}
        for record in self.report.steps:
            counts[record.status] = counts.get(record.status, 0) + 1
            if record.status == "failed":
                log.warning("warmup-planner: step %s failed: %s", record.id, record.error)
        log.info("warmup-planner: plan ran: %s", ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
