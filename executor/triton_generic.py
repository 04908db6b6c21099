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

Ahead (``ahead=True``, the default): ``close()`` is on the cold start's critical path (16-26
twins, 10-15 s on an H200: bench/RESULTS.md part AG), so each twin's build starts as soon as its
variant is recorded, in a pool of ``threads`` threads ("warmup-generic-N") that overlaps the rest
of the warmup (later plan stages, CUDA-graph capture). A job compiles the twin through Triton's own
``_pack_args`` and ``_do_compile`` synchronously on its thread (``warmup=True``: no launch; it lands
in the kernel's in-memory cache and Triton's disk cache) and builds its launcher; it never loads it
on the device (``_init_handles``): the current CUDA device is per thread, so loading stays in
``close()`` on the caller's thread. ``close()`` stops recording (no job is submitted after it),
waits for the jobs still running, loads the twins built ahead (``CloseResult.ahead``), and builds
the rest as before (a twin whose job failed, or that had none). A job's failure is never raised:
its twin is built again at close, where a failure is recorded (``CloseResult.failed``).
``uninstall()`` cancels the jobs not started and does not wait for those running (a compile cannot
be interrupted; one that ends after it may be seen by a monitor, the hook knobs being restored).

The JIT monitors never see a twin built ahead (``quiet_hooks``, the one place that decides it):
they count compiles per step through Triton's process-wide hook knobs (``jit_cache_hook``,
``jit_post_compile_hook``, ``compilation.listener``) into whatever step is running, on any thread
(executor/jit_monitor.py), and a job runs while a plan step or one of vLLM's phases is that step.
While installed with ahead on, those three knobs read None on a thread that builds a twin ahead
(a thread-local flag) and read as set everywhere else, so the twins are in no step's counts (the
number built ahead is ``CloseResult.ahead``, in the plugin's one line). The twins ``close()``
builds itself go through the hooks as before, in the phase that runs it.

Triton 3.6 and 3.7 (``JITFunction._pack_args`` / ``_do_compile``, ``compute_cache_key``, the hook
knobs) are what this patches, on the classes: the hot path (a cache hit) is untouched; both
wrappers run on a miss only. Another Triton without them: ``install`` says why and nothing is
patched (without the hook knobs: nothing is built ahead).

Over 400 lines: GenericVariants is one lifecycle (hooks installed, variants built in the background, loaded,
closed before vLLM's monitor starts) whose steps share its state and its lock.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field

from kernel_model.specialization import generic_specialization

ORIGINALS = "_warmup_planner_generic_originals"  # on JITFunction: {method name: Triton's function}
NEEDED = ("_pack_args", "_do_compile")
HOOKS = (("runtime", "jit_cache_hook"), ("runtime", "jit_post_compile_hook"), ("compilation", "listener"))


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
    seconds: float = 0.0    # close()'s own wall time (waiting for the jobs still running included)
    ahead: int = 0          # of ``built``: compiled in the background during the warmup, loaded at close


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


# --- the JIT monitors do not see a twin built ahead ----------------------------------------------------

_AHEAD = threading.local()  # .building: this thread builds a twin ahead (a job of the background pool)

_UNSET = object()


class _QuietHook:
    """One of Triton's hook knobs (``HOOKS``), in its knobs class while a closure is installed: a data
    descriptor that reads None on a thread building a twin ahead and, everywhere else, what was set
    (Triton's knobs keep a set hook in the instance's ``__dict__``, which this reads and writes)."""

    def __init__(self, name: str, previous):
        self.name, self.previous = name, previous

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        if getattr(_AHEAD, "building", False):
            return None
        if hasattr(self.previous, "__set__"):  # a Triton whose knob is itself a descriptor
            return self.previous.__get__(obj, objtype)
        value = obj.__dict__.get(self.name, _UNSET)
        return (None if self.previous is _UNSET else self.previous) if value is _UNSET else value

    def __set__(self, obj, value) -> None:
        if hasattr(self.previous, "__set__"):
            self.previous.__set__(obj, value)
        else:
            obj.__dict__[self.name] = value

    def __delete__(self, obj) -> None:
        if hasattr(self.previous, "__delete__"):
            self.previous.__delete__(obj)
        else:
            obj.__dict__.pop(self.name, None)


def quiet_hooks():
    """Hide the twins built ahead from every JIT monitor (see the module docstring): each hook knob
    of ``HOOKS`` reads None on the pool's threads while they build. Returns the undo (restores the
    knobs' classes as they were), or None where this Triton has no such knobs (nothing is built
    ahead then: a monitor would count the twins in the steps they overlap)."""
    try:
        from triton import knobs
    except Exception:  # noqa: BLE001 - a Triton before 3.4: no knobs
        return None
    classes = []
    for group, name in HOOKS:
        cls = type(getattr(knobs, group, None))
        if not hasattr(cls, name) or isinstance(vars(cls).get(name), _QuietHook):
            return None
        classes.append((cls, name))
    undo = []
    for cls, name in classes:
        previous = vars(cls).get(name, _UNSET)
        setattr(cls, name, _QuietHook(name, previous))
        undo.append((cls, name, previous))

    def restore() -> None:
        for cls, name, previous in reversed(undo):
            if previous is _UNSET:
                delattr(cls, name)
            else:
                setattr(cls, name, previous)
    return restore


class GenericVariants:
    """The generic-variant closure of one process (see the module docstring)."""

    def __init__(self, on_generic=None, threads: int = 8, load: bool = True, ahead: bool = True):
        self.on_generic = on_generic or (lambda use: None)
        self.threads = max(1, int(threads))
        self.load = load  # load each generic variant and build its launcher at close (a GPU process)
        self.ahead = ahead  # start each twin's build when its variant is recorded (the module docstring)
        self.reason: str | None = None  # why nothing is patched, if so
        self.uses: list[GenericUse] = []
        self._seen: dict[tuple, Seen] = {}
        self._jobs: dict[tuple, tuple] = {}  # (id(fn), device, twin key) -> (Seen, twin key, Future): ahead
        self._pool: ThreadPoolExecutor | None = None  # the jobs' threads, made at the first job
        self._unquiet = None  # quiet_hooks' undo while installed with ahead on
        self._open = False
        self._sealed = False
        self._local = threading.local()
        self._lock = threading.Lock()  # _seen, _jobs, _pool, _open against close() and the pool
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
        if self.ahead:
            self._unquiet = quiet_hooks()
            self.ahead = self._unquiet is not None  # no hook knobs to quiet: everything at close
        self._open = True
        return True

    def uninstall(self) -> None:
        """Triton as it was. The jobs not started are cancelled, those running are not waited for
        (a compile cannot be interrupted: its twin lands in the kernel's cache as any compile's would)."""
        if self._jit is None:
            return
        with self._lock:
            self._open = self._sealed = False
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        cls = self._jit.JITFunction
        originals = vars(cls).get(ORIGINALS)
        if originals is not None and originals["owner"] is self:
            for name in NEEDED:
                setattr(cls, name, originals[name])
            delattr(cls, ORIGINALS)
        if self._unquiet is not None:
            self._unquiet()
            self._unquiet = None
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
            if ident in self._seen:
                return
            self._seen[ident] = seen
            if not (self.ahead and self._open):
                return
        try:
            self._start_ahead(seen)
        except Exception:  # noqa: BLE001 - never into the caller's launch: close() builds that twin
            pass

    # --- ahead: each twin's build starts when its variant is recorded ----------------------------------

    def _start_ahead(self, seen: Seen) -> None:
        """Submit the twin's build to the pool, unless it is the variant itself, already in the
        kernel's cache, or already submitted."""
        found = self.generic_key(seen.fn, seen.device, seen.specialization, seen.options)
        if found is None:
            return
        key, generic = found
        if key in seen.fn.device_caches[seen.device][0]:
            return
        job = (id(seen.fn), seen.device, key)
        originals = vars(self._jit.JITFunction)[ORIGINALS]
        with self._lock:
            if not self._open or job in self._jobs:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="warmup-generic")
            future = self._pool.submit(self._build_ahead, seen, key, generic, originals["_pack_args"],
                                       originals["_do_compile"])
            self._jobs[job] = (seen, key, future)

    def _build_ahead(self, s: Seen, key: str, generic: list, pack_args, do_compile) -> None:
        """One job, on a pool thread: Triton's packing and compile (synchronous here: no async
        compile mode on this thread), ``warmup=True``, then the launcher; no load on the device.
        The JIT monitors do not see it (``quiet_hooks``)."""
        _AHEAD.building = True
        try:
            if self._submit(s, key, generic, pack_args, do_compile) is None:
                raise RuntimeError("not compiled")
            if self.load:
                self._build_launcher(s.fn.device_caches[s.device][0].get(key))
        finally:
            _AHEAD.building = False

    def _collect_ahead(self) -> dict:
        """Wait for the jobs still running (close); the twins they built, by job. A job that failed
        or was cancelled is not among them: close() builds that twin as any other."""
        with self._lock:
            jobs, self._jobs = self._jobs, {}
            pool, self._pool = self._pool, None
        wait_for([future for _, _, future in jobs.values()])
        if pool is not None:
            pool.shutdown(wait=False)  # every job is done: its threads end
        built = {}
        for job, (s, key, future) in jobs.items():
            if not future.cancelled() and future.exception() is None and key in s.fn.device_caches[s.device][0]:
                built[job] = (s, key)
        return built

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
        with self._lock:
            self._open = False  # no job is submitted after this
            seen = list(self._seen.values())
        result.seen = len(seen)
        ahead = self._collect_ahead()
        todo, loads = self._to_build(seen, result, ahead)
        for s, key in loads:
            error = self._load(s.fn.device_caches[s.device][0], key)
            if error is None:
                result.built += 1
                result.ahead += 1
            else:
                result.failed.append((kernel_name(s.fn), error))
        if todo:
            self._build(todo, result)
        result.seconds = time.perf_counter() - started
        return result

    def _to_build(self, seen: list, result: CloseResult, ahead: dict) -> tuple[dict, list]:
        """The twins to build here, and those built ahead (to load), once each."""
        todo: dict[tuple, tuple] = {}
        loads: dict[tuple, tuple] = {}
        for s in seen:
            found = self.generic_key(s.fn, s.device, s.specialization, s.options)
            if found is None:
                result.already += 1
                continue
            key, generic = found
            job = (id(s.fn), s.device, key)
            if job in ahead and job not in loads:
                loads[job] = ahead[job]
                continue
            cache = s.fn.device_caches[s.device][0]
            if key in cache or job in todo or job in loads:
                result.already += 1
                continue
            todo[job] = (s, key, generic)
        return todo, list(loads.values())

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
        with ThreadPoolExecutor(self.threads, thread_name_prefix="warmup-launcher") as pool:
            list(pool.map(self._build_launcher, [k for k in kernels if k is not None]))

    @staticmethod
    def _build_launcher(kernel) -> None:
        from triton.runtime.driver import driver

        try:
            kernel = kernel.result() if hasattr(kernel, "result") else kernel
            driver.active.launcher_cls(kernel.src, kernel.metadata)
        except Exception:  # noqa: BLE001 - said by _load
            pass

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
