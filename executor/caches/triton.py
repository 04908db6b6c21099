"""Triton's file cache: one directory per compile key (triton_entries.py).

- Lives in: TRITON_CACHE_DIR, else ``$TRITON_HOME/.triton/cache`` (vLLM's own Triton kernels and the
  plan's). Inductor's Triton kernels are in Inductor's cache (executor/caches/inductor.py).
- Packs: every file but the precompile pool's claims and locks; the precompile manifest is
  rewritten for the installing machine, not copied.
- Relocates: a group file ``__grp__<name>.json`` lists its entry's files by absolute path, and
  Triton opens those paths: they are pointed at the entry's place here (``ENTRY_RULES``, which the
  families holding Triton entries share). Its other files (IR, PTX, cubin, metadata) name the
  kernel's source file for debugging only; Triton finds an entry by its key.
- Is used: a kernel loaded reads its files; one compiled again is an entry of the same kernel name
  under another key. The JIT monitor counts ``triton.compile`` calls, compiled and loaded.
- Is watched (``TritonWatcher``): ``@triton.jit`` in-memory misses through
  ``knobs.runtime.jit_cache_hook`` (fires before the compile or disk load, names the kernel and its
  specialization) and ``jit_post_compile_hook``; every ``triton.compile()`` through
  ``knobs.compilation.listener`` with ``cache_hit``, so a miss is split into *compiled* and *loaded
  from the disk cache* (it also sees torch-Inductor's kernels, which bypass the JIT hooks); first-use
  module loads through ``knobs.runtime.kernel_load_start_hook``.
- Is keyed: by Triton's own build, the kernel's source, the backend, the options and an environment
  list; the report keeps the parts of each key it compiled (``compile_key_parts``) and the process's
  (``process_key_parts``, ``invalidating_env``).
"""

from __future__ import annotations

import os
import sys
import threading

from planner.hashing import digest

from . import checks, roots, triton_entries
from .family import PLAN, VLLM, Counter, Family, Monitored, PathRule, Placing, Unresolved
from .tree import Placed, collect_tree, place_children
from .watcher import Watcher


def in_entry(rel: str, path: str) -> bool:
    """Whether the file is in a Triton cache entry (a directory holding a group file)."""
    return bool(triton_entries.groups(os.path.dirname(path)))


def is_group(rel: str, path: str) -> bool:
    return os.path.basename(path).startswith(triton_entries.GROUP_PREFIX) and in_entry(rel, path)


def rewrite_group(data: bytes, relocation, final: str) -> bytes:
    """The group's files, listed where the entry will be: its own directory here."""
    return triton_entries.rehome_group(data, os.path.dirname(final))


ENTRY_RULES = (
    PathRule(is_group, rewrite_group, "Triton opens the files its group file lists"),
    PathRule(in_entry, None, "Triton finds an entry by its key; its IR and metadata name the source for debugging"),
)


def entry_check(path: str) -> list[Unresolved]:
    """A file of a Triton entry Triton would fail on: the entry goes whole."""
    entry, name = os.path.dirname(path), os.path.basename(path)
    if not triton_entries.groups(entry):
        return []
    problem = checks.by_kind(path)
    if problem is None and name.startswith(triton_entries.GROUP_PREFIX):
        problem = checks.group_problem(path)
    return [Unresolved(entry, f"{name}: {problem}")] if problem else []


def check(root: str, path: str) -> list[Unresolved]:
    return entry_check(path)


def collect(root: str, fingerprint: dict) -> tuple[dict, list]:
    return collect_tree(root, "triton", skip=frozenset({roots.CLAIMS_DIR})), []


def place_entries(p: Placing) -> Placed:
    return place_children(p.staged, p.dest, triton_entries.rehome_entry, p.move, skip=frozenset({roots.MANIFEST_NAME}))


def identity(root: str, entry: str) -> str:
    """An entry's kernel names (a recompile writes them under another key)."""
    folder = os.path.join(root, entry)
    names = sorted(n[:-5] for n in os.listdir(folder)
                   if n.endswith(".json") and not n.startswith(triton_entries.GROUP_PREFIX)) if os.path.isdir(folder) else []
    return "triton:" + ",".join(names)


# The @triton.jit compiles whose key parts the report keeps (vLLM's kernels and the plan's: tens a
# process; Inductor's, hundreds on a cold start, come through the listener outside a @jit miss and are
# left out, so they never crowd out the ones a warm start compiled again in parts AN and AO).
KEYS_KEPT = 256


class TritonWatcher(Watcher):
    """Triton's knobs: JIT-cache misses, every triton.compile() and first-use module loads."""

    def __init__(self, monitor):
        super().__init__(monitor)
        self._in_jit = threading.local()  # inside a @jit miss: its triton.compile is not a separate event
        self._pending_loads = 0           # post-seal misses whose module load is the same event
        self.compiled_keys: list[dict] = []  # compile_key_parts of the first KEYS_KEPT @jit compiles

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
            self.monitor.watch("triton.kernel_load")

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
        m.count("jit_misses", kernel=name)
        if not m.sealed or m.loads_ok:  # loads_ok: the listener says whether it really compiled
            return
        if not kw.get("is_manual_warmup"):
            with m.lock:
                self._pending_loads += 1  # its module load at the launch is the same event
        info = kw.get("compile") or {}
        m.post_seal({
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
        m.count("disk_loads" if hit else "compiled", compile_ms=total_us / 1000.0)
        in_jit = getattr(self._in_jit, "value", False)
        if not hit and in_jit and len(self.compiled_keys) < KEYS_KEPT:
            with m.lock:
                self.compiled_keys.append(compile_key_parts(kw))
        if m.sealed and m.loads_ok and not hit:
            meta = kw.get("metadata") or {}
            m.post_seal({"backend": "triton", "event": "kernel compiled (not in the disk cache)",
                         "kernel": meta.get("name", "?"), "cache_hit": False})
        elif m.sealed and not m.loads_ok and not in_jit:
            # Not behind a @triton.jit miss: torch-Inductor, preload(), or a direct triton.compile.
            meta = kw.get("metadata") or {}
            m.post_seal({"backend": "triton", "event": "triton.compile (not via @triton.jit)",
                         "kernel": meta.get("name", "?"), "cache_hit": hit})

    def on_module_load(self, module, function, name, metadata_group, hash_) -> None:
        m = self.monitor
        m.count("module_loads")
        if not m.sealed or m.loads_ok:
            return
        with m.lock:
            if self._pending_loads:
                self._pending_loads -= 1
                return
        # Compiled (or preloaded) before the seal but never launched: the first launch
        # still builds the launcher and loads the module in the hot path.
        m.post_seal({"backend": "triton", "event": "first launch (module load)", "kernel": name})

    def details(self) -> dict | None:
        return {"compiled_keys": list(self.compiled_keys)} if self.compiled_keys else None


# --- the parts of Triton's disk-cache key (triton/runtime/cache.py's get_cache_key: Triton's own build,
# the kernel's source, the backend, the options, the environment it invalidates on) ----------------------
# A warm start that compiled what a cold start had put on disk, in the same directory (bench/RESULTS.md
# parts AN, AO), differs from a good one in one of them: the report keeps each so the two can be compared.

# Where Triton keeps ``triton_key``: runtime/cache.py in the releases we serve, compiler/compiler.py in older ones.
TRITON_KEY_MODULES = ("triton.runtime.cache", "triton.compiler.compiler")


def invalidating_env() -> dict | None:
    """The environment variables Triton puts in every kernel's key (its libtriton's list), as this
    process has them now; None where Triton is not imported or has no such list."""
    libtriton = sys.modules.get("triton._C.libtriton")
    read = getattr(libtriton, "get_cache_invalidating_env_vars", None)
    if read is None:
        return None
    try:
        return dict(sorted(read().items()))
    except Exception:  # noqa: BLE001 - a report's detail, never a failed run
        return None


def process_key_parts() -> dict | None:
    """Digests of the process-wide parts this process used: Triton's own build (``triton_key``: its
    compiler's sources and libtriton) and the backend's (``backend.hash()``: ptxas's version and the
    arch). Read only where the process already computed ``triton_key`` (it compiled or loaded a
    kernel): never built here, as that reads libtriton whole."""
    key_fn = next(filter(None, (getattr(sys.modules.get(name), "triton_key", None)
                                for name in TRITON_KEY_MODULES)), None)
    cache_info = getattr(key_fn, "cache_info", None)  # functools.lru_cache's
    if cache_info is None or not cache_info().currsize:
        return None
    parts = {"triton_key": digest(key_fn())}
    try:  # the target of the current device; a compile already made the driver active
        from triton.compiler.compiler import make_backend
        from triton.runtime.driver import driver
        parts["backend"] = digest(make_backend(driver.active.get_current_target()).hash())
    except Exception:  # noqa: BLE001 - a report's detail, never a failed run
        pass
    return parts


def compile_key_parts(kw: dict) -> dict:
    """One compile's key (Triton's ``hash``), the digest of the kernel's own part (``src.hash()``: its
    source and its dependencies', the specialization, the constexprs) and the environment Triton
    hashed where it was not empty. With the process's parts, what is left of a changed key is the
    compile options."""
    meta = kw.get("metadata") or {}
    src = kw.get("src")
    try:
        source = digest(src.hash()) if src is not None else None
    except Exception:  # noqa: BLE001 - a report's detail: an IR source or a Triton without it
        source = None
    parts = {"kernel": meta.get("name", "?"), "key": meta.get("hash"), "source": source}
    env = invalidating_env()
    if env:
        parts["env"] = env
    return parts


def _plain(value):
    """JSON-friendly form of Triton's signature/constants dicts (keys may be tuples or params)."""
    if isinstance(value, dict):
        return {str(getattr(k, "name", k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


COUNTERS = (
    Counter("jit_misses", per_kernel=True),  # @jit in-memory misses (each is a compile or a disk load)
    Counter("compiled"),                     # triton.compile() that really compiled
    Counter("disk_loads"),                   # triton.compile() served by the disk cache
    Counter("module_loads"),                 # first launches that loaded a module onto the GPU
)


FAMILY = Family(
    name="triton", label="Triton", root=roots.triton_root, collect=collect, place=place_entries,
    paths=ENTRY_RULES, check=check, identity=identity,
    monitor=Monitored("triton", "triton", "Triton", "compiled", "disk_loads", counters=COUNTERS,
                      watcher=TritonWatcher, order=0),
    env_var="TRITON_CACHE_DIR", origins=(PLAN, VLLM))
