"""Where the caches live on this machine: the one resolver of cache roots.

Every reader of a cache root (the executor and its precompile pool, the JIT monitor, the bundle
commands, the vLLM plugin) asks here, from an environment, as the library that owns the cache
resolves it; nothing here writes an environment. The roots the executor's own floor needs (vLLM's
cache root, DeepGEMM's, Triton's, Inductor's default) are here; a family's other roots are in its
own module (executor/caches/<family>.py), which may start from these.

- vLLM (vllm/envs.py ``VLLM_CACHE_ROOT``): the variable, else ``$XDG_CACHE_HOME/vllm``, else
  ``~/.cache/vllm``. Inside vLLM, ``vllm.envs.VLLM_CACHE_ROOT`` is vLLM's own answer: the plugin
  passes it as `vllm_cache_root`.
- DeepGEMM: the first entry of ``DG_JIT_CACHE_DIR`` (a list ``a:b:c``: the first is written, the
  others only read, 2.8), which vLLM sets to ``$VLLM_CACHE_ROOT/deep_gemm`` when it is unset
  (vllm/utils/deep_gemm.py ``_lazy_init``), before DeepGEMM reads it.
- Triton (triton/knobs.py): ``TRITON_CACHE_DIR``, else ``$TRITON_HOME/.triton/cache``, ``~`` for
  an unset TRITON_HOME.
- Inductor without ``TORCHINDUCTOR_CACHE_DIR``: ``<tmp>/torchinductor_<user>``.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from typing import Mapping, NamedTuple


# The precompile pool's own files inside a cache root (executor/precompile): its claims' directory,
# which a bundle leaves behind, and its manifest in Triton's cache, which a bundle rewrites for the
# installing machine. Named here, the ground floor, so that the cache families need not reach up.
CLAIMS_DIR = "warmup-claims"
MANIFEST_NAME = "warmup-precompiled.json"


class Env(NamedTuple):
    """One machine's environment as the caches' owners read it; `fingerprint`: its GPU and library
    versions (executor/bundle/environment.py), where the caller has them, for a cache kept per GPU
    and version (the plan's FlashInfer autotune file, executor/caches/flashinfer_file.py)."""

    environ: Mapping
    vllm_cache_root: str
    fingerprint: Mapping | None = None

    @classmethod
    def of(cls, environ: Mapping | None = None, vllm_cache_root: str | None = None,
           fingerprint: Mapping | None = None) -> "Env":
        """`environ` (default: this process's), with vLLM's own answer for its cache root where
        the caller has one (inside vLLM), else the one vLLM would compute from `environ`."""
        environ = os.environ if environ is None else environ
        return cls(environ, vllm_cache_root or default_vllm_cache_root(environ), fingerprint)


def default_vllm_cache_root(environ: Mapping | None = None) -> str:
    """vLLM's VLLM_CACHE_ROOT: the variable, else $XDG_CACHE_HOME/vllm, else ~/.cache/vllm."""
    environ = os.environ if environ is None else environ
    if environ.get("VLLM_CACHE_ROOT"):
        return os.path.expanduser(environ["VLLM_CACHE_ROOT"])
    return os.path.expanduser(os.path.join(environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "vllm"))


def deep_gemm_roots(env: Env) -> list[str]:
    """Every root DeepGEMM reads, the written one first: DG_JIT_CACHE_DIR's list, else vLLM's."""
    listed = [item for item in (env.environ.get("DG_JIT_CACHE_DIR") or "").split(":") if item]
    return listed or [os.path.join(env.vllm_cache_root, "deep_gemm")]


def deep_gemm_root(env: Env) -> str:
    """Where DeepGEMM writes its kernels under vLLM (the first of its roots)."""
    return deep_gemm_roots(env)[0]


def triton_root(env: Env) -> str:
    """Triton's file cache: TRITON_CACHE_DIR, else $TRITON_HOME/.triton/cache."""
    if env.environ.get("TRITON_CACHE_DIR"):
        return env.environ["TRITON_CACHE_DIR"]
    return os.path.join(env.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")


def inductor_root(env: Env) -> str:
    """Inductor's cache: TORCHINDUCTOR_CACHE_DIR, else <tmp>/torchinductor_<user>."""
    return env.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_inductor_dir()


def default_inductor_dir() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + "".join(c if c.isalnum() else "_" for c in user))


def inside(path: str, root: str) -> bool:
    """Whether `path` is `root` or under it (both absolute, normalised)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
