"""The precompile manifest: which compile keys are known to be in the disk caches.

After a run, ``warmup-precompiled.json`` in the Triton cache directory lists the keys known
to be cached (ok jobs, and ok steps run by their planned backend), with a fingerprint of
what must match for them to still be there: triton, torch and DeepGEMM versions, a hash of
the kernel and dispatch sources, the GPU models, the TRITON_*/DG_* settings. A later run
whose keys are all listed starts no pool. Wiping the cache removes the manifest with it; a
manifest that lies only makes the main process compile (correct, slower, and the JIT
monitor shows it). Written atomically; concurrent writers may lose a key, never the file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time

from planner.output import write_atomic

from .. import dg_install, registry
from ..jit_monitor import deep_gemm_cache_dir

MANIFEST_NAME = "warmup-precompiled.json"
MANIFEST_FORMAT = "warmup-precompiled/v1"
# Sources that decide which variant a call compiles: the kernels, the backends' allocation
# paths and the dispatch models. A change to any invalidates the manifest.
SOURCE_GLOBS = (("executor", "kernels"), ("executor", "kernels", "jit"), ("kernel_model",))
SOURCE_FILES = (("executor", "backends", "triton.py"), ("executor", "backends", "triton_compile.py"),
                ("executor", "backends", "deep_gemm.py"), ("executor", "runner", "kernels.py"))


def triton_cache_dir() -> str:
    """Triton's file cache: $TRITON_CACHE_DIR, else $TRITON_HOME/.triton/cache (as triton.knobs)."""
    path = os.environ.get("TRITON_CACHE_DIR")
    if path:
        return path
    return os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~/"), ".triton", "cache")


def manifest_path() -> str | None:
    """Where the manifest lives; None when Triton uses another cache manager (no known directory)."""
    if os.environ.get("TRITON_CACHE_MANAGER") or os.environ.get("TRITON_REMOTE_CACHE_BACKEND"):
        return None
    return os.path.join(triton_cache_dir(), MANIFEST_NAME)


def _dist_version(name: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return None
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001 - a source build without metadata
        spec = importlib.util.find_spec(name)
        origin = getattr(spec, "origin", None)
        try:
            return f"mtime:{int(os.stat(origin).st_mtime)}" if origin else "?"
        except OSError:
            return "?"


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sources_digest(root: str | None = None) -> str:
    root = root or _repo_root()
    paths = []
    for parts in SOURCE_GLOBS:
        folder = os.path.join(root, *parts)
        if os.path.isdir(folder):
            paths += [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".py")]
    paths += [os.path.join(root, *parts) for parts in SOURCE_FILES]
    h = hashlib.sha256()
    for path in paths:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        h.update(os.path.relpath(path, root).encode() + b"\0" + data + b"\0")
    return "sha256:" + h.hexdigest()


def gpu_models() -> list[str]:
    """GPU models from the driver's /proc entries (cheap: no CUDA initialisation)."""
    base = "/proc/driver/nvidia/gpus"
    out = set()
    try:
        entries = os.listdir(base)
    except OSError:
        return []
    for entry in entries:
        try:
            with open(os.path.join(base, entry, "information"), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("Model:"):
                        out.add(line.split(":", 1)[1].strip())
        except OSError:
            pass
    return sorted(out)


def fingerprint() -> dict:
    """What must match for a manifest's keys to still be in the disk cache."""
    skip = ("TRITON_CACHE_DIR", "TRITON_HOME", "DG_JIT_CACHE_DIR")
    return {"triton": _dist_version("triton"), "torch": _dist_version("torch"),
            "deep_gemm": deep_gemm_fingerprint(), "sources": sources_digest(), "gpus": gpu_models(),
            "env": {k: v for k, v in sorted(os.environ.items())
                    if k.startswith(("TRITON_", "DG_")) and k not in skip}}


def deep_gemm_fingerprint() -> dict | None:
    """The DeepGEMM vLLM would import: version, where its headers live (2.5/2.6 put that path in
    every kernel's key) and their content (2.8 keys on it)."""
    install = dg_install.find_install()
    if install is None:
        return None
    return {"version": install.version, "include_dir": install.include_dir,
            "headers": dg_install.headers_digest(install.include_dir)}


def _deep_gemm_cache_id() -> list | None:
    path = deep_gemm_cache_dir()
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


def read_manifest(path: str | None, fp: dict | None = None) -> dict:
    """{backend: set of keys} of a manifest that matches this fingerprint ({} otherwise)."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        return {}
    if doc.get("fingerprint") != (fp if fp is not None else fingerprint()):
        return {}
    keys = doc.get("keys")
    if not isinstance(keys, dict):
        return {}
    out = {b: set(map(str, v)) for b, v in keys.items() if isinstance(v, list)}
    if doc.get("deep_gemm_cache") != _deep_gemm_cache_id():
        for backend in [b for b in out if registry.writes_deep_gemm(b)]:
            out.pop(backend)  # DeepGEMM's cache lives elsewhere: wiped or replaced since
    return out


def update_manifest(path: str | None, add: dict, fp: dict | None = None) -> int:
    """Add {backend: keys} to the manifest (merging a matching one), atomically. Returns the keys written."""
    if not path or not any(add.values()):
        return 0
    fp = fp if fp is not None else fingerprint()
    merged = read_manifest(path, fp)
    for backend, keys in add.items():
        if keys:
            merged.setdefault(backend, set()).update(keys)
    doc = {"format": MANIFEST_FORMAT, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "fingerprint": fp, "deep_gemm_cache": _deep_gemm_cache_id(),
           "keys": {b: sorted(k) for b, k in sorted(merged.items())}}
    write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return sum(len(k) for k in merged.values())
