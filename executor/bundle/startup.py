"""A bundle of a whole vLLM start-up: every cache vLLM's start-up compiled or tuned into, packed
once vLLM is ready (the plugin: WARMUP_BUNDLE_OUT) and installed where a vLLM started the same
way reads it (the plugin before vLLM compiles: WARMUP_BUNDLE; or `warmup bundle install`).

Families and where vLLM 0.25/0.33 keep them (``StartupRoots.from_env``):

- ``deep_gemm``: DG_JIT_CACHE_DIR, which vLLM sets to ``$VLLM_CACHE_ROOT/deep_gemm`` when unset;
- ``triton``: Triton's cache as the user's environment names it (TRITON_CACHE_DIR, else
  ``$TRITON_HOME/.triton/cache``): vLLM's own Triton kernels and the plan's;
- ``torch_compile``: ``$VLLM_CACHE_ROOT/torch_compile_cache``. vLLM names its directories by a
  hash of its environment's compile factors, ``VllmConfig.compute_hash()``, the traced code and
  the compiler (compilation/backends.py), and its AOT artifacts (VLLM_USE_AOT_COMPILE, on by
  default from torch 2.10) ``torch_aot_compile/<hash>/`` with Inductor's cache inside
  (compilation/decorators.py points TORCHINDUCTOR_CACHE_DIR there, so Inductor's Triton kernels
  are in it too);
- ``inductor``: TORCHINDUCTOR_CACHE_DIR where it is outside the torch.compile cache (torch's
  default ``<tmp>/torchinductor_<user>`` when vLLM does not point it into its own);
- ``flashinfer_autotune``: VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR, else
  ``$VLLM_CACHE_ROOT/flashinfer_autotune_cache`` (model_executor/warmup/flashinfer_autotune_cache.py);
- ``flashinfer_jit``: FlashInfer's JIT modules, packed from the workspace where this machine built
  them and placed where FlashInfer loads prebuilt ones (executor/bundle/flashinfer_modules.py: its
  root here is that AOT directory, FlashInfer's ``data/aot``);
- ``flashinfer_trtllm_dg``: the kernels of the TensorRT-LLM DeepGEMM inside FlashInfer's
  ``fp8_blockscale_gemm_90`` (vLLM's block-FP8 linears at M < 32 on SM 9.0), which it compiles with
  nvcc at first call into ``<TRTLLM_DG_CACHE_DIR or ~/.tensorrt_llm>/cache/<name>/`` and finds there
  at the next start (flashinfer/data/csrc/nv_internal/tensorrt_llm/deep_gemm/compiler.cuh: the name
  is the GEMM's shape and tiling, no path or hash). Only ``cache/`` is packed (``tmp/`` is its
  scratch). Without it a fresh machine stalled 8.5 s inside the CUDA-graph capture recompiling them
  (bench/RESULTS.md part Y);
- ``vllm_modelinfo``: ``$VLLM_CACHE_ROOT/modelinfos`` (model_executor/models/registry.py): what
  vLLM learnt of the model class in a subprocess that imports it (15-30 s of every cold start on
  the H100, before any worker exists), one JSON file per class, with the hash of the model's
  source file, which vLLM checks before it trusts the entry. It is read while vLLM resolves the
  architecture, long before ``load_model``, so the plugin places it at ``register``
  (``install_early``: ``EARLY``).

A directory inside another family's is packed once, with the outer one. Install checks the
fingerprint (environment.mismatch: the machine, vLLM's version and the config hash) and every
member before it writes anything, then places under the lock: a directory the cache lacks lands
whole with one rename, one it has is merged into file by file (a file there wins), a Triton entry
there is kept; Triton entries land with their group files pointing at their new place.
"""

from __future__ import annotations

import getpass
import os
import shutil
import tempfile
from typing import NamedTuple

from planner.errors import PlanError

from .. import triton_cache
from . import archive, environment, flashinfer_modules, ops, staging, usage
from .archive import FORMAT, VLLM, FileRecord, Manifest

FAMILIES = ("deep_gemm", "triton", "torch_compile", "inductor", "flashinfer_autotune", "flashinfer_jit",
            "flashinfer_trtllm_dg", "vllm_modelinfo")
EARLY = ("vllm_modelinfo",)  # valid whatever the GPU and the configuration: placed before vLLM resolves the model


class StartupRoots(NamedTuple):
    """Where one machine's vLLM start-up caches live, per family (None: that cache is not used)."""

    deep_gemm: str | None = None
    triton: str | None = None
    torch_compile: str | None = None
    inductor: str | None = None
    flashinfer_autotune: str | None = None
    flashinfer_jit: str | None = None  # FlashInfer's AOT directory (None: no FlashInfer)
    flashinfer_trtllm_dg: str | None = None
    vllm_modelinfo: str | None = None

    @classmethod
    def from_env(cls, environ=os.environ, vllm_cache_root: str | None = None) -> "StartupRoots":
        """As vLLM (envs.py VLLM_CACHE_ROOT, utils/deep_gemm.py), Triton and torch resolve them
        from this environment; `vllm_cache_root` is vLLM's own answer where vLLM is imported."""
        root = vllm_cache_root or default_vllm_cache_root(environ)
        triton = environ.get("TRITON_CACHE_DIR") or os.path.join(
            environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")
        return cls(environ.get("DG_JIT_CACHE_DIR") or os.path.join(root, "deep_gemm"), triton,
                   os.path.join(root, "torch_compile_cache"),
                   environ.get("TORCHINDUCTOR_CACHE_DIR") or default_inductor_dir(),
                   environ.get("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR") or os.path.join(root, "flashinfer_autotune_cache"),
                   flashinfer_modules.aot_dir(), trtllm_deep_gemm_dir(environ), os.path.join(root, "modelinfos"))

    def distinct(self) -> dict:
        """family -> root, each directory once: a root inside another family's is left out (its
        files are packed with the outer family, and installed inside it)."""
        given = {f: os.path.abspath(r) for f, r in self._asdict().items() if r}
        return {f: r for f, r in given.items()
                if not any(g != f and _inside(r, other) and (r != other or FAMILIES.index(g) < FAMILIES.index(f))
                           for g, other in given.items())}


def default_vllm_cache_root(environ=os.environ) -> str:
    """vLLM's VLLM_CACHE_ROOT: the variable, else $XDG_CACHE_HOME/vllm, else ~/.cache/vllm."""
    if environ.get("VLLM_CACHE_ROOT"):
        return os.path.expanduser(environ["VLLM_CACHE_ROOT"])
    return os.path.expanduser(os.path.join(environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "vllm"))


def trtllm_deep_gemm_dir(environ=os.environ) -> str:
    """FlashInfer's TensorRT-LLM DeepGEMM user directory (compiler.cuh getDefaultUserDir):
    TRTLLM_DG_CACHE_DIR, else $HOME/.tensorrt_llm, else <tmp>/tensorrt_llm."""
    if environ.get("TRTLLM_DG_CACHE_DIR"):
        return environ["TRTLLM_DG_CACHE_DIR"]
    home = environ.get("HOME")
    return os.path.join(home, ".tensorrt_llm") if home else os.path.join(tempfile.gettempdir(), "tensorrt_llm")


def default_inductor_dir() -> str:
    """torch Inductor's cache without TORCHINDUCTOR_CACHE_DIR: <tmp>/torchinductor_<user>."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + "".join(c if c.isalnum() else "_" for c in user))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


# --- build -----------------------------------------------------------------------------------------

class Origin(NamedTuple):
    """What started vLLM: the plan the plugin ran (if any), the engine, the plan's digest."""

    plan: str = ""
    engine: str = ""
    plan_digest: str = ""


def pack(roots: StartupRoots, fingerprint: dict, origin: Origin) -> tuple[Manifest, dict]:
    """The manifest of everything under the roots (every regular file with its sha256 and size;
    DeepGEMM's kernels with their keys) and, per member name, its file on disk."""
    kernels, sources, packed = [], {}, {}
    for family, root in roots.distinct().items():
        if family == "flashinfer_jit":  # built in the JIT workspace, placed in the AOT directory
            found = flashinfer_modules.collect(flashinfer_modules.jit_dir(_capabilities(fingerprint)), root, family)
        elif not os.path.isdir(root):
            continue
        elif family == "deep_gemm":
            kernels, found = ops.collect_deep_gemm(root, fingerprint)
        elif family == "flashinfer_trtllm_dg":  # its kernels; tmp/ is the compiler's scratch
            found = ops.collect_tree(os.path.join(root, "cache"), f"{family}/cache")
        else:
            found = ops.collect_tree(root, family)
        sources.update(found)
        packed[family] = root if found else None
    files = [FileRecord(name, archive.sha256_file(path), os.path.getsize(path)) for name, path in sorted(sources.items())]
    keys = ops.cached_keys(roots.triton) if roots.triton else {}
    manifest = Manifest(FORMAT, origin.plan, origin.engine, origin.plan_digest, fingerprint, files, kernels, keys,
                        origin=VLLM, roots={f: r for f, r in packed.items() if r})
    return manifest, sources


def _capabilities(fingerprint: dict) -> list[int]:
    """The fingerprint's GPU capability as FlashInfer's workspace names it ('9.0' -> [90])."""
    major, _, minor = str(fingerprint.get("capability") or "").partition(".")
    return [int(major) * 10 + int(minor)] if major.isdigit() and minor.isdigit() else []


def build(out: str, roots: StartupRoots, fingerprint: dict, origin: Origin) -> Manifest:
    """Pack the start-up's caches into `out` (written whole or not at all)."""
    ops.check_output(out)
    manifest, sources = pack(roots, fingerprint, origin)
    if not manifest.files:
        raise PlanError("no bundle written: the start-up's caches are empty (" +
                        ", ".join(f"{f} {r}" for f, r in roots.distinct().items()) + ")", file=out)
    archive.write_bundle(out, manifest, sources, first=EARLY)  # install_early reads no further than these
    return manifest


# --- install ---------------------------------------------------------------------------------------

def check(manifest: Manifest, roots: StartupRoots, here: dict, path: str) -> None:
    """Everything refused before a byte is written: another environment (one line naming the
    field, the bundle's value and this machine's), a family this machine has no directory for."""
    problem = environment.mismatch(manifest.fingerprint, here)
    if problem:
        raise PlanError(f"refused: the bundle was built for another environment ({problem})", file=path)
    held = families(manifest)
    lacking = [f for f in held if f in FAMILIES and not getattr(roots, f)]
    if lacking or held - set(FAMILIES):
        what = lacking[0] if lacking else sorted(held - set(FAMILIES))[0]
        raise PlanError(f"refused: the bundle holds {what} files and there is no {what} cache to put them in",
                        file=path)


def families(manifest: Manifest) -> set:
    return {f.path.split("/")[0] for f in manifest.files}


def install(path: str, roots: StartupRoots, here: dict, record_dir: str | None = None) -> dict:
    """Install a start-up bundle into `roots`: family -> Placed (and the precompile manifest's
    key count, and the record of what was placed: usage.Installed, kept under `record_dir`, vLLM's
    cache root). PlanError (one line, nothing written) when the bundle is foreign, corrupted,
    unsafe or made for another environment or vLLM configuration. The members are checked once
    per machine (executor/bundle/staging.py: the plugin starts that at register)."""
    manifest = archive.read_manifest(path)
    try:
        check(manifest, roots, here, path)
    except PlanError:
        staging.discard(manifest)
        raise
    names = ops.rekeyed_names(manifest, here.get("deep_gemm_include_dir"), path)
    _check_space(path, manifest, roots, families(manifest))
    # another rank of this node may be placing it: its staging lock is waited for, then its work found
    with staging.consume(path, manifest, unless=lambda: all_in_place(manifest, roots, names)) as staged:
        if staged is None:
            return {"families": {f: ops.Placed(kept=len(_members(manifest, f))) for f in sorted(families(manifest))},
                    "manifest_keys": 0, "installed": None}
        with ops.locked(_lock_root(roots, families(manifest))):
            placed = place_all(manifest, names, staged, roots, here, move=True)
    return {**placed, "installed": record_use(path, manifest, roots, placed, record_dir)}


def install_early(path: str, roots: StartupRoots, vllm_version: str | None, record_dir: str | None = None) -> dict:
    """The EARLY families of a start-up bundle, before vLLM resolves the model (the plugin's
    register: no worker, no GPU asked, no configuration hash yet). Checked against vLLM's version
    alone: a model-info entry describes vLLM's own model class and carries the hash of its source
    file, which vLLM checks again. Only their members are read (they come first in the tar); the
    rest of the bundle waits for ``install`` at load_model. Same refusals and placement as ``install``."""
    manifest = archive.read_manifest(path)
    if manifest.origin != VLLM or manifest.fingerprint.get("vllm") != vllm_version:
        raise PlanError("refused: the bundle was built for another environment "
                        f"(vllm: bundle {manifest.fingerprint.get('vllm')!r}, here {vllm_version!r})", file=path)
    wanted = families(manifest) & set(EARLY)
    if not wanted:
        return {"families": {}, "manifest_keys": 0}
    if all(_in_place(manifest, roots, family) for family in wanted):
        # vLLM loads its plugins in every process (API server, engine core, each worker): only the
        # first one places them; the others find its files and check nothing twice
        return {"families": {f: ops.Placed(kept=len(_members(manifest, f))) for f in sorted(wanted)},
                "manifest_keys": 0}
    _check_space(path, manifest, roots, wanted)
    staged = tempfile.mkdtemp(prefix="warmup-bundle-early-")
    try:
        archive.verify_members(path, manifest, staged, only=tuple(sorted(wanted)))
        with ops.locked(_lock_root(roots, wanted)):
            placed = place_all(manifest, {}, staged, roots, {}, wanted, move=True)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return {**placed, "installed": record_use(path, manifest, roots, placed, record_dir)}


def _check_space(path: str, manifest: Manifest, roots: StartupRoots, wanted: set) -> None:
    problem = archive.space_problem(manifest, tempfile.gettempdir(),
                                    {f: r for f, r in roots._asdict().items() if f in wanted})
    if problem:
        raise PlanError(f"refused: the bundle {problem}", file=path)


def _lock_root(roots: StartupRoots, wanted: set) -> str:
    """One installer at a time: the lock lives in DeepGEMM's root, else the first family's."""
    return next(r for f, r in roots._asdict().items() if r and f in wanted | {"deep_gemm"})


def _members(manifest: Manifest, family: str) -> list[str]:
    """The family's member paths, relative to its root."""
    return [f.path.split("/", 1)[1] for f in manifest.files if f.path.split("/")[0] == family]


def _in_place(manifest: Manifest, roots: StartupRoots, family: str, names: dict | None = None) -> bool:
    """Whether every member of the family is at its place under its root (`names`: DeepGEMM's entry
    names here; an entry to be re-keyed, None, is never in place)."""
    root = getattr(roots, family)
    if not root:
        return False
    for member in _members(manifest, family):
        if family == "deep_gemm":
            entry, _, rest = member.partition("/")
            if (names or {}).get(entry, entry) is None:
                return False
            member = os.path.join("cache", (names or {}).get(entry, entry), rest)
        if not os.path.isfile(os.path.join(root, member)):
            return False
    return True


def all_in_place(manifest: Manifest, roots: StartupRoots, names: dict | None = None) -> bool:
    """Whether an install of this bundle would place nothing (every family's files already there)."""
    return all(_in_place(manifest, roots, family, names) for family in families(manifest))


def record_use(path: str, manifest: Manifest, roots: StartupRoots, placed: dict,
               record_dir: str | None = None) -> usage.Installed:
    """Mark what was placed (executor/bundle/usage.py) and keep the record under vLLM's cache root
    (`record_dir`, default VLLM_CACHE_ROOT's), where `warmup bundle verify` finds it; a record that
    cannot be written is only not kept."""
    paths = {f: p.paths for f, p in placed["families"].items() if p.paths}
    jit = flashinfer_modules.jit_dir(_capabilities(manifest.fingerprint)) if "flashinfer_jit" in paths else None
    installed = usage.mark(path, roots._asdict(), paths, jit)
    try:
        usage.save(installed, usage.record_path(record_dir or default_vllm_cache_root(), manifest.digest()))
    except OSError:
        pass
    return installed


def place_all(manifest: Manifest, names: dict, staged: str, roots: StartupRoots, here: dict,
              wanted: set | None = None, move: bool = False) -> dict:
    """Each held family from `staged` into its root (`move`: the staging copy is ours to rename)."""
    held = families(manifest) if wanted is None else families(manifest) & wanted
    placed = {}
    for family in FAMILIES:
        if family not in held:
            continue
        src, dest = os.path.join(staged, family), getattr(roots, family)
        if family == "deep_gemm":
            placed[family] = ops.place_deep_gemm(manifest, names, staged, dest, here.get("deep_gemm_include_dir"), move)
        elif family == "triton":
            placed[family] = ops.place_children(src, dest, triton_cache.rehome_entry, move)
        elif family == "flashinfer_jit":  # a module the AOT directory has (flashinfer-jit-cache's) is kept
            new = [n for n in sorted(os.listdir(src)) if not os.path.lexists(os.path.join(dest, n))]
            placed[family] = place_tree(src, dest, move)
            flashinfer_modules.mark_placed(dest, new)
        else:
            placed[family] = place_tree(src, dest, move)
    keys = 0
    if manifest.keys and roots.triton and held & {"triton", "deep_gemm"}:
        keys = ops.write_precompile_manifest(manifest, ops.CacheDirs(roots.deep_gemm or "", roots.triton, ""))
    return {"families": placed, "manifest_keys": keys}


def place_tree(src: str, dest: str, move: bool = False) -> ops.Placed:
    """`src`'s tree into `dest`: a directory `dest` lacks lands whole (one rename, its Triton
    entries pointing at their new place), one it has is merged into, a file there or a Triton
    entry there is kept (vLLM, Inductor and Triton publish them complete)."""
    placed = ops.Placed()
    for name in sorted(os.listdir(src)):
        source, target = os.path.join(src, name), os.path.join(dest, name)
        if os.path.isdir(source) and os.path.isdir(target) and not triton_cache.groups(source):
            placed = placed.merge(place_tree(source, target, move))
            continue
        placed = placed.add(ops.place(source, target, rehome_tree if os.path.isdir(source) else None, move), target)
    return placed


def rehome_tree(copy: str, final: str) -> None:
    """Every Triton entry under `copy` (being prepared) points at where it will be once renamed to `final`."""
    for folder, _, _ in os.walk(copy):
        if triton_cache.groups(folder):
            triton_cache.rehome_entry(folder, os.path.normpath(os.path.join(final, os.path.relpath(folder, copy))))


def describe(placed: dict) -> str:
    """One line: per family the entries placed and those already there."""
    parts = [f"{family} {p.new} new ({p.kept} already there)" for family, p in placed["families"].items()]
    return f"installed: {', '.join(parts) or 'nothing'}; {placed['manifest_keys']} keys in the precompile manifest"


def summary(manifest: Manifest) -> str:
    """One line: the bundle's families with their files and bytes."""
    sizes: dict = {}
    for f in manifest.files:
        count, size = sizes.get(f.path.split("/")[0], (0, 0))
        sizes[f.path.split("/")[0]] = (count + 1, size + f.size)
    return ", ".join(f"{family} {n} files {size / 2**20:.1f} MiB" for family, (n, size) in sizes.items())
