"""Count every JIT compile, per step, and catch the ones that happen after the warmup.

Usable on its own by a serving process::

    from executor import jit_monitor
    jit_monitor.activate(mode="warn", jsonl_path="/var/log/warmup-misses.jsonl")
    ... warm up ...
    jit_monitor.seal()          # from now on every compile is a warmup miss

What it watches (each only where the library is present; nothing is imported that
the process has not imported already, except Triton when it is installed):

* Triton ``@triton.jit`` in-memory misses: ``knobs.runtime.jit_cache_hook`` (fires
  before the compile or disk load, names the kernel and its specialization) and
  ``jit_post_compile_hook``;
* every ``triton.compile()``: ``knobs.compilation.listener`` with ``cache_hit``, so a
  miss is split into *compiled* and *loaded from the disk cache*; it also sees
  torch-Inductor's kernels, which bypass the JIT hooks;
* first-use module loads: ``knobs.runtime.kernel_load_start_hook`` (a HookChain);
* torch.compile: Dynamo's compile-start callback and ``counters["stats"]["unique_graphs"]``
  (only when ``torch._dynamo`` is already imported);
* DeepGEMM: new kernels in its JIT cache directory (``DG_JIT_CACHE_DIR``, default
  ``~/.deep_gemm``), counted at step boundaries; DeepGEMM has no compile hook;
* FlashInfer: ``flashinfer.jit`` module builds (``JitSpec.build`` wrapped) and new
  entries in its JIT directory.

After ``seal()`` each new compile is logged with the kernel name and its
specialization (mode ``warn``) or raises ``JitAfterSealError`` from inside the
launch (mode ``error``; Triton then skips the launch), and is appended as one JSON
line to ``jsonl_path`` so that a later plan can cover it. Without Triton (or torch)
the monitor is a harmless no-op for those parts.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger("executor.jit_monitor")

MODES = ("off", "warn", "error")
COUNTERS = ("jit_misses", "compiled", "disk_loads", "module_loads", "dynamo_compiles",
            "deep_gemm_jit", "flashinfer_jit")


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
    flashinfer_jit: int = 0   # FlashInfer JIT module builds
    compile_ms: float = 0.0   # Triton compile time (listener), real compiles and disk loads
    kernels: dict = field(default_factory=dict)  # kernel name -> in-memory misses

    def add(self, other: "StepCounts") -> None:
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.compile_ms += other.compile_ms
        for k, v in other.kernels.items():
            self.kernels[k] = self.kernels.get(k, 0) + v

    def as_dict(self) -> dict:
        out = {name: getattr(self, name) for name in COUNTERS}
        out["compile_ms"] = round(self.compile_ms, 3)
        out["kernels"] = dict(sorted(self.kernels.items()))
        return out


def _dir_entries(path: str | None) -> int:
    """Files below path (a JIT cache), or 0 when it does not exist."""
    if not path or not os.path.isdir(path):
        return 0
    n = 0
    for _root, _dirs, files in os.walk(path):
        n += len(files)
    return n


class Monitor:
    """JIT compile counters with a seal; install() hooks in, uninstall() restores."""

    def __init__(self, mode: str = "warn", jsonl_path: str | None = None, verbose: bool = False):
        if mode not in MODES:
            raise ValueError(f"jit monitor mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.jsonl_path = jsonl_path
        self.verbose = verbose
        self.sealed = False
        self.sealed_at: float | None = None
        self.installed = False
        self.watching: list[str] = []        # what is hooked, for the report
        self.totals = StepCounts()           # before the seal
        self.after_seal = StepCounts()       # after the seal
        self.post_seal_events: list[dict] = []
        self.step_id: str | None = None
        self._step = StepCounts()
        self._lock = threading.RLock()
        self._in_jit = threading.local()
        self._restore: list = []
        self._triton_ok = False
        self._dynamo_attached = False
        self._flashinfer_attached = False
        self._dynamo_graphs = 0
        self._dg_dir: str | None = None
        self._dg_files = 0
        self._fi_dir: str | None = None
        self._fi_files = 0
        self._pending_loads = 0

    # --- install / uninstall -------------------------------------------------------------

    def install(self) -> "Monitor":
        if self.installed or self.mode == "off":
            return self
        self._install_triton()
        self._attach_libraries()
        self.installed = True
        return self

    def uninstall(self) -> None:
        for undo in reversed(self._restore):
            try:
                undo()
            except Exception:  # noqa: BLE001 - restoring must not fail the caller
                pass
        self._restore.clear()
        self.installed = False
        self._dynamo_attached = self._flashinfer_attached = False

    def _install_triton(self) -> None:
        try:
            from triton import knobs
        except Exception:  # noqa: BLE001 - no Triton (or one without knobs, < 3.4): nothing to hook
            return
        runtime, compilation = knobs.runtime, knobs.compilation
        if not hasattr(runtime, "jit_cache_hook"):
            return
        self._triton_ok = True
        prev_cache, prev_post = runtime.jit_cache_hook, runtime.jit_post_compile_hook

        def cache_hook(**kw):
            skip = prev_cache(**kw) if prev_cache else None
            self._on_jit_miss(kw)
            return skip

        def post_hook(**kw):
            self._in_jit.value = False
            return prev_post(**kw) if prev_post else None

        runtime.jit_cache_hook = cache_hook
        runtime.jit_post_compile_hook = post_hook
        self._restore.append(lambda: setattr(runtime, "jit_cache_hook", prev_cache))
        self._restore.append(lambda: setattr(runtime, "jit_post_compile_hook", prev_post))
        self.watching.append("triton.jit")

        if hasattr(compilation, "listener"):
            prev_listener = compilation.listener

            def listener(**kw):
                if prev_listener:
                    prev_listener(**kw)
                self._on_triton_compile(kw)

            compilation.listener = listener
            self._restore.append(lambda: setattr(compilation, "listener", prev_listener))
            self.watching.append("triton.compile")

        chain = getattr(runtime, "kernel_load_start_hook", None)
        if chain is not None and hasattr(chain, "add"):
            chain.add(self._on_module_load)
            self._restore.append(lambda: chain.remove(self._on_module_load))
            self.watching.append("triton.kernel_load")

    def _attach_libraries(self) -> None:
        """Hook libraries the process has imported since install (cheap when nothing changed)."""
        if self.mode == "off":
            return
        if not self._dynamo_attached and "torch._dynamo" in sys.modules:
            self._attach_dynamo()
        if self._dg_dir is None and "deep_gemm" in sys.modules:
            self._dg_dir = os.environ.get("DG_JIT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".deep_gemm")
            self._dg_files = _dir_entries(self._dg_dir)
            self.watching.append("deep_gemm.cache_dir")
        if not self._flashinfer_attached and "flashinfer" in sys.modules:
            self._attach_flashinfer()

    def _attach_dynamo(self) -> None:
        self._dynamo_attached = True
        try:
            from torch._dynamo.utils import counters
            self._dynamo_graphs = counters["stats"]["unique_graphs"]
        except Exception:  # noqa: BLE001
            pass
        try:
            from torch._dynamo.callback import callback_handler
        except Exception:  # noqa: BLE001 - older torch: counters only
            self.watching.append("torch.compile(counters)")
            return

        def on_start(*_args, **_kw):
            self._on_dynamo_compile()

        callback_handler.register_start_callback(on_start)
        self._restore.append(lambda: callback_handler.remove_start_callback(on_start))
        self.watching.append("torch.compile")

    def _attach_flashinfer(self) -> None:
        self._flashinfer_attached = True
        try:
            from flashinfer.jit import core, env
        except Exception:  # noqa: BLE001
            return
        self._fi_dir = str(getattr(env, "FLASHINFER_JIT_DIR", "") or "") or None
        self._fi_files = _dir_entries(self._fi_dir)
        spec = getattr(core, "JitSpec", None)
        build = getattr(spec, "build", None)
        if build is None:
            return
        monitor = self

        def monitored_build(self_spec, *a, **kw):
            monitor._count("flashinfer_jit", kernel=getattr(self_spec, "name", "flashinfer"))
            monitor._post_seal({"backend": "flashinfer", "event": "JIT module build",
                                "kernel": getattr(self_spec, "name", "?")})
            return build(self_spec, *a, **kw)

        spec.build = monitored_build
        self._restore.append(lambda: setattr(spec, "build", build))
        self.watching.append("flashinfer.jit")

    # --- events ----------------------------------------------------------------------------

    def _count(self, name: str, n: int = 1, kernel: str | None = None) -> None:
        with self._lock:
            for target in (self._step, self.after_seal if self.sealed else self.totals):
                setattr(target, name, getattr(target, name) + n)
                if kernel is not None and name == "jit_misses":
                    target.kernels[kernel] = target.kernels.get(kernel, 0) + n

    def _on_jit_miss(self, kw: dict) -> None:
        fn = kw.get("fn")
        name = getattr(fn, "name", None) or "?"
        self._in_jit.value = True
        self._count("jit_misses", kernel=name)
        if self.sealed:
            if not kw.get("is_manual_warmup"):
                self._pending_loads += 1  # its module load at the launch is the same event
            info = kw.get("compile") or {}
            self._post_seal({
                "backend": "triton", "event": "kernel JIT compilation", "kernel": name,
                "module": getattr(fn, "module", None), "repr": kw.get("repr"),
                "key": str(kw.get("key")), "signature": _plain(info.get("signature")),
                "constants": _plain(info.get("constants")), "num_warps": info.get("num_warps"),
                "num_stages": info.get("num_stages"), "is_warmup": kw.get("is_manual_warmup"),
                "specialization_data": info.get("specialization_data"),
            })

    def _on_triton_compile(self, kw: dict) -> None:
        hit = bool(kw.get("cache_hit"))
        times = kw.get("times")
        total_us = getattr(times, "total", 0) or 0
        with self._lock:
            self._count("disk_loads" if hit else "compiled")
            for target in (self._step, self.after_seal if self.sealed else self.totals):
                target.compile_ms += total_us / 1000.0
        if self.sealed and not getattr(self._in_jit, "value", False):
            # Not behind a @triton.jit miss: torch-Inductor, preload(), or a direct triton.compile.
            meta = kw.get("metadata") or {}
            self._post_seal({"backend": "triton", "event": "triton.compile (not via @triton.jit)",
                             "kernel": meta.get("name", "?"), "cache_hit": hit})

    def _on_module_load(self, module, function, name, metadata_group, hash_) -> None:
        self._count("module_loads")
        if self.sealed:
            with self._lock:
                if self._pending_loads:
                    self._pending_loads -= 1
                    return
            # Compiled (or preloaded) before the seal but never launched: the first launch
            # still builds the launcher and loads the module in the hot path.
            self._post_seal({"backend": "triton", "event": "first launch (module load)", "kernel": name})

    def _on_dynamo_compile(self) -> None:
        self._count("dynamo_compiles")
        self._post_seal({"backend": "torch.compile", "event": "dynamo compile", "kernel": "torch.compile frame"})

    def _post_seal(self, event: dict) -> None:
        if not self.sealed:
            return
        event = {"time": time.time(), "step": self.step_id, **event}
        with self._lock:
            self.post_seal_events.append(event)
        if self.jsonl_path:
            try:
                with open(self.jsonl_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(event, default=str, sort_keys=True) + "\n")
            except OSError as e:
                log.warning("cannot append to %s: %s", self.jsonl_path, e)
        message = (f"{event['backend']} {event['event']} after warmup was sealed: {event.get('kernel')}"
                   + (f" {event['repr']}" if event.get("repr") else "")
                   + ". This is a latency spike in serving; extend the warmup plan to cover it.")
        if self.mode == "error":
            raise JitAfterSealError(message)
        log.warning(message)

    def _poll(self) -> None:
        """Counters that have no hook: Dynamo graphs, DeepGEMM and FlashInfer cache files."""
        self._attach_libraries()
        if self._dg_dir is not None:
            now = _dir_entries(self._dg_dir)
            if now > self._dg_files:
                self._count("deep_gemm_jit", now - self._dg_files)
                self._post_seal({"backend": "deep_gemm", "event": "JIT compilation",
                                 "kernel": f"{now - self._dg_files} new file(s) in {self._dg_dir}"})
            self._dg_files = now
        if self._fi_dir is not None:
            self._fi_files = max(self._fi_files, _dir_entries(self._fi_dir))

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
        self._poll()
        with self._lock:
            counts, self._step = self._step, StepCounts()
            self.step_id = None
        return counts

    def seal(self) -> None:
        """From now on every compile is a warmup miss: logged (warn) or raised (error)."""
        if self.mode == "off":
            return
        self._poll()
        self.sealed = True
        self.sealed_at = time.time()

    def summary(self) -> dict:
        return {
            "mode": self.mode, "watching": list(self.watching), "sealed": self.sealed,
            "before_seal": self.totals.as_dict(), "after_seal": self.after_seal.as_dict(),
            "post_seal_events": list(self.post_seal_events), "jsonl": self.jsonl_path,
        }


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
