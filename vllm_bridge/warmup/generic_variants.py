"""The generic Triton variants in one vLLM worker (executor.triton_generic does the work): recorded
from the plugin's start, each twin's build started in the background as soon as its variant is
recorded (overlapping the rest of the warmup, unseen by the JIT monitors' step counts), the rest
built and all loaded right before vLLM's JIT monitor starts, sealed there; a launch after ready that
runs one is a warning line and a finding in the plugin's JIT log, never a compile.

vLLM starts its monitor at the end of compile_or_warm_up_model (vllm.utils.jit_monitor.activate,
imported inside the method, so the module's attribute is what it calls): ``before_vllm_monitor``
swaps it for the duration of that method, so the builds come first (their compiles are the
warmup's, and in the monitor's error mode they would raise after it). A release without it: the
worker closes them at the end of its warmup (``close``), where nothing watches yet.
"""

from __future__ import annotations

import contextlib
import importlib
import logging

from executor.triton_generic import GenericVariants

from .. import timeline
from ..step_aside import cause_of

log = logging.getLogger("vllm.warmup_planner")


class WorkerGenerics:
    """One worker's generic Triton variants: ``install`` at its start, ``close`` before ready."""

    def __init__(self, rank: int, monitor, phases):
        self.rank, self.monitor, self.phases = rank, monitor, phases
        self.variants = GenericVariants(on_generic=self.ran)
        self.closed = None  # executor.triton_generic.CloseResult, once built

    def install(self) -> None:
        """From here to ready, every Triton variant this process compiles or loads is recorded."""
        if not self.variants.install():
            log.info("warmup-planner: rank %d: no generic Triton variants: %s", self.rank, self.variants.reason)

    def uninstall(self) -> None:
        self.variants.uninstall()

    @contextlib.contextmanager
    def before_vllm_monitor(self, release):
        """Inside: vLLM's JIT monitor starts once the generic variants are built and sealed."""
        module = _module_or_none(release.jit_monitor_module)
        activate = getattr(module, release.jit_monitor_activate, None)
        if activate is None:  # a release without it: closed at the warmup's end, nothing watches before
            yield
            return

        def close_then_activate(*args, **kwargs):
            self.close()
            return activate(*args, **kwargs)
        setattr(module, release.jit_monitor_activate, close_then_activate)
        try:
            yield
        finally:
            setattr(module, release.jit_monitor_activate, activate)

    def close(self) -> None:
        """Build (or load) the generic variant of every Triton variant this process used, then seal:
        from here a launch of a value class no warmup saw runs one (once per process). A failure is
        one warning line: misses then compile as without this."""
        if self.closed is not None or not self.variants.installed:
            return
        try:
            with self.phases.phase("generic Triton variants", timeline.PLUGIN):
                self.closed = self.variants.close()
        except Exception as e:  # noqa: BLE001 - an optimisation of ours: vLLM serves, misses compile as before
            self.variants.uninstall()
            log.warning("warmup-planner: rank %d: the generic Triton variants were not built: %s", self.rank,
                        cause_of(e))
            return
        self.variants.seal()
        log.info("warmup-planner: %s", built_line(self.closed, self.rank))

    def ran(self, use) -> None:
        """A launch after ready ran a generic variant: no compile, a finding for the next plan."""
        log.warning("warmup-planner: rank %d: %s ran its generic Triton variant after ready (a value class no "
                    "warmup launch had: %s); nothing compiled", self.rank, use.kernel, use.key)
        self.monitor.finding({"backend": "Triton", "event": "generic variant run", "kernel": use.kernel,
                              "key": use.key, "generic_key": use.generic_key})


def built_line(result, rank: int) -> str:
    """One line of vLLM's log: the generic variants built before ready (how many of them in the
    background during the warmup, ahead of close; the seconds are close's own, on the critical path),
    and those that failed. The twins' only count: the builds ahead are in no phase's or step's."""
    line = (f"rank {rank}: {result.built} generic Triton variants built or loaded in {result.seconds:.1f} s "
            f"at close ({result.ahead} of them built ahead, in the background during the warmup) for the "
            f"{result.seen} variants compiled before ready ({result.already} needed none); a launch "
            "after ready in a value class no warmup saw runs one instead of compiling")
    if result.failed:
        kernels = sorted({kernel for kernel, _ in result.failed})
        line += f"; {len(result.failed)} failed to build ({', '.join(kernels)}: {result.failed[0][1]})"
    return line


def _module_or_none(name: str):
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a release without it
        return None
