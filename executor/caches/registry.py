"""The cache families, in one table, and where they live on a machine (``CacheRoots``).

Adding a family is a module of its own (executor/caches/<family>.py, its ``FAMILY``) and one row
here; the bundle's archive, build, install, relocation, checks, use report, the start-up phases'
counts and the JIT monitor's watchers and counters all read this table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from . import (deep_gemm, flashinfer_autotune, flashinfer_file, flashinfer_jit, flashinfer_trtllm_dg, inductor,
               torch_compile, triton, vllm_modelinfo)
from .family import Family
from .roots import Env, inside

FAMILIES: tuple[Family, ...] = (
    triton.FAMILY, deep_gemm.FAMILY, flashinfer_file.FAMILY, torch_compile.FAMILY, inductor.FAMILY,
    flashinfer_autotune.FAMILY, flashinfer_jit.FAMILY, flashinfer_trtllm_dg.FAMILY, vllm_modelinfo.FAMILY,
)


def names() -> tuple[str, ...]:
    """The families' names, in the table's order (every reader asks here, so the table is the one place)."""
    return tuple(f.name for f in FAMILIES)


def of(name: str) -> Family:
    for family in FAMILIES:
        if family.name == name:
            return family
    raise KeyError(f"no cache family {name!r}")


def for_origin(origin: str) -> tuple[Family, ...]:
    """The families a bundle of this origin (family.PLAN, family.VLLM) holds."""
    return tuple(f for f in FAMILIES if origin in f.origins)


def monitored() -> tuple[Family, ...]:
    """The families whose compiles the JIT monitor counts, in the table's order."""
    return tuple(f for f in FAMILIES if f.monitor is not None)


class CacheRoots(Mapping):
    """Where each family lives on one machine (family name -> path; None: that cache is not used
    here), as the one resolver (executor/caches/roots.py and each family's ``root``) finds it."""

    def __init__(self, roots: Mapping):
        unknown = set(roots) - set(names())
        if unknown:
            raise KeyError(f"no cache family {sorted(unknown)[0]!r}")
        self._roots = {name: roots[name] for name in names() if name in roots}

    @classmethod
    def resolve(cls, environ: Mapping | None = None, vllm_cache_root: str | None = None,
                families=None, fingerprint: Mapping | None = None, **overrides) -> "CacheRoots":
        """The roots of `families` (default: a vLLM start-up's) in this environment, on a machine of
        this `fingerprint` where it is given (a cache kept per GPU and version has no root without
        it); `overrides` (family=path) win, a None override included."""
        env = Env.of(environ, vllm_cache_root, fingerprint)
        chosen = families if families is not None else [f.name for f in FAMILIES if "vllm" in f.origins]
        found = {name: of(name).root(env) for name in chosen}
        found.update({k: v for k, v in overrides.items()})
        return cls(found)

    @classmethod
    def fresh(cls, work: str, families) -> "CacheRoots":
        """Empty roots under `work`, one directory per family (a file in one for a file family)."""
        out = {}
        for name in families:
            family = of(name)
            out[name] = os.path.join(work, name, family.file_name) if family.file_name else os.path.join(work, name)
        return cls(out)

    def __getitem__(self, name: str):
        return self._roots[name]

    def __getattr__(self, name: str):
        """roots.triton: a family's root (None where it is not set)."""
        if name in names():
            return self.__dict__.get("_roots", {}).get(name)
        raise AttributeError(name)

    def __iter__(self):
        return iter(self._roots)

    def __len__(self) -> int:
        return len(self._roots)

    def __repr__(self) -> str:
        return f"CacheRoots({self._roots!r})"

    def replace(self, **changes) -> "CacheRoots":
        return CacheRoots({**self._roots, **changes})

    def directory(self, name: str) -> str | None:
        """The directory a family's entries are under (a file family's: the file's)."""
        root = self._roots.get(name)
        if root and of(name).file_name is not None:
            return os.path.dirname(root)
        return root

    def env(self) -> dict:
        """The variables that name these roots to a process that compiles into them."""
        return {of(n).env_var: r for n, r in self._roots.items() if r and of(n).env_var}

    def distinct(self) -> dict:
        """family -> root, each directory once: a root inside another family's is left out (its
        files are packed with the outer family, and installed inside it)."""
        given = {f: os.path.abspath(r) for f, r in self._roots.items() if r}
        order = {name: i for i, name in enumerate(names())}
        return {f: r for f, r in given.items()
                if not any(g != f and inside(r, other) and (r != other or order[g] < order[f])
                           for g, other in given.items())}
