"""Count every JIT compile, per step, and catch the ones that happen after the warmup.

Usable on its own by a serving process::

    from executor import jit_monitor
    jit_monitor.activate(mode="warn", jsonl_path="/var/log/warmup-misses.jsonl")
    ... warm up ...
    jit_monitor.seal()          # from now on every compile is a warmup miss

What it watches, one watcher class per library (each only where the library is present;
nothing is imported that the process has not imported already, except Triton when it is
installed):

* ``TritonWatcher``: ``@triton.jit`` in-memory misses through
  ``knobs.runtime.jit_cache_hook`` (fires before the compile or disk load, names the kernel
  and its specialization) and ``jit_post_compile_hook``; every ``triton.compile()`` through
  ``knobs.compilation.listener`` with ``cache_hit``, so a miss is split into *compiled* and
  *loaded from the disk cache* (it also sees torch-Inductor's kernels, which bypass the JIT
  hooks); first-use module loads through ``knobs.runtime.kernel_load_start_hook``;
* ``DynamoWatcher``: torch.compile, through Dynamo's compile-start callback (only when
  ``torch._dynamo`` is already imported);
* ``DeepGemmWatcher``: DeepGEMM has no compile hook, so it counts the kernels that appear
  in its JIT cache at step boundaries, in every layout in use (2.5 and 2.6:
  ``cache/kernel.<name>.<hash>/``; 2.8: ``cache/<name>.<hash>/`` with its ``.committed``
  marker; executor.caches.deep_gemm_install), and the loads where the layout records them
  (2.8);
* ``FlashInferWatcher``: ``flashinfer.jit`` module builds (``JitSpec.build`` wrapped).

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
import os
import re
import sys
import threading
import time
import types
from dataclasses import dataclass, field

from planner.output import append_line

from .caches import deep_gemm_install

log = logging.getLogger("executor.jit_monitor")

MODES = ("off", "warn", "error")
COUNTERS = ("jit_misses", "compiled", "disk_loads", "module_loads", "dynamo_compiles",
            "deep_gemm_jit", "deep_gemm_loads", "flashinfer_jit")


class JitAfterSealError(RuntimeError):
    """A kernel compiled after the warmup was sealed (mode ``error``)."""


@dataclass
class StepCounts:
    """What compiled while one step ran."""

    jit_misses: int = 0       # Triton @jit in-memory misses (each is a compile or a disk load)
    compiled: int = 0         # triton.compile() that really compiled
    disk_loads: int = 0       # triton.compile() served by the disk cache
    module_loads: int = 0     # first launches that loaded a module onto the GPU
    dynamo_compiles: int = 0  # torch.compile frames compiled (first compiles and recompiles)
    deep_gemm_jit: int = 0    # new DeepGEMM kernels in its JIT cache
    deep_gemm_loads: int | None = None  # DeepGEMM kernels loaded from it (None: the layout cannot tell)
    flashinfer_jit: int = 0   # FlashInfer JIT module builds
    compile_ms: float = 0.0   # Triton compile time (listener), real compiles and disk loads
    kernels: dict = field(default_factory=dict)  # kernel name -> in-memory misses
    deep_gemm_entries: list = field(default_factory=list)  # the cache entries of deep_gemm_jit

    def add(self, other: "StepCounts") -> None:
        for name in COUNTERS:
            setattr(self, name, _plus(getattr(self, name), getattr(other, name)))
        self.compile_ms += other.compile_ms
        for k, v in other.kernels.items():
            self.kernels[k] = self.kernels.get(k, 0) + v
        self.deep_gemm_entries += other.deep_gemm_entries

    def as_dict(self) -> dict:
        out = {name: getattr(self, name) for name in COUNTERS}
        out["compile_ms"] = round(self.compile_ms, 3)
        out["kernels"] = dict(sorted(self.kernels.items()))
        if self.deep_gemm_entries:
            out["deep_gemm_entries"] = list(self.deep_gemm_entries)
        return out


# --- watchers: one per library ------------------------------------------------------------------

class Watcher:
    """One library's hooks into a Monitor.

    ``attach()`` runs once per install, as soon as ``ready()``: libraries imported after the
    install are picked up at the next step boundary. Every hook it sets pushes its undo onto
    ``restore``; ``detach()`` runs them newest first, so chained hooks unwind in order.
    ``poll()`` runs at step boundaries, for libraries that have no hook to call us."""

    library: str | None = None  # attach once this module is imported; None: at install

    def __init__(self, monitor: "Monitor"):
        self.monitor = monitor
        self.attached = False
        self.restore: list = []

    def ready(self) -> bool:
        return self.library is None or self.library in sys.modules

    def attach(self) -> None:
        # Marked first: a library that fails to hook is not retried at every step boundary.
        self.attached = True
        self._attach()

    def _attach(self) -> None:
        raise NotImplementedError

    def poll(self) -> None:
        pass

    def detach(self) -> None:
        for undo in reversed(self.restore):
            try:
                undo()
            except Exception:  # noqa: BLE001 - restoring must not fail the caller
                pass
        self.restore.clear()
        self.attached = False

    def _set(self, owner, attr: str, value, label: str | None = None) -> None:
        """Replace owner.attr (keeping the old value to restore) and report what is watched."""
        previous = getattr(owner, attr)
        setattr(owner, attr, value)
        self.restore.append(lambda: setattr(owner, attr, previous))
        if label:
            self.monitor._watch(label)


class TritonWatcher(Watcher):
    """Triton's knobs: JIT-cache misses, every triton.compile() and first-use module loads."""

    def __init__(self, monitor: "Monitor"):
        super().__init__(monitor)
        self._in_jit = threading.local()  # inside a @jit miss: its triton.compile is not a separate event
        self._pending_loads = 0           # post-seal misses whose module load is the same event

    def _attach(self) -> None:
        try:
            from triton import knobs
        except Exception:  # noqa: BLE001 - no Triton (or one without knobs, < 3.4): nothing to hook
            return
        if not hasattr(knobs.runtime, "jit_cache_hook"):
            return
        self._hook_jit(knobs.runtime)
        if hasattr(knobs.compilation, "listener"):
            self._hook_listener(knobs.compilation)
        chain = getattr(knobs.runtime, "kernel_load_start_hook", None)
        if chain is not None and hasattr(chain, "add"):  # a HookChain: add, not replace
            chain.add(self.on_module_load)
            self.restore.append(lambda: chain.remove(self.on_module_load))
            self.monitor._watch("triton.kernel_load")

    def _hook_jit(self, runtime) -> None:
        prev_cache, prev_post = runtime.jit_cache_hook, runtime.jit_post_compile_hook

        def cache_hook(**kw):
            skip = prev_cache(**kw) if prev_cache else None
            self.on_jit_miss(kw)
            return skip

        def post_hook(**kw):
            self._in_jit.value = False
            return prev_post(**kw) if prev_post else None

        self._set(runtime, "jit_cache_hook", cache_hook)
        self._set(runtime, "jit_post_compile_hook", post_hook, "triton.jit")

    def _hook_listener(self, compilation) -> None:
        prev_listener = compilation.listener

        def listener(**kw):
            if prev_listener:
                prev_listener(**kw)
            self.on_compile(kw)

        self._set(compilation, "listener", listener, "triton.compile")

    def on_jit_miss(self, kw: dict) -> None:
        m = self.monitor
        fn = kw.get("fn")
        name = getattr(fn, "name", None) or "?"
        self._in_jit.value = True
        m._count("jit_misses", kernel=name)
        if not m.sealed or m.loads_ok:  # loads_ok: the listener says whether it really compiled
            return
        if not kw.get("is_manual_warmup"):
            with m._lock:
                self._pending_loads += 1  # its module load at the launch is the same event
        info = kw.get("compile") or {}
        m._post_seal({
            "backend": "triton", "event": "kernel JIT compilation", "kernel": name,
            "module": getattr(fn, "module", None), "repr": kw.get("repr"),
            "key": str(kw.get("key")), "signature": _plain(info.get("signature")),
            "constants": _plain(info.get("constants")), "num_warps": info.get("num_warps"),
            "num_stages": info.get("num_stages"), "is_warmup": kw.get("is_manual_warmup"),
            "specialization_data": info.get("specialization_data"),
        })

    def on_compile(self, kw: dict) -> None:
        m = self.monitor
        hit = bool(kw.get("cache_hit"))
        total_us = getattr(kw.get("times"), "total", 0) or 0
        m._count("disk_loads" if hit else "compiled", compile_ms=total_us / 1000.0)
        if m.sealed and m.loads_ok and not hit:
            meta = kw.get("metadata") or {}
            m._post_seal({"backend": "triton", "event": "kernel compiled (not in the disk cache)",
                          "kernel": meta.get("name", "?"), "cache_hit": False})
        elif m.sealed and not m.loads_ok and not getattr(self._in_jit, "value", False):
            # Not behind a @triton.jit miss: torch-Inductor, preload(), or a direct triton.compile.
            meta = kw.get("metadata") or {}
            m._post_seal({"backend": "triton", "event": "triton.compile (not via @triton.jit)",
                          "kernel": meta.get("name", "?"), "cache_hit": hit})

    def on_module_load(self, module, function, name, metadata_group, hash_) -> None:
        m = self.monitor
        m._count("module_loads")
        if not m.sealed or m.loads_ok:
            return
        with m._lock:
            if self._pending_loads:
                self._pending_loads -= 1
                return
        # Compiled (or preloaded) before the seal but never launched: the first launch
        # still builds the launcher and loads the module in the hot path.
        m._post_seal({"backend": "triton", "event": "first launch (module load)", "kernel": name})


class DynamoWatcher(Watcher):
    """torch.compile: Dynamo calls us at the start of every frame compile (and recompile)."""

    library = "torch._dynamo"

    def _attach(self) -> None:
        try:
            from torch._dynamo.callback import callback_handler
        except Exception:  # noqa: BLE001 - older torch: no callback to register
            self.monitor._watch("torch.compile(counters)")
            return

        def on_start(*_args, **_kw):
            m = self.monitor
            m._count("dynamo_compiles")
            if m.sealed:  # the stack is read only for what a user must be told
                m._post_seal({"backend": "torch.compile", **compiling_frame(sys._getframe())})

        callback_handler.register_start_callback(on_start)
        self.restore.append(lambda: callback_handler.remove_start_callback(on_start))
        self.monitor._watch("torch.compile")


def compiling_frame(frame) -> dict:
    """The event of the function Dynamo is compiling, read from the stack its start callback runs on:
    convert_frame's ``_compile(code, ...)`` holds the code object, and a cache entry where the
    function has graphs already (a recompile: the guards of every one failed). Where the stack does
    not show it (another torch), the event says only that a frame compiled."""
    while frame is not None:
        code = frame.f_locals.get("code") if frame.f_code.co_name == "_compile" else None
        if isinstance(code, types.CodeType) and frame.f_code.co_filename.endswith("convert_frame.py"):
            again = frame.f_locals.get("cache_entry") is not None
            where = f"{code.co_filename}:{code.co_firstlineno}"
            return {"event": "dynamo recompile" if again else "dynamo compile", "kernel": code.co_name,
                    "repr": f"({where}; TORCH_LOGS=recompiles names the guard that failed)" if again else f"({where})"}
        frame = frame.f_back
    return {"event": "dynamo compile", "kernel": "torch.compile frame"}


def deep_gemm_cache_dir() -> str:
    """Where DeepGEMM writes its kernels under vLLM (executor/caches/roots.py)."""
    return deep_gemm_install.writable_root()


def deep_gemm_kernel_name(entry: str) -> str:
    """'kernel.sm90_fp8_gemm_1d2d.5b0c...' (2.5, 2.6) or 'sm90_fp8_gemm_1d2d.5b0c...' (2.8) -> the name."""
    parsed = deep_gemm_install.parse_entry(entry)
    if parsed is not None:
        return parsed[1]
    rest = entry[len("kernel."):] if entry.startswith("kernel.") else entry
    name, dot, _hash = rest.rpartition(".")
    return name if dot else rest


_VERIFY_STEP = re.compile(r"verify/(?P<shape>[^/]+)/m(?P<m>\d+)")


class DeepGemmWatcher(Watcher):
    """DeepGEMM kernels: compiles are complete entries appearing in its JIT cache, loads are
    entries whose ``.committed`` marker a hit touched (executor.caches.deep_gemm_install has the
    layouts).

    One kernel is one directory, counted once it is complete: with its cubin (2.5, 2.6), and
    its ``.committed`` marker (2.8), at the first step boundary that sees it so. Every root of
    ``DG_JIT_CACHE_DIR`` is watched. Loads are counted where the layout records them (2.8
    touches the marker on every disk hit, once per kernel and process); 2.5 and 2.6 leave no
    trace of a load, so there the count stays None (shown "-"), never a false 0. The cache may
    not exist until the first compile, and an unreadable entry is looked at again next time."""

    library = deep_gemm_install.MODULES

    def __init__(self, monitor: "Monitor"):
        super().__init__(monitor)
        self.roots: list[str] = []
        self.seen: dict[str, int | None] = {}  # entry path -> marker mtime (None: legacy)
        self.records_loads = False           # a deepjit entry was seen: loads are observable

    def ready(self) -> bool:
        return any(name in sys.modules for name in self.library)

    def _attach(self) -> None:
        self.roots = deep_gemm_install.cache_roots()
        self.seen = {e.path: e.mtime_ns for e in self._entries()}
        self.records_loads = any(m is not None for m in self.seen.values())
        self.monitor._watch("deep_gemm.cache_dir")

    def _entries(self) -> list:
        return [e for root in self.roots for e in deep_gemm_install.scan(root)]

    def absorb(self, dirnames) -> None:
        """Entries compiled elsewhere (the precompile pool): seen, not this process's compiles."""
        with self.monitor._lock:
            for entry in self._entries():
                if entry.dirname in dirnames:
                    self.seen[entry.path] = entry.mtime_ns

    def poll(self) -> None:
        m = self.monitor
        if m.pool_busy is not None and m.pool_busy():
            return  # the precompile pool is compiling into the same cache: its kernels, not ours
        with m._lock:  # steps may end on several threads: each entry is counted once
            new, loaded = self._changes()
            m._step.deep_gemm_entries += [entry.dirname for entry in new]
        if loaded or self.records_loads:
            m._count("deep_gemm_loads", len(loaded))
        if new:
            m._count("deep_gemm_jit", len(new))
            m._post_seal(*(self.event(entry.dirname, entry.root) for entry in new))

    def _changes(self) -> tuple[list, list]:
        new, loaded = [], []
        for entry in self._entries():
            if entry.path not in self.seen:
                new.append(entry)
            elif entry.mtime_ns is not None and entry.mtime_ns != self.seen[entry.path]:
                loaded.append(entry)
            self.seen[entry.path] = entry.mtime_ns
            self.records_loads = self.records_loads or entry.mtime_ns is not None
        return new, loaded

    def event(self, entry: str, root: str | None = None) -> dict:
        out = {"backend": "deep_gemm", "event": "JIT compilation", "kernel": deep_gemm_kernel_name(entry),
               "cache_entry": entry, "cache_dir": root or (self.roots[0] if self.roots else None)}
        # The hot-path check names its calls verify/<shape key>/m<M>: the GEMM that compiled it.
        match = _VERIFY_STEP.fullmatch(self.monitor.step_id or "")
        if match:
            out.update(shape=match["shape"], m=int(match["m"]))
        return out


class FlashInferWatcher(Watcher):
    """FlashInfer JIT: module builds, seen by wrapping ``build`` of the JitSpec classes.

    FlashInfer 0.6 declares ``JitSpec.build`` abstract and ``JitSpecNvcc`` implements it, so
    every class in the hierarchy that defines ``build`` is wrapped. Every process calls
    ``build()`` when it loads a module and ninja finds nothing to do when the ``.so`` is up to
    date (bench/RESULTS.md, part F, "Found on the way"): a build counts as a compile only when
    the module's library file is new or newer afterwards."""

    library = "flashinfer"

    def _attach(self) -> None:
        try:
            from flashinfer.jit import core
        except Exception:  # noqa: BLE001 - a FlashInfer without the JIT package
            return
        base = getattr(core, "JitSpec", None)
        if base is None:
            return
        for cls in (base, *_subclasses(base)):
            if "build" in vars(cls):
                self._set(cls, "build", self._monitored(vars(cls)["build"]), "flashinfer.jit")

    def _monitored(self, build):
        monitor = self.monitor

        def monitored_build(spec, *a, **kw):
            before = library_mtime(spec)
            try:
                return build(spec, *a, **kw)
            finally:
                after = library_mtime(spec)
                if after is not None and after != before:
                    name = getattr(spec, "name", "flashinfer")
                    monitor._count("flashinfer_jit", kernel=name)
                    monitor._post_seal({"backend": "flashinfer", "event": "JIT module build", "kernel": name})

        return monitored_build


def _subclasses(cls) -> list:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def library_mtime(spec) -> int | None:
    """mtime of the module's .so (FlashInfer's ``get_library_path``), or None when absent."""
    try:
        path = spec.get_library_path()
        return os.stat(path).st_mtime_ns
    except Exception:  # noqa: BLE001 - no library yet, or an older JitSpec without the method
        return None


WATCHERS = (TritonWatcher, DynamoWatcher, DeepGemmWatcher, FlashInferWatcher)


# --- the monitor: counts per step, the seal, post-seal events -----------------------------------

class Monitor:
    """JIT compile counters with a seal; install() hooks in, uninstall() restores."""

    def __init__(self, mode: str = "warn", jsonl_path: str | None = None, verbose: bool = False):
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
        self.watchers = [cls(self) for cls in WATCHERS]
        self._step = StepCounts()
        self._lock = threading.RLock()

    # --- install / uninstall -------------------------------------------------------------

    def install(self) -> "Monitor":
        if self.installed or self.mode == "off":
            return self
        self.installed = True
        self._attach_ready()
        return self

    def uninstall(self) -> None:
        for watcher in reversed(self.watchers):
            watcher.detach()
        self.installed = False

    def _attach_ready(self) -> None:
        """Hook libraries the process has imported since install (cheap when nothing changed)."""
        for watcher in self.watchers:
            if not watcher.attached and watcher.ready():
                watcher.attach()

    def absorb_deep_gemm(self, dirnames) -> None:
        """DeepGEMM kernels another process compiled (the precompile pool, which counts them):
        not this process's compiles when they show up in the cache."""
        for watcher in self.watchers:
            if isinstance(watcher, DeepGemmWatcher) and watcher.attached:
                watcher.absorb(set(dirnames))

    def _watch(self, label: str) -> None:
        if label not in self.watching:
            self.watching.append(label)

    # --- events from the watchers ----------------------------------------------------------

    def _count(self, name: str, n: int = 1, kernel: str | None = None, compile_ms: float = 0.0) -> None:
        """Add to the running step and to the before- or after-seal totals."""
        with self._lock:
            for target in (self._step, self.after_seal if self.sealed else self.totals):
                setattr(target, name, (getattr(target, name) or 0) + n)
                target.compile_ms += compile_ms
                if kernel is not None and name == "jit_misses":
                    target.kernels[kernel] = target.kernels.get(kernel, 0) + n

    def _post_seal(self, *events: dict) -> None:
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
        with self._lock:
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
        for watcher in self.watchers:
            if watcher.attached:
                watcher.poll()

    # --- steps and seal ----------------------------------------------------------------------

    def begin_step(self, step_id: str | None) -> None:
        if self.mode == "off":
            return
        self._poll()
        with self._lock:
            self.step_id = step_id
            self._step = StepCounts()

    def end_step(self) -> StepCounts | None:
        """Counts since begin_step (None when the monitor is off)."""
        if self.mode == "off":
            return None
        try:
            self._poll()  # DeepGEMM's kernels of this step, named with its step id
        finally:  # also when a post-seal DeepGEMM compile raises (mode error): the step is over
            with self._lock:
                counts, self._step = self._step, StepCounts()
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
        return {
            "mode": self.mode, "watching": list(self.watching), "sealed": self.sealed,
            "before_seal": self.totals.as_dict(), "after_seal": self.after_seal.as_dict(),
            "post_seal_events": list(self.post_seal_events), "jsonl": self.jsonl_path,
        }


def _plus(a, b):
    """a + b where None means "not counted" (unlike 0): None only when both are."""
    return None if a is None and b is None else (a or 0) + (b or 0)


def _plain(value):
    """JSON-friendly form of Triton's signature/constants dicts (keys may be tuples or params)."""
    if isinstance(value, dict):
        return {str(getattr(k, "name", k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


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
