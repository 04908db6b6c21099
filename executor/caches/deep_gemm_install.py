"""DeepGEMM as users have it: where it is installed, which version, and its JIT cache layouts.

Where it comes from. vLLM imports a top-level ``deep_gemm`` when there is one, else the copy it
vendors, ``vllm.third_party.deep_gemm`` (vllm/utils/deep_gemm.py, ``_import_deep_gemm``): vLLM
0.25.0 vendors DeepGEMM 2.5.0 (one ``_C`` per Python version), vLLM 0.33.0 vendors 2.8.1 (one
stable-ABI ``_C_extension.abi3.so``). ``find_install`` finds the same copy without importing it
(importing DeepGEMM imports torch and initialises its JIT); the version is read from the
package's ``__init__.py``. The JIT compiles against ``<package>/include``.

Where its kernels go. ``DG_JIT_CACHE_DIR``; when unset, vLLM sets it to
``$VLLM_CACHE_ROOT/deep_gemm`` (``~/.cache/vllm/deep_gemm`` by default) before importing
DeepGEMM, and the executor, whose target is vLLM, sets the same for its run and its workers
(``environment``; the root is executor/caches/roots.py's). DeepGEMM's own defaults, were it
imported alone: ``~/.deep_gemm`` (2.5, 2.6), ``~/.dj`` (2.8).

Two layouts of ``<root>/cache/``, one directory per kernel, built in ``<root>/tmp/`` and renamed
into place whole (so a directory is complete or absent, never half-written):

* ``legacy`` (2.5, 2.6: csrc/jit/compiler.hpp): ``kernel.<name>.<hash>/`` holding ``kernel.cu``
  and ``kernel.cubin``. The hash covers ``name$$signature$$flags$$code`` where the flags carry
  ``-I<include dir>``: the install path is part of every key (``LegacyKey`` re-keys an entry
  for another path).
* ``deepjit`` (2.8, whose JIT is DeepJIT: include/deep_jit/cache/disk.hpp): ``<name>.<hash>/``
  holding ``kernel.cu``, ``kernel.cubin``, ``meta.json`` and the ``.committed`` marker, which is
  what makes an entry a hit. ``DG_JIT_CACHE_DIR`` may list several roots, ``a:b:c``: the first
  is written, the others are read-only lookups. A hit touches the marker's mtime, so a load is
  visible; the key covers the NVCC version text, the flags and the source with its headers'
  content, not their path.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from typing import NamedTuple

from . import roots

MODULES = ("deep_gemm", "vllm.third_party.deep_gemm")  # vLLM's order
LEGACY, DEEPJIT = "legacy", "deepjit"
COMMITTED = ".committed"
CUBIN = "kernel.cubin"
SOURCE = "kernel.cu"
_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.M)
_TAG = re.compile(r"^[A-Za-z0-9_]+$")


class Install(NamedTuple):
    """One DeepGEMM copy: the module vLLM would import, its package directory and version."""

    module: str
    root: str
    version: str | None

    @property
    def include_dir(self) -> str:
        return os.path.join(self.root, "include")

    def label(self) -> str:
        """'2.8.1@/…/deep_gemm/include': the plan digest's and the fingerprint's form."""
        return f"{self.version or '?'}@{self.include_dir}"


def find_install() -> Install | None:
    """The copy vLLM would import (``deep_gemm``, else vLLM's vendored one), without importing it."""
    loaded = _loaded_install()
    if loaded is not None:
        return loaded
    root = _top_level_root() or _vendored_root()
    if root is None:
        return None
    module = MODULES[0] if root == _top_level_root() else MODULES[1]
    return Install(module, root, read_version(root))


def _loaded_install() -> Install | None:
    """An already imported copy wins: it is the one this process runs."""
    for name in MODULES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            root = os.path.dirname(os.path.abspath(path))
            return Install(name, root, getattr(sys.modules[name], "__version__", None) or read_version(root))
    return None


def _top_level_root() -> str | None:
    try:
        spec = importlib.util.find_spec(MODULES[0])
    except (ImportError, ValueError):  # a module in sys.modules without a spec (tests, stubs)
        return None
    origin = getattr(spec, "origin", None)
    return os.path.dirname(os.path.abspath(origin)) if origin and origin != "namespace" else None


def _vendored_root() -> str | None:
    """vllm/third_party/deep_gemm next to vLLM's package, found without importing vLLM."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    for location in getattr(spec, "submodule_search_locations", None) or ():
        root = os.path.join(location, "third_party", "deep_gemm")
        if os.path.isfile(os.path.join(root, "__init__.py")):
            return root
    return None


def read_version(root: str) -> str | None:
    try:
        with open(os.path.join(root, "__init__.py"), encoding="utf-8", errors="replace") as f:
            match = _VERSION.search(f.read())
    except OSError:
        return None
    return match.group(1) if match else None


def headers_digest(include_dir: str) -> str | None:
    """sha256 of the ``deep_gemm/`` headers (names and content): what a kernel's source includes."""
    top = os.path.join(include_dir, "deep_gemm")
    if not os.path.isdir(top):
        return None
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                h.update(os.path.relpath(path, include_dir).encode() + b"\0" + f.read() + b"\0")
    return "sha256:" + h.hexdigest()


# --- cache directories ------------------------------------------------------------------------

def vllm_cache_dir(env=os.environ) -> str:
    """$VLLM_CACHE_ROOT/deep_gemm, VLLM_CACHE_ROOT defaulting to $XDG_CACHE_HOME/vllm or ~/.cache/vllm."""
    return os.path.join(roots.default_vllm_cache_root(env), "deep_gemm")


def cache_roots(env=os.environ) -> list[str]:
    """Every root DeepGEMM reads under vLLM: DG_JIT_CACHE_DIR's list, else vLLM's (executor/caches/roots.py)."""
    return roots.deep_gemm_roots(roots.Env.of(env))


def writable_root(env=os.environ) -> str:
    """Where DeepGEMM writes new kernels (the first root)."""
    return cache_roots(env)[0]


def environment(env=os.environ) -> dict:
    """DG_JIT_CACHE_DIR as vLLM sets it when it is unset, for a process about to run DeepGEMM (the
    caller scopes it: executor.run, the precompile workers' environment); {} when it is set."""
    return {} if env.get("DG_JIT_CACHE_DIR") else {"DG_JIT_CACHE_DIR": writable_root(env)}


# --- entries ---------------------------------------------------------------------------------

class Entry(NamedTuple):
    """One kernel in a cache: ``<root>/cache/<dirname>``; ``mtime_ns``: its marker's (deepjit)."""

    root: str
    dirname: str
    name: str
    hash: str
    layout: str
    mtime_ns: int | None = None

    @property
    def path(self) -> str:
        return os.path.join(self.root, "cache", self.dirname)


def parse_entry(dirname: str) -> tuple[str, str, str] | None:
    """(layout, kernel name, hash) of a cache directory name, or None for anything else."""
    legacy = dirname.startswith("kernel.")
    name, dot, digest = (dirname[len("kernel."):] if legacy else dirname).rpartition(".")
    if not dot or not name or not digest or not _TAG.match(name):
        return None
    return (LEGACY if legacy else DEEPJIT), name, digest


def read_entry(root: str, dirname: str) -> Entry | None:
    """The entry when it is complete: its cubin, and for deepjit its .committed marker."""
    parsed = parse_entry(dirname)
    if parsed is None:
        return None
    layout, name, digest = parsed
    path = os.path.join(root, "cache", dirname)
    if not os.path.isfile(os.path.join(path, CUBIN)):
        return None
    if layout == LEGACY:
        return Entry(root, dirname, name, digest, layout)
    try:
        mtime = os.stat(os.path.join(path, COMMITTED)).st_mtime_ns
    except OSError:  # not committed: DeepJIT treats it as a miss
        return None
    return Entry(root, dirname, name, digest, layout, mtime)


def scan(root: str, skip=frozenset()) -> list[Entry]:
    """Complete entries of one root (names in `skip` are not looked at); [] when unreadable."""
    try:
        names = os.listdir(os.path.join(root, "cache"))
    except OSError:
        return []
    return [e for e in (read_entry(root, n) for n in sorted(names) if n not in skip) if e is not None]
