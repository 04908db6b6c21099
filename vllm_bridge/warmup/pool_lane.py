"""The precompile pool's lane inside one vLLM worker (WorkerWarmup's, vllm_bridge.warmup.worker).

The executor's precompile pool (executor/precompile/) is started at load_model, before the weights
load: one job per distinct compile key of the plan (DeepGEMM on vLLM's own DeepGEMM, into vLLM's
cache; vLLM's own Triton kernels the plan warms), in as many worker processes as the machine and the
key count allow (WARMUP_JOBS overrides; vllm_bridge.warmup.executor_options). Once vLLM's profile run
returns, before vLLM measures the GPU's memory, its device lane (the jobs that hold a CUDA context)
is finished and its processes gone, at most WARMUP_PRECOMPILE_TIMEOUT seconds of waiting; the
compile lane (no CUDA context) goes on, bounded as long. A worker that fails before that barrier
ends the pool at once (its processes hold GPU memory). Before the plan's first stage, the pool's
Triton files are installed where vLLM's Triton reads them.

The lane decides nothing: a pool that does not start, or a device lane that fails or times out, is
returned as its cause (one line), on which the coordinator steps aside (WorkerWarmup.step_aside).
"""

from __future__ import annotations

import logging

from planner.errors import one_line

from .. import timeline
from .log_lines import device_lane_line

log = logging.getLogger("vllm.warmup_planner")  # under vLLM's logger: its handler, level and format


class PoolLane:
    """One worker's precompile pool: started, its device lane finished, ended (see the module docstring)."""

    def __init__(self, rank: int, monitor):
        self.rank, self.monitor = rank, monitor
        self.precompiler = None             # the executor's Precompiler, once started
        self.waited_s: float | None = None  # the device lane's barrier: vLLM's wait after its profile run

    def start(self, plan, facts, options) -> str | None:
        """Start the pool on the plan's compile keys; None, or why it did not start."""
        from executor.run import start_precompile

        try:
            # The monitor: the pool's DeepGEMM kernels are not this process's compiles.
            # A key another process (a rank) held and lost is taken over: one line of vLLM's log.
            self.precompiler = start_precompile(plan, facts, options, monitor=self.monitor, note=self._note)
        except Exception as e:  # noqa: BLE001 - an optimisation: vLLM's warmup is the fallback
            return f"the precompile pool did not start ({type(e).__name__}: {one_line(e)})"
        return None

    def summary(self, jobs: int) -> dict:
        """The pool's summary, or why there is none (`jobs`: the workers asked for)."""
        return self.precompiler.summary() if self.precompiler else {"status": "off", "reason": f"{jobs} jobs"}

    def finish_device_lane(self, timeout_s: float) -> str | None:
        """Wait (bounded) for the jobs that hold a CUDA context and end their processes, so that
        vLLM's memory measurement counts none of theirs; the CUDA-free lane goes on, bounded too.
        None (one line of vLLM's log says what went on past it), or why the lane failed."""
        pre = self.precompiler
        if pre is None or not pre.running:
            return None
        with timeline.span("plugin: device lane wait", timeline.PLUGIN):
            why = pre.finish_device_lane(timeout_s)
        lane = pre.device_lane_wait
        self.waited_s = lane.get("waited_s")
        if why is None:
            log.info("warmup-planner: %s", device_lane_line(lane, self.rank))
            return None
        return f"the precompile pool {why}"

    def end(self, why: str) -> None:
        """End the pool now, where it runs (`why`: what its processes are told)."""
        if self.precompiler is not None and self.precompiler.running:
            self.precompiler.cancel(why)

    def install_triton_files(self, options) -> None:
        """The pool's Triton files into the directory Triton reads now (Inductor has chosen it by
        this point), before the first stage: the synthetic batches' sampling launches a variant
        of the sampler kernel too (compiled there, ahead of its own stage: bench/RESULTS.md part S)."""
        staging = (options.backend_settings.get("vllm_triton") or {}).get("staging")
        if not staging or self.precompiler is None:
            return
        from executor.caches.triton_entries import install_entries

        try:
            installed = install_entries(staging)
        except Exception as e:  # noqa: BLE001 - the launches then compile: slower, still correct
            log.warning("warmup-planner: the pool's Triton files were not installed: %s", one_line(e))
            return
        if installed:
            log.info("warmup-planner: %d Triton kernels of the pool installed where vLLM's Triton reads them",
                     installed)

    def _note(self, line: str) -> None:
        log.warning("warmup-planner: rank %d: %s", self.rank, line)
