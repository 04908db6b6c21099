"""The plan-driven warmup inside one vLLM worker (vllm_bridge.plugin patches the worker to call it).

Per worker, in the order vLLM calls the three patched methods:

- ``load_model`` (``start``): the engine config from the live VllmConfig, the plan (a stale
  saved plan refused; vllm_bridge.warmup.worker_plan), the report's path checked (``prepare``: a failure
  of any of them makes the plugin step aside, vllm_bridge.step_aside), the JIT monitor installed,
  and the precompile pool started before the weights load: one job per distinct compile key of
  the plan (DeepGEMM on vLLM's own DeepGEMM, into vLLM's cache; vLLM's own Triton kernels the plan
  warms), in as many worker processes as the machine and the key count allow (WARMUP_JOBS overrides;
  vllm_bridge.warmup.executor_options); once the weights are loaded, the live layers checked against the
  engine config (``check_live_kernels``);
- ``determine_available_memory`` (``finish_device_lane``, after vLLM's profile run: ``swaps.then_finish_device_lane``;
  the pool's lane: vllm_bridge.warmup.pool_lane): no global barrier. vLLM's memory
  profile counts every GPU byte in use when it measures, the workers' CUDA contexts included: so
  the pool's device lane (DeepGEMM, vLLM's Triton sampler launched for real) is finished and its
  processes gone once vLLM's profile run returns, before the measurement (at most
  WARMUP_PRECOMPILE_TIMEOUT seconds of waiting). The profile run itself (torch.compile first)
  runs beside the pool. The compile lane (executor/precompile/workers/lanes.py: no CUDA context) goes on
  through the KV allocation and the capture; a kernel of it is waited for only where it is first
  needed (a plan step's own jobs; vLLM's own FlashInfer call on FlashInfer's file lock), and what
  is left of it is ended WARMUP_PRECOMPILE_TIMEOUT seconds later (its kernels then compile where
  needed). A lane that fails or times out is one line in vLLM's log, and vLLM's own warmup then
  runs as it would without the plugin (the plugin steps aside; WARMUP_STRICT=1: the worker stops
  instead), in every rank (vllm_bridge.plugin: the ranks agree before this method);
- ``compile_or_warm_up_model`` (``warm_up``): vLLM's own method with the plan in place of what the
  plan models (``swaps.redirected``): vLLM's kernel_warmup runs with its serial DeepGEMM sweep off, then
  the plan's steps run through the executor (``plugin_plan``: each DeepGEMM shape at one call per
  compile key, loading what the pool compiled; the synthetic batches and the CUDA-graph capture on
  vLLM's model runner; the kernels vLLM leaves cold); vLLM's ``warmup_kernels`` is skipped (the
  plan ran its batches) and ``capture_model`` answers the bytes of the plan's capture. The monitor
  is sealed at the end: a compile it logs from then on happened after ready. A plan whose run
  fails (not a step of it: its steps' failures are in the report) steps aside there: vLLM's own
  kernel_warmup runs again, whole, and its batches and capture run as without the plugin.

What the plugin runs differs from the plan in how, never in what: its compile keys are the
plan's (vllm_bridge.warmup.worker_plan.plugin_plan; tests/vllm_bridge/test_vllm_plugin_cpu.py checks it on every
shipped engine). It sets no VLLM_* variable (they feed vLLM's torch.compile cache key); vLLM's
DeepGEMM sweep is skipped by swapping the function in kernel_warmup's module for the duration of
the call (vllm_bridge.warmup.swaps).

This module is the worker's side of it, WorkerWarmup: the coordinator, which holds the worker's
state and decides. ``step_aside`` is its one way to give way to vLLM's own warmup: the concerns it
coordinates report a cause and never step aside themselves. Each concern is a module of its own:
the user's settings (vllm_bridge.settings), the worker's plan (vllm_bridge.warmup.worker_plan), the
precompile pool's lane (vllm_bridge.warmup.pool_lane), the swaps of vLLM's names
(vllm_bridge.warmup.swaps), the executor's options in vLLM's worker
(vllm_bridge.warmup.executor_options), the report (vllm_bridge.warmup.worker_report) and the lines in
vLLM's log (vllm_bridge.warmup.log_lines).
"""

from __future__ import annotations

import logging

from planner.errors import PlanError, one_line

from .. import timeline
from ..releases import Release
from ..settings import PluginError, Settings, rank_of, with_rank
from ..step_aside import cause_of, step_aside
from . import phases as ph
from . import swaps, worker_report
from .after_ready import torch_compile_after_ready
from .executor_options import FLASHINFER_JIT, local_ranks, options_for, precompile_jobs, use_vllm_deep_gemm_cache
from .flashinfer_waits import FlashInferWaits
from .generic_variants import WorkerGenerics
from .log_lines import LogProgress
from .pool_lane import PoolLane
from .worker_plan import check_live_kv_cache, check_live_layers, derive_engine, make_plan, plugin_plan

log = logging.getLogger("vllm.warmup_planner")  # under vLLM's logger: its handler, level and format


class WorkerWarmup:
    """One worker's plan: made before the weights load, its pool finished before vLLM's memory
    profile, run inside vLLM's compile_or_warm_up_model (see the module docstring)."""

    def __init__(self, worker, release: Release, settings: Settings, engine, expanded):
        from executor.jit_monitor import Monitor

        self.worker, self.release, self.settings = worker, release, settings
        self.engine, self.expanded = engine, expanded
        self.rank = rank_of(worker)
        self.options = options_for(worker, release, 0)
        self.monitor = Monitor("warn", with_rank(settings.jit_log, self.rank))
        self.phases = ph.Phases(self.monitor)
        self.pool = PoolLane(self.rank, self.monitor)
        self.fallback: str | None = None   # why vLLM's own warmup runs instead of the plan (step_aside's)
        self.runner = None
        self.report = None
        self.flashinfer_waits = FlashInferWaits()
        self.generics = WorkerGenerics(self.rank, self.monitor, self.phases)

    @classmethod
    def prepare(cls, worker, release: Release, settings: Settings) -> "WorkerWarmup":
        """Engine, plan, freshness and the report's path, before anything slow; what fails is one
        line (PluginError), on which the plugin steps aside (vllm_bridge.plugin)."""
        try:
            engine = derive_engine(worker.vllm_config, settings)
            expanded = make_plan(settings, engine)
            worker_report.check_report_path(settings, rank_of(worker))
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
        self.generics.install()
        jobs = precompile_jobs(self.settings, local_ranks(self.worker.vllm_config))
        if jobs > 1:
            self._start_pool(jobs)
        # After the pool's start, not before it: FlashInfer's import takes seconds.
        if any(getattr(step, "backend", None) == FLASHINFER_JIT for step in self.expanded.steps):
            self.flashinfer_waits.install()  # vLLM's own first calls may wait for the pool's builds
        p = self.pool.summary(jobs)
        log.info("warmup-planner: plan %s for engine %s, %d steps; precompile: %s", self.expanded.plan,
                 self.expanded.engine, len(self.expanded.steps),
                 f"{p['jobs']} jobs on {p['workers']} worker processes" if p["status"] == "ran"
                 else f"{p['status']} ({p['reason']})")
        families = [gap["family"] for gap in self.expanded.not_modelled]
        if families:
            log.info("warmup-planner: not in the plan (vLLM's own warmup, or nothing, covers them): %s",
                     "; ".join(families))

    def _start_pool(self, jobs: int) -> None:
        """The pool on the plan's compile keys, with the pool's options; one that does not start steps aside."""
        self.options = options_for(self.worker, self.release, jobs)
        why = self.pool.start(self.in_worker_plan(), self.engine.facts, self.options)
        if why:
            self.step_aside(why)

    def check_live_kernels(self) -> str | None:
        """After the weights load: the live layers against the engine config the plan was made for,
        the plan made again for a shape it lacked (worker_plan.check_live_layers); a difference is
        one warning line, returned."""
        model = getattr(getattr(self.worker, "model_runner", None), "model", None)
        if model is None or not hasattr(model, "modules"):
            return None
        why, self.engine, self.expanded = check_live_layers(model, self.settings, self.engine, self.expanded)
        if why:
            log.warning("warmup-planner: %s", why)
        return why

    def check_live_kv_cache(self) -> str | None:
        """Before the plan runs: the KV cache vLLM allocated against the engine config the plan was
        made for, the plan made again for it where they differ (worker_plan.check_live_kv_cache);
        a difference in its groups is one warning line, returned."""
        runner = getattr(self.worker, "model_runner", None)
        why, self.engine, self.expanded = check_live_kv_cache(runner, self.settings, self.engine, self.expanded)
        if why:
            log.warning("warmup-planner: rank %d: %s", self.rank, why)
        return why

    # --- determine_available_memory: the device lane's barrier, after vLLM's profile run ---

    def finish_device_lane(self) -> None:
        """The pool's device lane finished (bounded: pool_lane.PoolLane.finish_device_lane), before
        vLLM's memory measurement. On failure: fall back to vLLM's own warmup, or stop (strict)."""
        why = self.pool.finish_device_lane(self.settings.timeout_s)
        if why:
            self.step_aside(why)

    # --- giving way ---

    def step_aside(self, why: str, by_another_rank: bool = False) -> None:
        """The one way this worker's plan gives way: vLLM's own warmup runs instead. This rank's cause
        is one line (WARMUP_STRICT=1: PluginError); another rank's (the ranks' agreement said it) is
        kept without a second line."""
        self.fallback = why if by_another_rank else step_aside(why, self.settings.strict, self.rank).cause

    def abandon(self, why: str) -> None:
        """vLLM's worker failed before the barrier: end the pool now (its processes hold GPU memory
        and would keep the dying process waiting for their jobs at exit)."""
        self.pool.end(why)

    def withdraw(self, why: str) -> None:
        """Nothing of the plan's stays in the process: the pool ended, the monitor and FlashInfer's
        waits uninstalled."""
        self.abandon(why)
        self.monitor.uninstall()
        self.generics.uninstall()
        self.flashinfer_waits.uninstall()

    # --- compile_or_warm_up_model: the plan ---

    def warm_up(self, original):
        """vLLM's compile_or_warm_up_model with the plan in place of what it models; returns its value."""
        self.monitor.install()  # already, unless load_model was not ours to wrap
        if not self.fallback:
            self.check_live_kv_cache()
        try:
            result = self._run_vllm_method(original)
        except BaseException:
            self.phases.end()
            self.withdraw("not needed: vLLM's warmup failed")  # the worker does not start: nothing to watch
            raise
        self.generics.close()  # already, where vLLM started its own monitor
        self.monitor.seal()  # stays installed: what compiles from here on is logged as after ready
        torch_compile_after_ready(self.settings.torch_compile_after_ready, self.rank)
        self._finish_report()
        return result

    def _run_vllm_method(self, original):
        with self.generics.before_vllm_monitor(self.release):
            if self.fallback:
                with self.phases.phase("warmup (vLLM's own, the plugin's fallback)"):
                    return original()
            self.phases.begin("warmup before the plan")
            with swaps.redirected(self):
                result = original()
            self.phases.end()
            return result

    def run_plan_or_step_aside(self) -> bool:
        """The plan's run (inside vLLM's kernel_warmup: swaps.redirected); one that fails (not a step
        of it: those are in the report) steps aside."""
        try:
            with timeline.span("plugin: plan", timeline.PLUGIN, plan=self.expanded.plan):
                self.run_plan()
            return True
        except Exception as e:  # noqa: BLE001 - any failure of ours: vLLM's own warmup runs
            self.step_aside(f"the plan's run failed ({cause_of(e)})")
            return False

    def run_plan(self) -> None:
        from executor.report import Report
        from executor.run import execute

        from .runner import VllmWorkerRunner

        plan = self.in_worker_plan()
        self.pool.install_triton_files(self.options)
        self.runner = VllmWorkerRunner(self.worker, plan.steps)
        self.report = Report(plan, self.options.public())
        progress = LogProgress(self.report, ph.step_kernels(plan.steps))
        self.report = execute(plan, self.engine.facts, self.options, progress=progress,
                              report=self.report, runner=self.runner, precompiler=self.pool.precompiler,
                              monitor=self.monitor)
        for record in self.report.steps:
            if record.status == "failed":
                log.warning("warmup-planner: step %s failed: %s", record.id, record.error)

    # --- the report and the summary line (vllm_bridge.warmup.worker_report) ---

    def _finish_report(self) -> None:
        """The summary line and the report; vLLM is ready: a failure of either is one line."""
        try:
            self.report = worker_report.summarise(self)
        except Exception as e:  # noqa: BLE001 - any failure of ours: vLLM serves
            worker_report.failed(self.settings, cause_of(e))
            return
        worker_report.write(self.report, self.settings, self.rank)

    def amend_report(self, key: str, value) -> None:
        """What was learnt after the report was written (the bundle's use), into its host part."""
        if self.report is not None:
            self.report.host = {**(self.report.host or {}), key: value}
            worker_report.write(self.report, self.settings, self.rank)
