"""The pool's workers in two lanes, so that nothing waits that need not wait.

- ``device``: jobs that run on the GPU (DeepGEMM's JIT compiles inside a launch; vLLM's Triton
  sampler is launched for real). Each such worker holds a CUDA context, which vLLM's memory
  profile would count as its own: this lane is ended before vLLM measures (vllm_bridge). Its many
  short jobs yield the CPU (DEVICE_LANE_NICE) to the compile lane's long builds, to FlashInfer's
  modules built ahead (build_ahead.py, BUILD_AHEAD_NICE) and to vLLM's own process (torch.compile):
  they fill the cores those leave idle.
- ``compile``: jobs whose compile-only twin needs no CUDA (Triton for the GPU's target, FlashInfer's
  nvcc builds; backend_classes.WORKER_CLASSES). These go on beside the weights load, torch.compile,
  the memory profile and the CUDA-graph capture; whoever needs one of their kernels first waits
  for that one alone (the plan's step: pool/hook.py; vLLM's own call: FlashInfer's file lock).
  Its workers are told the GPU's architecture for FlashInfer (setup.py), and one builds Triton's
  CUDA utils for the main process.

Inside each lane the jobs run longest first (jobs/costs.py: the times measured at the last start),
so that the long poles start at once rather than behind many short jobs. Both lanes fork from one
fork server (one a process), whose imports are the union of theirs.
"""

from __future__ import annotations

import threading
import time

from ...registry import backend_attr
from .backend_classes import cuda_free, preload_of, worker_specs
from .processes import WorkerPool
from .setup import worker_setup

DEVICE_LANE, COMPILE_LANE = "device", "compile"  # with a CUDA context, without
LANES = (COMPILE_LANE, DEVICE_LANE)  # the order their workers start: the long poles (nvcc builds) first
# the device lane's workers' niceness (what they start inherits it): below the builds started ahead
# (build_ahead.BUILD_AHEAD_NICE), which vLLM waits for at capture. Measured (H200, part AN, one pair of
# Llama-3.1-8B FP8 cold starts): no different from both at +5 (fp8_blockscale_gemm_90 118.1 and 115.9 s,
# ready 187.4 and 185.4 s); kept as the order this docstring states, not as a speed-up
DEVICE_LANE_NICE = 10


def lane_of(backend: str) -> str:
    return COMPILE_LANE if cuda_free(backend) else DEVICE_LANE


def lane_setup(lane: str, specs: dict, options) -> dict:
    """What a lane's workers take from the main process (setup.py), and what the lane adds."""
    setup = worker_setup(options.device, options.worker_env, cuda_free=lane == COMPILE_LANE)
    # The offline driver compiles without CUDA, but a backend that launches Triton kernels
    # for real in the workers (vllm_bridge's) needs Triton's own driver there.
    setup["real_triton_driver"] = lane == DEVICE_LANE and any(
        backend_attr(n, "needs_triton_driver", False) for n in specs)
    setup["nice"] = DEVICE_LANE_NICE if lane == DEVICE_LANE else 0
    return setup


def lane_pool(lane: str, workers: int, backends: set, options, timings, preload: list) -> WorkerPool:
    """The worker processes of one lane, for the jobs of `backends`."""
    timings.created = timings.created or time.time()  # the pool's start, before the first lane's set-up
    specs = worker_specs(backends)
    setup = lane_setup(lane, specs, options)
    cuda_utils = bool(setup.get("capability")) and "triton" in specs and lane == COMPILE_LANE
    return WorkerPool(workers, specs, setup, options, timings, lane, preload, cuda_utils=cuda_utils)


class Lanes:
    """The worker processes of one run, one WorkerPool per lane that has jobs. It answers what
    the precompiler asks of a pool (start, run, submit, shutdown) and routes each job to its lane."""

    def __init__(self, workers: int, book, options, timings):
        backends: dict[str, set] = {}
        jobs: dict[str, int] = {}
        for slot in book.slots:
            lane = lane_of(slot.job.backend)
            backends.setdefault(lane, set()).add(slot.job.backend)
            jobs[lane] = jobs.get(lane, 0) + 1
        preload = preload_of(worker_specs(set().union(*backends.values()))) if backends else []
        self.pools = {lane: lane_pool(lane, min(workers, jobs[lane]), backends[lane], options, timings, preload)
                      for lane in LANES if lane in backends}
        self.lane = {b: lane for lane, names in backends.items() for b in names}
        self.timings = timings
        self.started = threading.Event()  # every lane's workers started, the first jobs submitted

    @property
    def workers(self) -> int:
        return sum(p.workers for p in self.pools.values())

    def workers_of(self) -> dict:
        return {lane: p.workers for lane, p in self.pools.items()}

    def start(self, then) -> None:
        """Start every lane's workers from one background thread, then call `then` there."""
        threading.Thread(target=self._spawn, args=(then,), name="warmup-precompile-start", daemon=True).start()

    def _spawn(self, then) -> None:
        try:
            for pool in self.pools.values():
                pool.spawn()
            then()
        except Exception as e:  # noqa: BLE001 - the jobs left unsubmitted are compiled by the main process
            self.timings.start_error = f"{type(e).__name__}: {e}"
        finally:
            for pool in self.pools.values():
                pool.started.set()
            self.started.set()

    def await_start(self, timeout: float | None = None) -> bool:
        return self.started.wait(timeout)

    def run(self, book, slots: list, follow) -> None:
        """Submit the jobs of `slots`, each followed by its key's future (claims/waits.py); a job that
        cannot be submitted (a broken lane) fails, and the main process compiles its variant."""
        for slot in slots:
            try:
                future = follow(slot.job, self.submit(slot.job))
            except Exception as e:  # noqa: BLE001
                slot.result = book.ended(slot, f"not submitted ({type(e).__name__}: {e})")
                continue
            book.submitted(slot, future)

    def submit(self, job):
        pool = self.pools.get(self.lane.get(job.backend, ""))
        if pool is None:
            raise RuntimeError(f"no lane runs {job.backend} jobs (it was ended)")
        return pool.submit(job)

    def shutdown(self, kill: bool = False, join: float | None = None, lane: str | None = None) -> None:
        """End every lane (or `lane` alone), as WorkerPool.shutdown; an ended lane takes no job."""
        for name in [lane] if lane else list(self.pools):
            pool = self.pools.pop(name, None)
            if pool is not None:
                pool.shutdown(kill=kill, join=join)

    def has(self, lane: str) -> bool:
        return lane in self.pools
