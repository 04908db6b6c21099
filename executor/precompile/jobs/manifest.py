"""The precompile manifest: which compile keys are known to be in the disk caches.

After a run, ``warmup-precompiled.json`` in the Triton cache directory lists the keys known
to be cached (ok jobs, and ok steps run by their planned backend), with a fingerprint of
what must match for them to still be there: triton, torch and DeepGEMM versions, a hash of
the kernel and dispatch sources, the GPU models, the TRITON_*/DG_* settings (fingerprint.py).
A later run whose keys are all listed starts no pool. Wiping the cache removes the manifest
with it; a manifest that lies only makes the main process compile (correct, slower, and the
JIT monitor shows it). Written atomically; concurrent writers may lose a key, never the file.
"""

from __future__ import annotations

import json
import os
import time

from planner.output import write_atomic

from ... import registry
from ...caches import roots
from ...caches.roots import MANIFEST_NAME, Env
from .fingerprint import fingerprint

MANIFEST_FORMAT = "warmup-precompiled/v1"


def triton_cache_dir(env: Env | None = None) -> str:
    """Triton's file cache in `env`, the run's resolved environment (default: this process's now;
    executor/caches/roots.py)."""
    return roots.triton_root(env or Env.of())


def manifest_path(triton_dir: str | None = None, env: Env | None = None) -> str | None:
    """Where the manifest lives (in `triton_dir`, default the Triton cache of `env`); None when
    Triton uses another cache manager (no known directory)."""
    environ = (env or Env.of()).environ
    if environ.get("TRITON_CACHE_MANAGER") or environ.get("TRITON_REMOTE_CACHE_BACKEND"):
        return None
    return os.path.join(triton_dir or triton_cache_dir(env), MANIFEST_NAME)


def _deep_gemm_cache_id(root: str | None = None, env: Env | None = None) -> list | None:
    path = root or roots.deep_gemm_root(env or Env.of())
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


def read_doc(path: str | None, fmt: str) -> dict:
    """The JSON object at `path` if it is of format `fmt` ({} otherwise: missing, unreadable, another
    format). The pool's files beside the Triton cache (this manifest, costs.py's) are hints: a bad
    one only costs a compile or the order."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("format") == fmt else {}


def read_manifest(path: str | None, fp: dict | None = None, deep_gemm_root: str | None = None,
                  env: Env | None = None) -> dict:
    """{backend: set of keys} of a manifest that matches this fingerprint ({} otherwise);
    `deep_gemm_root`: the DeepGEMM cache its keys are in (default: the one of `env`, the run's
    resolved environment, else this process's)."""
    doc = read_doc(path, MANIFEST_FORMAT)
    if not doc:
        return {}
    if doc.get("fingerprint") != (fp if fp is not None else fingerprint()):
        return {}
    keys = doc.get("keys")
    if not isinstance(keys, dict):
        return {}
    out = {b: set(map(str, v)) for b, v in keys.items() if isinstance(v, list)}
    if doc.get("deep_gemm_cache") != _deep_gemm_cache_id(deep_gemm_root, env):
        for backend in [b for b in out if registry.writes_deep_gemm(b)]:
            out.pop(backend)  # DeepGEMM's cache lives elsewhere: wiped or replaced since
    return out


def update_manifest(path: str | None, add: dict, fp: dict | None = None, deep_gemm_root: str | None = None,
                    env: Env | None = None) -> int:
    """Add {backend: keys} to the manifest (merging a matching one), atomically. Returns the keys
    written. `deep_gemm_root`: the DeepGEMM cache the keys are in (default: as read_manifest's)."""
    if not path or not any(add.values()):
        return 0
    fp = fp if fp is not None else fingerprint()
    merged = read_manifest(path, fp, deep_gemm_root, env)
    for backend, keys in add.items():
        if keys:
            merged.setdefault(backend, set()).update(keys)
    doc = {"format": MANIFEST_FORMAT, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "fingerprint": fp, "deep_gemm_cache": _deep_gemm_cache_id(deep_gemm_root, env),
           "keys": {b: sorted(k) for b, k in sorted(merged.items())}}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # the cache's folder: the writer makes none
    write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return sum(len(k) for k in merged.values())


class RunManifest:
    """The manifest as one run uses it: the keys it lists, read at the start, and the keys the run
    adds at its end. The fingerprint is computed once, and only when a pool may run (it hashes
    the kernel sources and asks for the GPU models). `env`: the run's resolved environment, where
    the cache roots are (default: this process's now)."""

    def __init__(self, env: Env | None = None):
        self.env = env
        self.path = manifest_path(env=env)
        self.written: int | None = None   # keys in the manifest after this run's update (None: not written)
        self._fp: dict | None = None

    def fingerprint(self) -> dict:
        if self._fp is None:
            self._fp = fingerprint()
        return self._fp

    def listed(self) -> set:
        """The (backend, key) pairs a manifest matching this fingerprint lists."""
        return {(b, k) for b, keys in read_manifest(self.path, self.fingerprint(), env=self.env).items() for k in keys}

    def add(self, keys: dict) -> None:
        """Add {backend: keys} (best effort: a manifest not written only costs a later run time)."""
        if not any(keys.values()):
            return
        try:
            self.written = update_manifest(self.path, keys, self.fingerprint(), env=self.env)
        except OSError:
            self.written = None
