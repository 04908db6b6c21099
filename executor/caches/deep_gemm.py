"""DeepGEMM's JIT cache: one directory per kernel under ``<root>/cache/`` (deep_gemm_install.py).

- Lives in: the first root of DG_JIT_CACHE_DIR, vLLM's ``$VLLM_CACHE_ROOT/deep_gemm`` when unset.
- Packs: every complete entry, as ``deep_gemm/<entry>/<file>``, with a KernelRecord each (its plan
  key and, for 2.5/2.6, the context that re-keys it for another include path: deep_gemm_rekey.py).
- Relocates: DeepGEMM finds a kernel by its directory's name under its root and never follows a
  path written inside one (paths there are the compile's debug information). 2.5/2.6 keys carry the
  include path: an entry is renamed to this machine's key at install.
- Is used: a kernel loaded reads its cubin (its access time); one compiled again is another entry
  of the same kernel name. The JIT monitor counts the entries that appear (``deep_gemm_jit``) and,
  with 2.8's marker, the loads.
- Is watched (``DeepGemmWatcher``): DeepGEMM has no compile hook, so the kernels that appear in its
  JIT cache are counted at step boundaries, in every layout in use, and the loads where the layout
  records them (2.8).
"""

from __future__ import annotations

import os
import re
import sys
from typing import NamedTuple

from kernel_model.deep_gemm import key_from_source
from planner.errors import PlanError

from . import checks, deep_gemm_install, deep_gemm_rekey, roots
from .family import PLAN, VLLM, Counter, Family, Monitored, PathRule, Placing, Unresolved
from .tree import Placed, collect_tree, place
from .watcher import Watcher


class KernelRecord(NamedTuple):
    """One DeepGEMM cache entry: its directory, kernel, the plan key it is (None: a helper kernel
    such as transpose_fp32), and for 2.5/2.6 the context that re-keys it (deep_gemm_rekey)."""

    entry: str
    name: str
    layout: str
    key: str | None
    context: list | None = None


def collect(root: str, fingerprint: dict) -> tuple[dict, list]:
    """The kernels of a DeepGEMM cache, with their plan keys and (2.5/2.6) re-key contexts."""
    arch = deep_gemm_rekey.arch_of(fingerprint.get("capability") or "9.0")
    contexts = deep_gemm_rekey.candidates(fingerprint.get("nvcc") or "", arch, int(os.environ.get("DG_JIT_CPP_STANDARD", 20)))
    kernels, sources = [], {}
    for entry in deep_gemm_install.scan(root):
        with open(os.path.join(entry.path, deep_gemm_install.SOURCE), "rb") as f:
            code = f.read()
        context = None
        if entry.layout == deep_gemm_install.LEGACY:
            found = deep_gemm_rekey.find_context(entry.name, entry.hash, code,
                                                 fingerprint.get("deep_gemm_include_dir") or "", contexts)
            context = list(found) if found else None
        kernels.append(KernelRecord(entry.dirname, entry.name, entry.layout,
                                    key_from_source(code.decode("utf-8", "replace")), context))
        sources.update(collect_tree(entry.path, f"deep_gemm/{entry.dirname}"))
    return sources, kernels


def names_here(manifest, include_dir: str | None, path: str) -> dict:
    """entry -> its directory name here: 2.5/2.6 entries re-keyed for this include directory (None:
    computed from the code once extracted). PlanError when an entry cannot be re-keyed."""
    built = manifest.fingerprint.get("deep_gemm_include_dir")
    names = {}
    for kernel in manifest.deep_gemm:
        if kernel.layout != deep_gemm_install.LEGACY or include_dir in (None, built):
            names[kernel.entry] = kernel.entry
            continue
        if kernel.context is None:
            raise PlanError(f"refused: DeepGEMM entry {kernel.entry} is keyed with the include path {built} and "
                            f"its key cannot be reproduced for {include_dir}; install DeepGEMM at {built} or "
                            "rebuild the bundle here", file=path)
        names[kernel.entry] = None
    return names


def place_kernels(p: Placing) -> Placed:
    cache = os.path.join(p.dest, "cache")
    os.makedirs(cache, exist_ok=True)
    placed = Placed()
    for kernel in p.manifest.deep_gemm:
        src = os.path.join(p.staged, kernel.entry)
        if not os.path.isdir(src):
            continue
        name = p.names.get(kernel.entry, kernel.entry) or _rekey(kernel, src, p.include_dir)
        dest = os.path.join(cache, name)
        placed = placed.add(place(src, dest, move=p.move), dest, rekeyed=name != kernel.entry)
    return placed


def _rekey(kernel: KernelRecord, src: str, include_dir: str) -> str:
    with open(os.path.join(src, deep_gemm_install.SOURCE), "rb") as f:
        code = f.read()
    return f"kernel.{kernel.name}.{deep_gemm_rekey.LegacyContext(*kernel.context).key(kernel.name, code, include_dir)}"


def member_path(root: str, member: str, names: dict) -> str | None:
    """``<entry>/<file>`` lands as ``cache/<the entry's name here>/<file>`` (None: still to be re-keyed)."""
    entry, _, rest = member.partition("/")
    name = names.get(entry, entry)
    return None if name is None else os.path.join(root, "cache", name, rest)


def check(root: str, path: str) -> list[Unresolved]:
    """A cut cubin fails DeepGEMM's module load: the whole entry goes (DeepGEMM compiles it again)."""
    problem = checks.by_kind(path)
    if problem is None:
        return []
    entry = os.path.dirname(path) if os.path.dirname(os.path.dirname(path)) == os.path.join(root, "cache") else path
    return [Unresolved(entry, f"{os.path.basename(path)} is {problem}")]


def identity(root: str, entry: str) -> str:
    """cache/kernel.<name>.<key> (2.5/2.6) or cache/<name>.<key> (2.8): the kernel's name."""
    return "deep_gemm:" + entry.split("/")[-1].rsplit(".", 1)[0]


# --- the JIT monitor's watcher ------------------------------------------------------------------

def kernel_name(entry: str) -> str:
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

    def __init__(self, monitor):
        super().__init__(monitor)
        self.roots: list[str] = []
        self.seen: dict[str, int | None] = {}  # entry path -> marker mtime (None: legacy)
        self.records_loads = False           # a deepjit entry was seen: loads are observable

    def ready(self) -> bool:
        return any(name in sys.modules for name in self.library)

    def _attach(self) -> None:
        self.roots = roots.deep_gemm_roots(self.monitor.cache_env())
        self.seen = {e.path: e.mtime_ns for e in self._entries()}
        self.records_loads = any(m is not None for m in self.seen.values())
        self.monitor.watch("deep_gemm.cache_dir")

    def _entries(self) -> list:
        return [e for root in self.roots for e in deep_gemm_install.scan(root)]

    def absorb(self, entries) -> None:
        """Entries compiled elsewhere (the precompile pool): seen, not this process's compiles."""
        with self.monitor.lock:
            for entry in self._entries():
                if entry.dirname in entries:
                    self.seen[entry.path] = entry.mtime_ns

    def poll(self) -> None:
        m = self.monitor
        if m.pool_busy is not None and m.pool_busy():
            return  # the precompile pool is compiling into the same cache: its kernels, not ours
        with m.lock:  # steps may end on several threads: each entry is counted once
            new, loaded = self._changes()
            m.current.deep_gemm_entries += [entry.dirname for entry in new]
        if loaded or self.records_loads:
            m.count("deep_gemm_loads", len(loaded))
        if new:
            m.count("deep_gemm_jit", len(new))
            m.post_seal(*(self.event(entry.dirname, entry.root) for entry in new))

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
        out = {"backend": "deep_gemm", "event": "JIT compilation", "kernel": kernel_name(entry),
               "cache_entry": entry, "cache_dir": root or (self.roots[0] if self.roots else None)}
        # The hot-path check names its calls verify/<shape key>/m<M>: the GEMM that compiled it.
        match = _VERIFY_STEP.fullmatch(self.monitor.step_id or "")
        if match:
            out.update(shape=match["shape"], m=int(match["m"]))
        return out


COUNTERS = (
    Counter("deep_gemm_jit"),                # new kernels in its JIT cache
    Counter("deep_gemm_loads", unset=None),  # kernels loaded from it (None: the layout cannot tell)
)


FAMILY = Family(
    name="deep_gemm", label="DeepGEMM", root=roots.deep_gemm_root, collect=collect, place=place_kernels,
    paths=(PathRule(lambda rel, path: True, None,
                    "DeepGEMM finds a kernel by its directory's name; paths inside are its compile's debug information"),),
    check=check, identity=identity, member_path=member_path,
    monitor=Monitored("deep_gemm", "deep_gemm", "DeepGEMM", "deep_gemm_jit", "deep_gemm_loads", counters=COUNTERS,
                      watcher=DeepGemmWatcher, order=2),
    env_var="DG_JIT_CACHE_DIR", origins=(PLAN, VLLM))
