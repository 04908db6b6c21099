"""vLLM's own first calls to FlashInfer JIT modules that the pool was building: what each waited.

The pool builds a module in a CUDA-free worker under FlashInfer's file lock (executor/backends/
flashinfer_jit.py); vLLM's process, calling the module first (its profile run's sampler, say), takes
the same lock in ``JitSpec.build_and_load`` and so waits for that module alone, then finds the .so.
Wrapping ``build_and_load`` in vLLM's process tells those waits apart: a call that found the lock
held by another process waited for the pool. They go to vLLM's log and the report. And where
FlashInfer's prebuilt JIT cache (the flashinfer-jit-cache package) is absent, the log says what the
modules cost here, which is what it would save.
"""

from __future__ import annotations

import importlib.util
import threading
import time

PREBUILT = "flashinfer_jit_cache"  # the package FlashInfer loads prebuilt modules from (flashinfer/jit/env.py)


def prebuilt_cache_installed() -> bool:
    return importlib.util.find_spec(PREBUILT) is not None


class FlashInferWaits:
    """``JitSpec.build_and_load`` of this process wrapped while installed (see the module docstring)."""

    def __init__(self):
        self.waits: list[dict] = []  # {"module", "waited_s"}: calls that found the pool's build under way
        self._cls = self._original = None
        self._lock = threading.Lock()

    def install(self) -> bool:
        """Wrap FlashInfer's build_and_load (where FlashInfer is installed); True if wrapped."""
        if self._cls is not None or importlib.util.find_spec("flashinfer") is None:
            return self._cls is not None
        try:
            from flashinfer.jit import core
        except Exception:  # noqa: BLE001 - a FlashInfer that does not import: vLLM will say it
            return False
        cls = getattr(core, "JitSpec", None)
        original = vars(cls).get("build_and_load") if cls is not None else None
        if original is None:
            return False
        self._cls, self._original = cls, original
        cls.build_and_load = self._wrapped(original)
        return True

    def uninstall(self) -> None:
        if self._cls is not None:
            self._cls.build_and_load = self._original
            self._cls = self._original = None

    def _wrapped(self, original):
        waits = self

        def build_and_load(spec, *args, **kwargs):
            busy = held_elsewhere(getattr(spec, "lock_path", None))
            began = time.perf_counter()
            try:
                return original(spec, *args, **kwargs)
            finally:
                if busy:
                    waits.add(getattr(spec, "name", "?"), time.perf_counter() - began)

        return build_and_load

    def add(self, module: str, seconds: float) -> None:
        with self._lock:
            self.waits.append({"module": module, "waited_s": round(seconds, 3)})

    def line(self) -> str | None:
        """The waits as a clause of vLLM's log line (None: vLLM never waited for a module)."""
        if not self.waits:
            return None
        return "vLLM waited for the pool's FlashInfer build of " + ", ".join(
            f"{w['module']} {w['waited_s']:.1f} s" for w in self.waits)


def held_elsewhere(lock_path) -> bool:
    """Whether another process holds FlashInfer's lock of a module now (a try that takes nothing)."""
    if not lock_path:
        return False
    try:
        from filelock import FileLock, Timeout
    except ImportError:
        return False
    lock = FileLock(str(lock_path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    except OSError:
        return False
    lock.release()
    return False


def prebuilt_line(records: list) -> str | None:
    """Where flashinfer-jit-cache is absent: the modules the pool built here and their seconds (the
    pool summary's records), what the prebuilt cache would save (None where it is installed or no
    module was built)."""
    built = [r for r in records if r.get("backend") == "flashinfer_jit" and r.get("status") == "ok"
             and r.get("compiled")]
    if not built or prebuilt_cache_installed():
        return None
    modules = ", ".join(f"{r['key'].removeprefix('flashinfer.jit[').rstrip(']')} {r.get('wall_s') or 0.0:.1f} s"
                        for r in built)
    return ("FlashInfer's prebuilt JIT cache (flashinfer-jit-cache, on FlashInfer's own wheel index) is not "
            f"installed: the pool built its modules here ({modules}); with it, nothing would be built")
