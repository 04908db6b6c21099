"""Build, install and verify a warmup bundle (the commands are in executor/bundle/cli.py).

* build: run the plan's warmup (``warmup execute`` in a fresh process) into fresh cache
  directories, so that everything in them is the plan's, then pack them with the manifest.
* install: check the fingerprint (one line naming the field and both values), extract into a
  temporary directory and check every file's sha256, re-key DeepGEMM 2.5/2.6 entries for this
  install path (executor.dg_rekey), then place each entry with one rename under an fcntl lock:
  an entry already there and complete wins, a concurrent installer or DeepGEMM compiling the
  same kernel is harmless, and nothing half-written is ever visible. The Triton precompile
  manifest is rewritten for this machine, so a warm start skips the pool.
* verify: install into a fresh directory, then ``warmup execute --expect-cached --jit-monitor
  error`` in a fresh process: 0 compiles, or it fails.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from typing import NamedTuple

from kernel_model.deep_gemm import key_from_source
from planner import api
from planner.errors import PlanError, WriteError
from planner.output import check_writable

from .. import dg_install, dg_rekey, precompile, triton_cache
from ..environ import scoped_environ
from ..report import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK
from . import archive, environment
from .archive import FORMAT, FileRecord, KernelRecord, Manifest

LOCK = ".warmup-bundle.lock"


class CacheDirs(NamedTuple):
    """Where the three caches live: DeepGEMM's writable root, Triton's cache, FlashInfer's file."""

    deep_gemm: str
    triton: str
    flashinfer: str

    @classmethod
    def fresh(cls, work: str) -> "CacheDirs":
        return cls(os.path.join(work, "deep_gemm"), os.path.join(work, "triton"),
                   os.path.join(work, "flashinfer", "autotune.json"))

    def env(self) -> dict:
        return {"DG_JIT_CACHE_DIR": self.deep_gemm, "TRITON_CACHE_DIR": self.triton}

    def roots(self) -> dict:
        """family -> the directory its entries are under (FlashInfer's: the file's)."""
        return {"deep_gemm": self.deep_gemm, "triton": self.triton, "flashinfer": os.path.dirname(self.flashinfer)}


class Placed(NamedTuple):
    new: int = 0
    kept: int = 0      # already there (an existing complete entry wins)
    rekeyed: int = 0
    paths: tuple = ()  # what this install placed (files, or directories that landed whole)

    def add(self, outcome: bool, dest: str, rekeyed: bool = False) -> "Placed":
        """One more entry: placed at `dest` (outcome True) or already there."""
        return Placed(self.new + outcome, self.kept + (not outcome), self.rekeyed + rekeyed,
                      self.paths + ((dest,) if outcome else ()))

    def merge(self, other: "Placed") -> "Placed":
        return Placed(self.new + other.new, self.kept + other.kept, self.rekeyed + other.rekeyed,
                      self.paths + other.paths)


# --- running the plan ------------------------------------------------------------------------------

def run_execute(plan: str, engine: str, dirs: CacheDirs, extra: list, report_path: str,
                keep_report: bool = True) -> tuple[int, dict]:
    """``warmup execute`` in a fresh process on these cache directories: (exit code, report). A
    report that is not kept (a temporary one, removed with its directory) is not announced."""
    cmd = [sys.executable, "-m", "executor.cli", "execute", plan, "--engine", engine, "--report", report_path,
           "--flashinfer-cache", dirs.flashinfer, "--no-progress", *extra]
    os.makedirs(os.path.dirname(dirs.flashinfer), exist_ok=True)  # verify's fresh directory too
    env = {**os.environ, **dirs.env(), "PYTHONPATH": environment._pythonpath()}
    code = _run_passing_stderr(cmd, env, drop=None if keep_report else f"report: {report_path}")
    try:
        with open(report_path, encoding="utf-8") as f:
            return code, json.load(f)
    except (OSError, ValueError):
        return code, {}


def _run_passing_stderr(cmd: list, env: dict, drop: str | None) -> int:
    """Run `cmd`; its stdout and stderr are ours, less the stderr line `drop`."""
    if drop is None:
        return subprocess.run(cmd, env=env).returncode
    with subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, errors="replace") as proc:
        for line in proc.stderr:
            if line.rstrip("\n") != drop:
                sys.stderr.write(line)
        return proc.wait()


# --- build -----------------------------------------------------------------------------------------

class Failed(Exception):
    """The command could not do its job on this machine (no CUDA device, the warmup failed): one
    line and exit 1, as `warmup execute` exits 1 when a step fails or its backend is unavailable."""


def build(plan: str, engine: str, out: str, extra: list, report_path: str | None = None) -> Manifest:
    """Run the plan's warmup in fresh caches and pack them into `out` (see ready_to_build for
    what is checked before any work). `report_path`: keep the warmup's JSON report there."""
    fp = ready_to_build(plan, engine, out, report_path)
    work = tempfile.mkdtemp(prefix="warmup-bundle-build-")
    try:
        dirs = CacheDirs.fresh(work)
        os.makedirs(os.path.dirname(dirs.flashinfer))
        code, report = run_execute(plan, engine, dirs, extra, report_path or os.path.join(work, "report.json"),
                                   keep_report=report_path is not None)
        if code != EXIT_OK:
            raise warmup_failure(code, report, plan)
        manifest, sources = pack(dirs, Manifest(FORMAT, plan, engine, report.get("digest") or "", fp, [], [], {}))
        archive.write_bundle(out, manifest, sources)
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ready_to_build(plan: str, engine: str, out: str, report_path: str | None) -> dict:
    """This machine's fingerprint, once the plan and engine expand (else PlanError, exit 2), `out`
    and the report can be written (else WriteError, exit 2) and there is a CUDA device (else
    Failed, exit 1): one line before any work, rather than a warmup whose every step fails."""
    api.expand(api.load_plan(plan), api.load_engine(engine))
    check_output(out)
    if report_path is not None:
        check_writable(report_path)
    fp = environment.measure()
    problem = environment.device_problem(fp)
    if problem:
        raise Failed(f"bundle build needs a CUDA device ({problem})")
    return fp


def check_output(out: str) -> None:
    """`-o` refused as the shell refuses a redirection: an empty name, a directory that does not
    exist (`> dir/b.warmup` does not make dir/), and what check_writable refuses."""
    if not out:
        raise WriteError("''", "an empty file name")
    check_writable(out)
    folder = os.path.dirname(os.path.realpath(out))
    if not os.path.isdir(folder):
        raise WriteError(out, f"directory {folder} does not exist (create it first)")


def warmup_failure(code: int, report: dict, plan: str) -> BaseException:
    """How build ends when its warmup exits `code`: as the warmup did (invalid input exit 2, an
    internal error 3, Ctrl-C 130), else exit 1 (Failed). Nothing is written either way."""
    why = f"the plan's warmup failed (exit {code}, {report.get('status') or 'no report'}): no bundle written"
    if code == EXIT_INVALID:
        return PlanError(why, file=plan)
    if code == EXIT_INTERNAL:
        return RuntimeError(why)
    return KeyboardInterrupt() if code == EXIT_INTERRUPTED else Failed(why)


def pack(dirs: CacheDirs, head: Manifest) -> tuple[Manifest, dict]:
    """What the warmup left in `dirs`: the manifest (every file with its sha256 and size, the
    DeepGEMM kernels with their keys, the keys the precompile manifest lists) and, per member
    name, its file on disk."""
    kernels, sources = collect_deep_gemm(dirs.deep_gemm, head.fingerprint)
    sources.update(collect_tree(dirs.triton, "triton"))
    if os.path.isfile(dirs.flashinfer):
        sources[f"flashinfer/{os.path.basename(dirs.flashinfer)}"] = dirs.flashinfer
    files = [FileRecord(name, archive.sha256_file(path), os.path.getsize(path)) for name, path in sorted(sources.items())]
    return head._replace(files=files, deep_gemm=kernels, keys=cached_keys(dirs.triton)), sources


def collect_tree(base: str, prefix: str) -> dict:
    """member name -> file, for every regular file under `base` (links and the rest skipped), but
    the precompile claims: they say which process of this machine compiles what, and claims left by
    a killed owner would hold up the installing machine's pool until they go stale."""
    out = {}
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not (folder == base and d == precompile.CLAIMS_DIR))
        for name in sorted(files):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path) and not name.endswith(".lock"):
                out[f"{prefix}/{os.path.relpath(path, base)}"] = path
    return out


def collect_deep_gemm(root: str, fp: dict) -> tuple[list, dict]:
    """The kernels of a fresh DeepGEMM cache, with their plan keys and (2.5/2.6) re-key contexts."""
    contexts = dg_rekey.candidates(fp.get("nvcc") or "", dg_rekey.arch_of(fp.get("capability") or "9.0"),
                                   int(os.environ.get("DG_JIT_CPP_STANDARD", 20)))
    kernels, sources = [], {}
    for entry in dg_install.scan(root):
        with open(os.path.join(entry.path, dg_install.SOURCE), "rb") as f:
            code = f.read()
        context = None
        if entry.layout == dg_install.LEGACY:
            found = dg_rekey.find_context(entry.name, entry.hash, code, fp.get("deep_gemm_include_dir") or "", contexts)
            context = list(found) if found else None
        kernels.append(KernelRecord(entry.dirname, entry.name, entry.layout,
                                    key_from_source(code.decode("utf-8", "replace")), context))
        sources.update(collect_tree(entry.path, f"deep_gemm/{entry.dirname}"))
    return kernels, sources


def cached_keys(triton_dir: str) -> dict:
    """backend -> keys, as the precompile manifest in this Triton cache lists them ({}: none)."""
    try:
        with open(os.path.join(triton_dir, precompile.MANIFEST_NAME), encoding="utf-8") as f:
            return json.load(f).get("keys") or {}
    except (OSError, ValueError):
        return {}


# --- install ---------------------------------------------------------------------------------------

def install(path: str, dirs: CacheDirs, here: dict) -> dict:
    """Install a bundle into `dirs`; returns what was placed per cache. PlanError (one line) when
    the bundle is foreign, corrupted, or made for another environment."""
    manifest = archive.read_manifest(path)
    problem = environment.mismatch(manifest.fingerprint, here)
    if problem:
        raise PlanError(f"refused: the bundle was built for another environment ({problem})", file=path)
    names = rekeyed_names(manifest, here.get("deep_gemm_include_dir"), path)
    problem = archive.space_problem(manifest, tempfile.gettempdir(), {
        "deep_gemm": dirs.deep_gemm, "triton": dirs.triton, "flashinfer": os.path.dirname(dirs.flashinfer)})
    if problem:
        raise PlanError(f"refused: the bundle {problem}", file=path)
    staging = tempfile.mkdtemp(prefix="warmup-bundle-")
    try:
        archive.verify_members(path, manifest, staging)
        with locked(dirs.deep_gemm):
            dg = place_deep_gemm(manifest, names, staging, dirs.deep_gemm, here.get("deep_gemm_include_dir"))
            return {"deep_gemm": dg,
                    "triton": place_children(os.path.join(staging, "triton"), dirs.triton,
                                              triton_cache.rehome_entry),
                    "flashinfer": _place_flashinfer(staging, dirs.flashinfer),
                    "manifest_keys": write_precompile_manifest(manifest, dirs)}
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def rekeyed_names(manifest: Manifest, include_dir: str | None, path: str) -> dict:
    """entry -> its directory name here: 2.5/2.6 entries re-keyed for this include directory."""
    built = manifest.fingerprint.get("deep_gemm_include_dir")
    names = {}
    for kernel in manifest.deep_gemm:
        if kernel.layout != dg_install.LEGACY or include_dir in (None, built):
            names[kernel.entry] = kernel.entry
            continue
        if kernel.context is None:
            raise PlanError(f"refused: DeepGEMM entry {kernel.entry} is keyed with the include path {built} and "
                            f"its key cannot be reproduced for {include_dir}; install DeepGEMM at {built} or "
                            "rebuild the bundle here", file=path)
        names[kernel.entry] = None  # computed from the code once extracted
    return names


def place_deep_gemm(manifest: Manifest, names: dict, staging: str, root: str, include_dir: str | None,
                    move: bool = False) -> Placed:
    cache = os.path.join(root, "cache")
    os.makedirs(cache, exist_ok=True)
    placed = Placed()
    for kernel in manifest.deep_gemm:
        src = os.path.join(staging, "deep_gemm", kernel.entry)
        name = names[kernel.entry] or _rekey(kernel, src, include_dir)
        dest = os.path.join(cache, name)
        placed = placed.add(place(src, dest, move=move), dest, rekeyed=name != kernel.entry)
    return placed


def _rekey(kernel: KernelRecord, src: str, include_dir: str) -> str:
    with open(os.path.join(src, dg_install.SOURCE), "rb") as f:
        code = f.read()
    return f"kernel.{kernel.name}.{dg_rekey.LegacyContext(*kernel.context).key(kernel.name, code, include_dir)}"


def place(src: str, dest: str, prepare=None, move: bool = False) -> bool:
    """Copy `src` (a file or a directory) next to `dest`, then rename it into place. False when
    `dest` is already there (it wins: DeepGEMM and Triton only ever publish complete entries).
    `prepare(copy, dest)` adjusts the copy before the rename (Triton's entries: triton_cache).
    `move`: `src` is a staging copy of ours, renamed rather than copied where it is on the same
    filesystem (the plugin's install: no byte copied on vLLM's path)."""
    if os.path.lexists(dest):
        return False
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    staged = tempfile.mkdtemp(prefix=".warmup-staging-", dir=parent)
    try:
        target, is_dir = os.path.join(staged, "x"), os.path.isdir(src)
        if not (move and _renamed(src, target)):
            (shutil.copytree if is_dir else shutil.copy2)(src, target)
        if prepare is not None:
            prepare(target, dest)
        if is_dir:
            os.rename(target, dest)  # a directory: atomic, and refused when another one won meanwhile
        else:
            os.link(target, dest)    # a file: never replaces one that appeared meanwhile
        return True
    except FileExistsError:
        return False
    except OSError as e:
        if os.path.lexists(dest):
            return False
        raise PlanError(f"cannot install {dest}: {e}") from None
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _renamed(src: str, target: str) -> bool:
    try:
        os.rename(src, target)
        return True
    except OSError:  # another filesystem (EXDEV): copied instead
        return False


def place_children(src_dir: str, dest_dir: str, prepare=None, move: bool = False) -> Placed:
    """Each entry of `src_dir` into `dest_dir`. Triton's group files name their files by absolute
    path: `prepare` points them at the installed copies, else the entries miss once the building
    machine's directory is gone (tests/executor/test_triton_cache.py)."""
    placed = Placed()
    if not os.path.isdir(src_dir):
        return placed
    for name in sorted(os.listdir(src_dir)):
        if name == precompile.MANIFEST_NAME:
            continue  # rewritten for this machine
        src = os.path.join(src_dir, name)
        dest = os.path.join(dest_dir, name)
        placed = placed.add(place(src, dest, prepare if os.path.isdir(src) else None, move), dest)
    return placed


def _place_flashinfer(staging: str, dest: str) -> Placed:
    folder = os.path.join(staging, "flashinfer")
    files = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    if not files:
        return Placed()
    return Placed().add(place(os.path.join(folder, files[0]), dest), dest)


def write_precompile_manifest(manifest: Manifest, dirs: CacheDirs) -> int:
    """The keys the bundle holds, for this machine's fingerprint, so that a warm start skips the pool."""
    with scoped_environ(dirs.env()):  # the manifest's path and fingerprint read these caches
        add = {backend: set(keys) for backend, keys in manifest.keys.items()}
        return precompile.update_manifest(precompile.manifest_path(), add)


@contextmanager
def locked(root: str):
    """One installer at a time per DeepGEMM cache (others wait): fcntl, released on exit or crash."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, LOCK), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
