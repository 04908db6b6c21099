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
"""

from __future__ import annotations

import os
from typing import NamedTuple

from kernel_model.deep_gemm import key_from_source
from planner.errors import PlanError

from . import checks, deep_gemm_install, deep_gemm_rekey, roots
from .family import PLAN, VLLM, Family, Monitored, PathRule, Placing, Unresolved
from .tree import Placed, collect_tree, place


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


FAMILY = Family(
    name="deep_gemm", label="DeepGEMM", root=roots.deep_gemm_root, collect=collect, place=place_kernels,
    paths=(PathRule(lambda rel, path: True, None,
                    "DeepGEMM finds a kernel by its directory's name; paths inside are its compile's debug information"),),
    check=check, identity=identity, member_path=member_path,
    monitor=Monitored("deep_gemm", "deep_gemm", "DeepGEMM", "deep_gemm_jit", "deep_gemm_loads"),
    env_var="DG_JIT_CACHE_DIR", origins=(PLAN, VLLM))
