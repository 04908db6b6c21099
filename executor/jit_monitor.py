"""Count every JIT compile, per step, and catch the ones that happen after the warmup.

Usable on its own by a serving process::

    from executor import jit_monitor
    jit_monitor.activate(mode="warn", jsonl_path="/var/log/warmup-misses.jsonl")
    ... warm up ...
    jit_monitor.seal()          # from now on every compile is a warmup miss

What it watches is the cache families' table (executor/caches/registry.py): each monitored family's
row (``Monitored``) names its watcher, defined in the family's module, and the counters it keeps.
A watcher attaches only where its library is present; nothing is imported that the process has not
imported already, except Triton when it is installed. Today: Triton's JIT misses, compiles, disk
loads and module loads (executor/caches/triton.py), torch.compile's frame compiles
(torch_compile.py), DeepGEMM's kernels appearing in its JIT cache, which has no compile hook
(deep_gemm.py), and FlashInfer's JIT module builds (flashinfer_jit.py).

``Monitor`` owns the watchers and the counts: per step, before and after the seal. After
``seal()`` each new compile is logged with the kernel name and its specialization (mode
``warn``) or raises ``JitAfterSealError`` (mode ``error``: from inside the launch for
hooked libraries, Triton then skips the launch; at the step boundary for DeepGEMM), and is
appended as one JSON line to ``jsonl_path`` so that a later plan can cover it. Without
Triton (or torch) the monitor is a harmless no-op for those parts.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping

from planner.output import append_line

from .caches import registry
from .caches.roots import Env

log = logging.getLogger("executor.jit_monitor")

MODES = ("off", "warn", "error")


def families() -> list:
    """The monitored families in the monitor's order (their rows' ``order``, then the table's)."""
    return sorted(registry.monitored(), key=lambda family: family.monitor.order)


def counters() -> tuple:
    """Every monitored family's counters, in the monitor's order (the report's keys keep it)."""
    return tuple(counter for family in families() for counter in family.monitor.counters)


def counter_names() -> tuple[str, ...]:
    return tuple(counter.name for counter in counters())


class JitAfterSealError(RuntimeError):
    """A kernel compiled after the warmup was sealed (mode ``error``)."""


class StepCounts:
    """What compiled while one step ran: the monitored families' counters (read from their rows when
    the counts are made; ``counts.compiled`` reads one), Triton's compile time (the listener's, real
    compiles and disk loads), the in-memory misses per kernel, and the DeepGEMM cache entries counted
    (the precompile pool hands them on)."""

    def __init__(self, compile_ms: float = 0.0, kernels: Mapping | None = None,
                 deep_gemm_entries: list | None = None, **counts):
        declared = counters()
        unknown = sorted(set(counts) - {counter.name for counter in declared})
        if unknown:
            raise TypeError(f"StepCounts has no counter {unknown[0]!r}")
        self.counts = {counter.name: counts.get(counter.name, counter.unset) for counter in declared}
        self.per_kernel = frozenset(counter.name for counter in declared if counter.per_kernel)
        self.compile_ms = compile_ms
        self.kernels = dict(kernels or {})  # kernel name -> in-memory misses
        self.deep_gemm_entries = list(deep_gemm_entries or [])

    def __getattr__(self, name: str):
        counts = self.__dict__.get("counts") or {}
        if name in counts:
            return counts[name]
        raise AttributeError(f"StepCounts has no counter {name!r}")

    def __setattr__(self, name: str, value) -> None:
        if name in (self.__dict__.get("counts") or {}):
            self.counts[name] = value
        else:
            super().__setattr__(name, value)

    def __eq__(self, other) -> bool:
        return isinstance(other, StepCounts) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"StepCounts({self.as_dict()!r})"

    def count(self, name: str, n: int, kernel: str | None, compile_ms: float) -> None:
        self.counts[name] = (self.counts[name] or 0) + n
        self.compile_ms += compile_ms
        if kernel is not None and name in self.per_kernel:
            self.kernels[kernel] = self.kernels.get(kernel, 0) + n

    def add(self, other: "StepCounts") -> None:
        for name in self.counts:
            self.counts[name] = _plus(self.counts[name], other.counts.get(name))
        self.compile_ms += other.compile_ms
        for k, v in other.kernels.items():
            self.kernels[k] = self.kernels.get(k, 0) + v
        self.deep_gemm_entries += other.deep_gemm_entries

    def as_dict(self) -> dict:
        out = dict(self.counts)
        out["compile_ms"] = round(self.compile_ms, 3)
        out["kernels"] = dict(sorted(self.kernels.items()))
        if self.deep_gemm_entries:
            out["deep_gemm_entries"] = list(self.deep_gemm_entries)
        return out


# --- the monitor: counts per step, the seal, post-seal events -----------------------------------

class Monitor:
    """JIT compile counters with a seal; install() hooks in, uninstall() restores."""

    def __init__(self, mode: str = "warn", jsonl_path: str | None = None, verbose: bool = False,
                 env: Env | None = None):
        """`env`: the environment the watched caches' roots are resolved in (a run's, resolved once
        and handed down: executor.run); without one, this process's when a watcher attaches (vLLM
        sets DG_JIT_CACHE_DIR only right before it imports DeepGEMM)."""
        if mode not in MODES:
            raise ValueError(f"jit monitor mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.jsonl_path = jsonl_path
        self.verbose = verbose
        self.sealed = False
        self.loads_ok = False                # sealed with loads_ok (see seal)
        self.sealed_at: float | None = None
        self.installed = False
        self.watching: list[str] = []        # what is hooked, for the report
        self.totals = StepCounts()           # before the seal
        self.after_seal = StepCounts()       # after the seal
        self.post_seal_events: list[dict] = []
        self.step_id: str | None = None
        self.pool_busy = None                # callable: True while precompile workers compile DeepGEMM
        self.env = env
        self.watchers = {family.name: family.monitor.watcher(self) for family in families()}
        self.current = StepCounts()          # the running step's counts
        self.lock = threading.RLock()

    # --- install / uninstall -------------------------------------------------------------

    def install(self) -> "Monitor":
        if self.installed or self.mode == "off":
            return self
        self.installed = True
        self._attach_ready()
        return self

    def uninstall(self) -> None:
        for watcher in reversed(list(self.watchers.values())):
            watcher.detach()
        self.installed = False

    def _attach_ready(self) -> None:
        """Hook libraries the process has imported since install (cheap when nothing changed)."""
        for watcher in self.watchers.values():
            if not watcher.attached and watcher.ready():
                watcher.attach()

    def absorb(self, family: str, entries) -> None:
        """A family's cache entries another process compiled (the precompile pool, which counts
        them): not this process's compiles when they show up in the cache."""
        watcher = self.watchers.get(family)
        if watcher is not None and watcher.attached:
            watcher.absorb(set(entries))

    def cache_env(self) -> Env:
        """The environment the watchers resolve their caches' roots in (see __init__)."""
        return self.env if self.env is not None else Env.of()

    def watch(self, label: str) -> None:
        if label not in self.watching:
            self.watching.append(label)

    # --- events from the watchers ----------------------------------------------------------

    def count(self, name: str, n: int = 1, kernel: str | None = None, compile_ms: float = 0.0) -> None:
        """Add to the running step and to the before- or after-seal totals."""
        with self.lock:
            for target in (self.current, self.after_seal if self.sealed else self.totals):
                target.count(name, n, kernel, compile_ms)

    def post_seal(self, *events: dict) -> None:
        """Record, append to the JSONL log and warn about each event; in mode error, raise once
        for all of them (after recording them all, so none is lost to the raise)."""
        if not self.sealed or not events:
            return
        messages = [self._record(event) for event in events]
        if self.mode == "error":
            raise JitAfterSealError("\n".join(messages))
        for message in messages:
            log.warning(message)

    def _record(self, event: dict) -> str:
        event = {"time": time.time(), "step": self.step_id, **event}
        with self.lock:
            self.post_seal_events.append(event)
        if self.jsonl_path:
            try:
                append_line(self.jsonl_path, json.dumps(event, default=str, sort_keys=True))
            except OSError as e:
                log.warning("cannot append to %s: %s", self.jsonl_path, e)
        return (f"{event['backend']} {event['event']} after warmup was sealed: {event.get('kernel')}"
                + (f" {event['repr']}" if event.get("repr") else "")
                + ". This is a latency spike in serving; extend the warmup plan to cover it.")

    def finding(self, event: dict) -> None:
        """Something after the seal that is no compile but that a later plan should cover (a launch
        that ran a generic Triton variant, executor.triton_generic): recorded and appended to the
        JSONL log as a miss is, never raised, in any mode."""
        if self.sealed:
            self._record(event)

    def _poll(self) -> None:
        """Step boundary: attach libraries imported since, and poll those without hooks."""
        if not self.installed:
            return
        self._attach_ready()
        for watcher in self.watchers.values():
            if watcher.attached:
                watcher.poll()

    # --- steps and seal ----------------------------------------------------------------------

    def begin_step(self, step_id: str | None) -> None:
        if self.mode == "off":
            return
        self._poll()
        with self.lock:
            self.step_id = step_id
            self.current = StepCounts()

    def end_step(self) -> StepCounts | None:
        """Counts since begin_step (None when the monitor is off)."""
        if self.mode == "off":
            return None
        try:
            self._poll()  # DeepGEMM's kernels of this step, named with its step id
        finally:  # also when a post-seal DeepGEMM compile raises (mode error): the step is over
            with self.lock:
                counts, self.current = self.current, StepCounts()
                self.step_id = None
        return counts

    def seal(self, loads_ok: bool = False) -> None:
        """From now on every compile is a warmup miss: logged (warn) or raised (error).

        `loads_ok`: sealed before a warmup that must find every kernel in the disk caches
        (``warmup execute --expect-cached``): a kernel compiled is an event, one loaded from
        the disk cache (and its first launch) is not."""
        if self.mode == "off":
            return
        self._poll()
        self.loads_ok = loads_ok
        self.sealed = True
        self.sealed_at = time.time()

    def summary(self) -> dict:
        out = {
            "mode": self.mode, "watching": list(self.watching), "sealed": self.sealed,
            "before_seal": self.totals.as_dict(), "after_seal": self.after_seal.as_dict(),
            "post_seal_events": list(self.post_seal_events), "jsonl": self.jsonl_path,
        }
        details = {name: found for name, watcher in self.watchers.items() if (found := watcher.details())}
        if details:
            out["details"] = details
        return out


def _plus(a, b):
    """a + b where None means "not counted" (unlike 0): None only when both are."""
    return None if a is None and b is None else (a or 0) + (b or 0)


# --- module-level API for a serving process -----------------------------------------------------

_active: Monitor | None = None


def activate(mode: str = "warn", jsonl_path: str | None = None, verbose: bool = False) -> Monitor:
    """Install the process-wide monitor (replacing an earlier one) and return it."""
    global _active
    if _active is not None:
        _active.uninstall()
    _active = Monitor(mode, jsonl_path, verbose).install()
    return _active


def active() -> Monitor | None:
    return _active


def seal() -> None:
    """Seal the process-wide monitor: every later compile is reported (or raises)."""
    if _active is None:
        raise RuntimeError("jit_monitor.seal(): call jit_monitor.activate() first")
    _active.seal()


def deactivate() -> None:
    global _active
    if _active is not None:
        _active.uninstall()
    _active = None
