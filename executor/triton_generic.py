"""Nothing of Triton's compiles after ready for a value class the warmup did not see.

A ``@triton.jit`` kernel compiles once per specialization: each int argument's class (1, a
multiple of 16, other), each pointer's 16-byte alignment, plus the types and constexprs. Which
classes a serving process meets depends on the model (vocab sizes, strides of padded or sliced
tensors, per-block counts) and on the batch (token counts, rows), so no list of warmup shapes
covers them on a model nobody planned for. The class only adds facts the compiler may use: the
variant compiled without them (same types, same constexprs: ``kernel_model.specialization``'s
``generic_specialization``) computes the same result for every value. So:

- while open (from the worker's start to ready), every variant this process compiles or loads
  is recorded, with the arguments Triton's binder gave it;
- ``close()`` compiles (or loads from Triton's disk cache) the generic variant of each, once,
  through Triton's own ``_pack_args`` and ``_do_compile``, in a thread pool (Triton's
  AsyncCompileMode), before the JIT monitors are sealed: those compiles are the warmup's;
- after ``seal()`` a launch whose variant is missing, but whose generic variant is compiled,
  runs the generic one (and keeps it under the launch's own key, so the next such launch is a
  plain cache hit). Each such launch is reported once (``on_generic``): a finding, not a compile.
  A launch with a new type or constexpr has no generic stand-in and compiles as before, where
  the monitors see it.

Triton 3.6 and 3.7 (``JITFunction._pack_args`` / ``_do_compile``, ``compute_cache_key``) are what
this patches, on the class: the hot path (a cache hit) is untouched; both wrappers run on a miss
only. Another Triton without them: ``install`` says why and nothing is patched.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kernel_model.specialization import generic_specialization

ORIGINALS = "_warmup_planner_generic_originals"  # on JITFunction: {method name: Triton's function}
NEEDED = ("_pack_args", "_do_compile")


@dataclass(frozen=True)
class Seen:
    """One variant compiled or loaded while open: what its generic variant is built from."""

    fn: object              # the JITFunction
    device: int
    specialization: tuple   # Triton's binder's entries, hashable
    options: dict           # the launch's keyword options (num_warps, debug, ...), as the binder gave them


@dataclass(frozen=True)
class GenericUse:
    """A launch after ready that ran its generic variant instead of compiling."""

    kernel: str
    key: str
    generic_key: str


@dataclass
class CloseResult:
    """What ``close`` did: generic variants compiled or loaded, how many the variants seen
    already covered, and the wall time (one count per fact: the log line prints these)."""

    seen: int = 0
    built: int = 0
    already: int = 0
    failed: list = field(default_factory=list)  # (kernel, error) of a generic variant that would not compile
    seconds: float = 0.0


def _freeze(value):
    """The binder's entries as tuples all the way down (a tuple argument's are nested), hashable."""
    return tuple(_freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


def kernel_name(fn) -> str:
    inner = getattr(fn, "fn", None)
    return getattr(inner, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def constexpr_value(entry):
    """The argument a constexpr entry stands for (a tuple argument item by item); None elsewhere:
    ``_pack_args`` reads the bound arguments at the constexprs' paths only."""
    ty, cls = entry[0], entry[1]
    if isinstance(ty, tuple):
        return tuple(constexpr_value((t, c)) for t, c in zip(ty, cls))
    return cls if ty == "constexpr" else None


class GenericVariants:
    """The generic-variant closure of one process (see the module docstring)."""

    def __init__(self, on_generic=None, threads: int = 8, load: bool = True):
        self.on_generic = on_generic or (lambda use: None)
        self.threads = max(1, int(threads))
        self.load = load  # load each generic variant and build its launcher at close (a GPU process)
        self.reason: str | None = None  # why nothing is patched, if so
        self.uses: list[GenericUse] = []
        self._seen: dict[tuple, Seen] = {}
        self._open = False
        self._sealed = False
        self._local = threading.local()
        self._lock = threading.Lock()
        self._jit = None

    # --- install / uninstall -------------------------------------------------------------------------

    def install(self) -> bool:
        """Patch Triton's JITFunction (once per process: the first closure installed owns it) and
        start recording. False, with ``reason`` set, where Triton or its internals are not there."""
        try:
            from triton.runtime import jit
        except Exception as e:  # noqa: BLE001 - no Triton: nothing of it can compile either
            self.reason = f"Triton is not importable ({type(e).__name__})"
            return False
        cls = jit.JITFunction
        missing = [name for name in NEEDED if not callable(getattr(cls, name, None))]
        if missing or not callable(getattr(jit, "compute_cache_key", None)):
            self.reason = f"this Triton's JITFunction has no {', '.join(missing) or 'compute_cache_key'}"
            return False
        if ORIGINALS in vars(cls):
            owner = vars(cls)[ORIGINALS]["owner"]
            if owner is not self:
                self.reason = "another closure is installed in this process"
                return False
            return True
        self._jit = jit
        originals = {name: vars(cls)[name] for name in NEEDED}
        setattr(cls, ORIGINALS, {**originals, "owner": self})
        cls._pack_args = self._wrap_pack_args(originals["_pack_args"])
        cls._do_compile = self._wrap_do_compile(originals["_do_compile"])
        self._open = True
        return True

    def uninstall(self) -> None:
        if self._jit is None:
            return
        cls = self._jit.JITFunction
        originals = vars(cls).get(ORIGINALS)
        if originals is not None and originals["owner"] is self:
            for name in NEEDED:
                setattr(cls, name, originals[name])
            delattr(cls, ORIGINALS)
        self._open = self._sealed = False
        self._jit = None

    @property
    def installed(self) -> bool:
        return self._jit is not None

    # --- the wrappers (a cache miss only) ------------------------------------------------------------

    def _wrap_pack_args(self, pack_args):
        closure = self

        def _pack_args(fn, backend, kwargs, bound_args, specialization, options):
            # run() calls this on a miss, with the binder's entries, right before _do_compile:
            # the entries travel to it on this thread.
            closure._local.pending = (fn, _freeze(specialization), dict(options))
            return pack_args(fn, backend, kwargs, bound_args, specialization, options)
        return _pack_args

    def _wrap_do_compile(self, do_compile):
        closure = self

        def _do_compile(fn, key, signature, device, constexprs, options, attrs, warmup):
            pending = getattr(closure._local, "pending", None)
            closure._local.pending = None
            if pending is None or pending[0] is not fn:  # not through run() (preload): Triton's way
                return do_compile(fn, key, signature, device, constexprs, options, attrs, warmup)
            _, specialization, raw_options = pending
            if closure._sealed:
                kernel = closure._stand_in(fn, key, device, specialization, raw_options)
                if kernel is not None:
                    return kernel
            kernel = do_compile(fn, key, signature, device, constexprs, options, attrs, warmup)
            if closure._open and kernel is not None:
                closure._record(Seen(fn, device, specialization, raw_options))
            return kernel
        return _do_compile

    def _record(self, seen: Seen) -> None:
        ident = (id(seen.fn), seen.device, seen.specialization, repr(sorted(seen.options.items())))
        with self._lock:
            self._seen.setdefault(ident, seen)

    # --- close: the generic variants, before ready ---------------------------------------------------

    def generic_key(self, fn, device: int, specialization, options: dict) -> tuple[str, list] | None:
        """The cache key and entries of the generic variant; None where it is the variant itself."""
        declared = [bool(getattr(p, "is_constexpr", False)) for p in fn.params]
        generic = generic_specialization(specialization, declared)
        if [tuple(e) for e in generic] == [tuple(e) for e in specialization]:
            return None
        _, key_cache, _, _, _ = fn.device_caches[device]
        return self._jit.compute_cache_key(key_cache, generic, options), generic

    def close(self) -> CloseResult:
        """Compile or load the generic variant of every variant seen; recording stops."""
        started = time.perf_counter()
        result = CloseResult()
        if self._jit is None:
            return result
        self._open = False
        with self._lock:
            seen = list(self._seen.values())
        result.seen = len(seen)
        todo = self._to_build(seen, result)
        if todo:
            self._build(todo, result)
        result.seconds = time.perf_counter() - started
        return result

    def _to_build(self, seen: list, result: CloseResult) -> dict:
        todo: dict[tuple, tuple] = {}
        for s in seen:
            found = self.generic_key(s.fn, s.device, s.specialization, s.options)
            if found is None:
                result.already += 1
                continue
            key, generic = found
            cache = s.fn.device_caches[s.device][0]
            if key in cache or (id(s.fn), s.device, key) in todo:
                result.already += 1
                continue
            todo[(id(s.fn), s.device, key)] = (s, key, generic)
        return todo

    def _build(self, todo: dict, result: CloseResult) -> None:
        """Triton's own packing and compile path for each generic variant, ``warmup=True`` (no
        launch), in Triton's async compile mode: the compiles overlap, each lands in the kernel's
        in-memory cache under its key and in Triton's disk cache (which a bundle carries)."""
        from triton.runtime._async_compile import AsyncCompileMode

        originals = vars(self._jit.JITFunction)[ORIGINALS]
        pack_args, do_compile = originals["_pack_args"], originals["_do_compile"]
        futures = []
        with ThreadPoolExecutor(self.threads, thread_name_prefix="warmup-generic") as pool:
            with AsyncCompileMode(pool, ignore_errors=True):
                for s, key, generic in todo.values():
                    try:
                        futures.append((s, key, self._submit(s, key, generic, pack_args, do_compile)))
                    except Exception as e:  # noqa: BLE001 - one variant that will not pack: the rest go on
                        result.failed.append((kernel_name(s.fn), f"{type(e).__name__}: {e}"))
        self._build_launchers([s.fn.device_caches[s.device][0].get(key) for s, key, _ in futures])
        for s, key, future in futures:
            cache = s.fn.device_caches[s.device][0]
            error = (_future_error(future) or "not compiled") if key not in cache else self._load(cache, key)
            if error is None:
                result.built += 1
            else:
                result.failed.append((kernel_name(s.fn), error))

    def _build_launchers(self, kernels: list) -> None:
        """Each variant's launcher built beforehand, in the pool: a C module per signature that the
        host compiler builds into Triton's cache (a subprocess, so the builds overlap), where the
        serial _load then finds it. A build that fails here fails again in _load, which says it."""
        if not self.load:
            return
        from triton.runtime.driver import driver

        def build(kernel) -> None:
            try:
                kernel = kernel.result() if hasattr(kernel, "result") else kernel
                driver.active.launcher_cls(kernel.src, kernel.metadata)
            except Exception:  # noqa: BLE001 - said by _load
                pass
        with ThreadPoolExecutor(self.threads, thread_name_prefix="warmup-launcher") as pool:
            list(pool.map(build, [k for k in kernels if k is not None]))

    def _load(self, cache: dict, key: str) -> str | None:
        """The variant loaded on the device and its launcher built now, before ready: Triton does
        both at a variant's first launch, and the launcher is a C module the host compiler builds
        (per signature: the generic variant's differs from the variants seen). A variant that will
        not load (out of resources) leaves the cache: a miss then compiles, as without this."""
        if not self.load:
            return None
        kernel = cache[key]
        try:
            kernel = kernel.result() if hasattr(kernel, "result") else kernel
            kernel._init_handles()
            cache[key] = kernel
            return None
        except Exception as e:  # noqa: BLE001 - that variant only
            del cache[key]
            return f"{type(e).__name__}: {e}"

    @staticmethod
    def _submit(s: Seen, key: str, generic: list, pack_args, do_compile):
        fn = s.fn
        _, _, _, backend, _ = fn.device_caches[s.device]
        bound = {p.name: constexpr_value(e) for p, e in zip(fn.params, generic)}
        options, signature, constexprs, attrs = pack_args(fn, backend, dict(s.options), bound, generic, s.options)
        return do_compile(fn, key, signature, s.device, constexprs, options, attrs, True)

    # --- seal: a miss runs its generic variant -------------------------------------------------------

    def seal(self) -> None:
        self._open = False
        self._sealed = True

    def _stand_in(self, fn, key: str, device: int, specialization, options: dict):
        """The compiled generic variant for a missed launch, kept under the launch's key; None
        where there is none (a new type or constexpr: Triton compiles, the monitors see it)."""
        try:
            found = self.generic_key(fn, device, specialization, options)
        except Exception:  # noqa: BLE001 - a key we cannot form: Triton's own way
            return None
        if found is None:
            return None
        generic_key, _ = found
        cache = fn.device_caches[device][0]
        kernel = cache.get(generic_key)
        if kernel is None:
            return None
        if hasattr(kernel, "result"):  # a FutureKernel of the async close
            kernel = kernel.result()
        cache[key] = kernel
        use = GenericUse(kernel_name(fn), key, generic_key)
        self.uses.append(use)
        self.on_generic(use)
        return kernel


def _future_error(future) -> str | None:
    inner = getattr(future, "future", None)
    if inner is None or not inner.done():
        return None
    error = inner.exception()
    return None if error is None else f"{type(error).__name__}: {error}"
