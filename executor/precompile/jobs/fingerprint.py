"""What must match for the precompile manifest's keys to still be in the disk caches.

The manifest (manifest.py) lists compile keys; whether a cache entry made under one setting
serves another is Triton's and DeepGEMM's business, so the manifest is trusted only while all
that goes into their keys is unchanged: the triton, torch and DeepGEMM versions (and where
DeepGEMM's headers live), the sources that decide which variant a call compiles, the GPU
models, and the TRITON_*/DG_* settings (the cache directories themselves excepted).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os

from ...caches import deep_gemm_install

# Sources that decide which variant a call compiles: the kernels, the backends' allocation
# paths and the dispatch models. A change to any invalidates the manifest.
SOURCE_GLOBS = (("executor", "kernels"), ("executor", "kernels", "jit"), ("kernel_model",))
SOURCE_FILES = (("executor", "backends", "triton.py"), ("executor", "backends", "triton_compile.py"),
                ("executor", "backends", "deep_gemm.py"), ("executor", "runner", "kernels.py"))


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
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


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
    install = deep_gemm_install.find_install()
    if install is None:
        return None
    return {"version": install.version, "include_dir": install.include_dir,
            "headers": deep_gemm_install.headers_digest(install.include_dir)}
