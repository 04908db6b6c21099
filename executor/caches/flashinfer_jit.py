"""FlashInfer's JIT modules (family ``flashinfer_jit``): packed from where this machine built them,
placed where FlashInfer loads a prebuilt module, so the installing machine builds nothing.

FlashInfer 0.6 (flashinfer/jit/core.py, ``JitSpec.build_and_load``) loads a module from its
``aot_path``, ``FLASHINFER_AOT_DIR/<name>/<name>.so``, whenever that file exists, and then calls
neither ninja nor its file lock; only where it is absent does it build into the JIT workspace,
``<FLASHINFER_WORKSPACE_BASE or ~>/.cache/flashinfer/<version>/<arch>/cached_ops/<name>/``. A copy of
that workspace does not travel: its ``build.ninja`` names the building machine's absolute paths and
ninja's log holds their hashes, so ninja rebuilds a workspace copied to another path. The library
itself names no path. So a bundle packs ``cached_ops/<name>/<name>.so`` alone, as
``flashinfer_jit/<name>/<name>.so``, and install places it at ``FLASHINFER_AOT_DIR/<name>/<name>.so``:
FlashInfer's own ``is_aot`` then says the module is there (tests/integration/vllm_parity/test_flashinfer_aot.py
runs FlashInfer's ``build_and_load`` on such a placement and sees it load without building).

Both directories are found here by FlashInfer's own rules (flashinfer/jit/env.py), without
importing FlashInfer: its import asks CUDA for the GPU's architecture unless
FLASHINFER_CUDA_ARCH_LIST says it, and the plugin's first process must not touch CUDA. The
bundle's fingerprint already pins the GPU, its capability, CUDA and FlashInfer's version, so a
placed module is the one this machine would have built.

- Relocates: nothing to move. The loader dlopens ``<aot>/<name>/<name>.so``, a path it computes; paths
  inside a library are its build's.
- Is used: dlopen reads the library; a module built again appears in the JIT workspace
  (``rebuilt``). The JIT monitor counts FlashInfer's module builds.
- Is watched (``FlashInferWatcher``): ``flashinfer.jit`` module builds, ``JitSpec.build`` wrapped.

The kernels FlashInfer's TensorRT-LLM DeepGEMM (inside ``fp8_blockscale_gemm_90``) compiles with nvcc
at first call are a family of their own (executor/caches/flashinfer_trtllm_dg.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from importlib.metadata import PackageNotFoundError, version

from kernel_model.device import parse_capability, sm_capability, sm_number

from . import checks
from .family import Counter, Family, Monitored, PathRule, Placing
from .tree import Placed, place_tree
from .watcher import Watcher

MARKER = ".warmup-bundle"  # beside a module a bundle placed: packed again by a bundle built here


def flashinfer_version() -> str | None:
    """flashinfer-python's version (FlashInfer's own ``__version__`` is its build's)."""
    try:
        return version("flashinfer-python")
    except PackageNotFoundError:
        return None


def aot_dir() -> str | None:
    """Where FlashInfer loads prebuilt modules from (flashinfer/jit/env.py ``_get_aot_dir``): the
    directory of flashinfer-jit-cache where that package is installed, else FlashInfer's own
    ``data/aot``. None where FlashInfer is not installed."""
    if importlib.util.find_spec("flashinfer_jit_cache") is not None:
        try:
            return str(importlib.import_module("flashinfer_jit_cache").get_jit_cache_dir())
        except Exception:  # noqa: BLE001 - a broken jit-cache package: FlashInfer's import fails the same way
            return None
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "data", "aot")


def arch_dir_name(capabilities, environ=os.environ) -> str | None:
    """The JIT workspace's architecture directory (flashinfer/jit/env.py ``_get_workspace_dir_name``):
    FLASHINFER_CUDA_ARCH_LIST where set ('9.0a' -> '90a'), else each GPU's capability (90 for
    sm_90) with FlashInfer's suffix ('a' for SM 9.x and 10+, 'f' for 12.0); sorted, '_'-joined."""
    listed = environ.get("FLASHINFER_CUDA_ARCH_LIST")
    if listed:
        archs = {_listed_arch(a) for a in listed.split(" ") if a}
    else:
        archs = {_suffixed(*sm_capability(c)) for c in capabilities or ()}
    if not archs:
        return None
    return "_".join(f"{major}{minor}" for major, minor in sorted(archs))


def _listed_arch(arch: str) -> tuple[int, str]:
    major, _, minor = arch.partition(".")
    return (int(major), minor) if minor[-1:].isalpha() else _suffixed(int(major), int(minor))


def _suffixed(major: int, minor: int) -> tuple[int, str]:
    if major == 12 and minor == 0:
        return major, "0f"
    return major, f"{minor}a" if major >= 9 else str(minor)


def jit_dir(capabilities, environ=os.environ) -> str | None:
    """FlashInfer's ``FLASHINFER_JIT_DIR`` for these GPUs: where it builds modules (None: no FlashInfer)."""
    workspace, arch = _version_workspace(environ), arch_dir_name(capabilities, environ)
    if workspace is None or arch is None:
        return None
    return os.path.join(workspace, arch, "cached_ops")


def _version_workspace(environ) -> str | None:
    """FlashInfer's JIT workspace of the installed version, above its architecture directories."""
    fi_version = flashinfer_version()
    if fi_version is None:
        return None
    base = environ.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~")
    return os.path.join(base, ".cache", "flashinfer", fi_version)


def modules_built_without(flag: str, environ=os.environ) -> list[str]:
    """The modules of the JIT workspace (the installed FlashInfer's, every architecture) whose
    ``build.ninja`` does not pass `flag` to nvcc. FlashInfer runs ninja at every load from the
    workspace and ninja rebuilds a module whose command changed, so a flag added now would build each
    of them again (no GPU needed to say it: no CUDA, no FlashInfer import)."""
    workspace = _version_workspace(environ)
    names = set()
    for arch in _module_names(workspace):
        ops = os.path.join(workspace, arch, "cached_ops")
        for name in _module_names(ops):
            if not _ninja_passes(os.path.join(ops, name, "build.ninja"), flag):
                names.add(name)
    return sorted(names)


def _ninja_passes(path: str, flag: str) -> bool:
    """Whether a module's ninja file passes `flag` (True where there is no such file: nothing to rebuild)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return flag in f.read(1 << 20)  # bounded: FlashInfer's ninja files are a few KiB
    except FileNotFoundError:
        return True
    except OSError:
        return False  # unreadable: ninja's choice is unknown, so no flag is changed under it


def collect(jit: str | None, aot: str | None, prefix: str) -> dict:
    """member name -> file: every module this machine built (``<jit>/<name>/<name>.so``), and every
    one a bundle placed in the AOT directory (those with MARKER), never the modules of
    flashinfer-jit-cache or of FlashInfer's wheel, which every machine with them already has."""
    out = {}
    for root, placed_only in ((aot, True), (jit, False)):
        for name in _module_names(root):
            library = os.path.join(root, name, f"{name}.so")
            if os.path.isfile(library) and (not placed_only or os.path.exists(os.path.join(root, name, MARKER))):
                out[f"{prefix}/{name}/{name}.so"] = library
    return out


def _module_names(root: str | None) -> list[str]:
    if not root or not os.path.isdir(root):
        return []
    return sorted(n for n in os.listdir(root) if not n.startswith("."))


def mark_placed(aot: str, names) -> None:
    """Say which modules of the AOT directory a bundle placed (collect packs them again)."""
    for name in names:
        folder = os.path.join(aot, name)
        if os.path.isdir(folder):
            with open(os.path.join(folder, MARKER), "w", encoding="utf-8") as f:
                f.write("placed by `warmup bundle install`; FlashInfer loads the .so beside it as prebuilt\n")


def capabilities(fingerprint: dict) -> list[int]:
    """The fingerprint's GPU capability as FlashInfer's workspace names it ('9.0' -> [90]); none where
    the fingerprint has no GPU (built without one) or a capability that is not MAJOR.MINOR."""
    try:
        return [sm_number(parse_capability(str(fingerprint.get("capability") or "")))]
    except ValueError:
        return []


def root(env) -> str | None:
    return aot_dir()


def collect_modules(aot: str, fingerprint: dict) -> tuple[dict, list]:
    return collect(jit_dir(capabilities(fingerprint)), aot, "flashinfer_jit"), []


def place_modules(p: Placing) -> Placed:
    """A module the AOT directory has already (flashinfer-jit-cache's, say) is kept."""
    new = [n for n in sorted(os.listdir(p.staged)) if not os.path.lexists(os.path.join(p.dest, n))]
    placed = place_tree(p.staged, p.dest, p.move)
    mark_placed(p.dest, new)
    return placed


def rebuilt_in(fingerprint: dict) -> str | None:
    return jit_dir(capabilities(fingerprint))


def rebuilt(jit: str | None, names, since: float) -> list[str]:
    """Of the modules a bundle placed, those FlashInfer built again in its JIT workspace (`jit`)
    after `since`: the placed library was not where FlashInfer looked."""
    if not jit:
        return []
    return sorted(n for n in names if _mtime(os.path.join(jit, n, f"{n}.so")) >= since)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return float("-inf")


def identity(aot: str, entry: str) -> str:
    return "flashinfer_jit:" + entry


# --- the JIT monitor's watcher ------------------------------------------------------------------

class FlashInferWatcher(Watcher):
    """FlashInfer JIT: module builds, seen by wrapping ``build`` of the JitSpec classes.

    FlashInfer 0.6 declares ``JitSpec.build`` abstract and ``JitSpecNvcc`` implements it, so
    every class in the hierarchy that defines ``build`` is wrapped. Every process calls
    ``build()`` when it loads a module and ninja finds nothing to do when the ``.so`` is up to
    date (bench/RESULTS.md, part F, "Found on the way"): a build counts as a compile only when
    the module's library file is new or newer afterwards."""

    library = "flashinfer"

    def _attach(self) -> None:
        try:
            from flashinfer.jit import core
        except Exception:  # noqa: BLE001 - a FlashInfer without the JIT package
            return
        base = getattr(core, "JitSpec", None)
        if base is None:
            return
        for cls in (base, *_subclasses(base)):
            if "build" in vars(cls):
                self._set(cls, "build", self._monitored(vars(cls)["build"]), "flashinfer.jit")

    def _monitored(self, build):
        monitor = self.monitor

        def monitored_build(spec, *a, **kw):
            before = library_mtime(spec)
            try:
                return build(spec, *a, **kw)
            finally:
                after = library_mtime(spec)
                if after is not None and after != before:
                    name = getattr(spec, "name", "flashinfer")
                    monitor.count("flashinfer_jit", kernel=name)
                    monitor.post_seal({"backend": "flashinfer", "event": "JIT module build", "kernel": name})

        return monitored_build


def _subclasses(cls) -> list:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def library_mtime(spec) -> int | None:
    """mtime of the module's .so (FlashInfer's ``get_library_path``), or None when absent."""
    try:
        path = spec.get_library_path()
        return os.stat(path).st_mtime_ns
    except Exception:  # noqa: BLE001 - no library yet, or an older JitSpec without the method
        return None


FAMILY = Family(
    name="flashinfer_jit", label="FlashInfer JIT", root=root, collect=collect_modules, place=place_modules,
    paths=(PathRule(lambda rel, path: True, None, "FlashInfer dlopens the library at a path it computes; "
                                                 "paths inside are its build's"),),
    check=checks.file_check, identity=identity, rebuilt_in=rebuilt_in, rebuilt=rebuilt,
    monitor=Monitored("flashinfer", "flashinfer", "FlashInfer modules", "flashinfer_jit",
                      counters=(Counter("flashinfer_jit"),),  # JIT module builds
                      watcher=FlashInferWatcher, order=3))
