"""Build, install and verify a warmup bundle (the commands are in executor/bundle/cli.py).

* build: run the plan's warmup (``warmup execute`` in a fresh process) into fresh cache
  directories, so that everything in them is the plan's, then pack them with the manifest.
* install: check the fingerprint (one line naming the field and both values), extract into a
  temporary directory and check every file's sha256, re-key DeepGEMM 2.5/2.6 entries for this
  install path (executor.caches.deep_gemm_rekey), then place each family
  (executor/bundle/placement.py: relocated to this machine's paths, each entry with one rename,
  checked as its loader takes it) under an fcntl lock: an entry already there and complete wins,
  a concurrent installer or DeepGEMM compiling the same kernel is harmless, and nothing
  half-written is ever visible. The Triton precompile manifest is rewritten for this machine, so a
  warm start skips the pool.
* verify: install into a fresh directory, then ``warmup execute --expect-cached --jit-monitor
  error`` in a fresh process: 0 compiles, or it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from planner import api
from planner import output as planner_output
from planner.errors import PlanError, WriteError

from .. import precompile
from ..caches import deep_gemm
from ..caches.family import PLAN
from ..caches.registry import CacheRoots, for_origin
from ..caches.targets import cannot_write, check_directories
from ..report import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK
from . import archive, environment, locks, packing
from .archive import FORMAT, Manifest
from .placement import Installation, families, place_all

LOCK = ".warmup-bundle.lock"


PLAN_FAMILIES = tuple(f.name for f in for_origin(PLAN))  # deep_gemm, triton, flashinfer


def fresh_roots(work: str) -> CacheRoots:
    """Empty caches of a plan's families under `work` (a build's, a verify's)."""
    return CacheRoots.fresh(work, PLAN_FAMILIES)


# --- running the plan ------------------------------------------------------------------------------

def run_execute(plan: str, engine: str, roots: CacheRoots, extra: list, report_path: str,
                keep_report: bool = True) -> tuple[int, dict]:
    """``warmup execute`` in a fresh process on these caches: (exit code, report). A report that is
    not kept (a temporary one, removed with its directory) is not announced."""
    cmd = [sys.executable, "-m", "executor.cli", "execute", plan, "--engine", engine, "--report", report_path,
           "--flashinfer-cache", roots["flashinfer"], "--no-progress", *extra]
    os.makedirs(roots.directory("flashinfer"), exist_ok=True)  # verify's fresh directory too
    env = {**os.environ, **roots.env(), "PYTHONPATH": environment._pythonpath()}
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
        roots = fresh_roots(work)
        os.makedirs(roots.directory("flashinfer"))
        code, report = run_execute(plan, engine, roots, extra, report_path or os.path.join(work, "report.json"),
                                   keep_report=report_path is not None)
        if code != EXIT_OK:
            raise warmup_failure(code, report, plan)
        manifest, sources = pack(roots, Manifest(FORMAT, plan, engine, report.get("digest") or "", fp, [], [], {}))
        archive.write_bundle(out, manifest, sources)
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ready_to_build(plan: str, engine: str, out: str, report_path: str | None) -> dict:
    """This machine's fingerprint, once the plan and engine expand (else PlanError, exit 2), `out`
    and the report can be written (else WriteError, exit 2) and there is a CUDA device (else
    Failed, exit 1): one line before any work, rather than a warmup whose every step fails."""
    loaded_plan, loaded_engine = api.load_plan(plan), api.load_engine(engine)
    api.expand(loaded_plan, loaded_engine)
    inputs = api.input_files(loaded_plan, loaded_engine)
    check_output(out, inputs)
    planner_output.check_outputs({"--report": report_path}, inputs)
    fp = environment.measure()
    problem = environment.device_problem(fp)
    if problem:
        raise Failed(f"bundle build needs a CUDA device ({problem})")
    return fp


def check_output(out: str, inputs: tuple[str, ...] | list[str] = ()) -> None:
    """`-o` refused as planner.output refuses it (an empty name, a missing directory, a file the
    command reads), and `-o -`: a bundle is a binary archive, which a terminal or a pipe of text
    lines is no place for."""
    if out == "-":
        raise WriteError(out, "a bundle is a binary file: give its path (-o - is stdout for text outputs only)")
    planner_output.check_output(out, inputs)


def warmup_failure(code: int, report: dict, plan: str) -> BaseException:
    """How build ends when its warmup exits `code`: as the warmup did (invalid input exit 2, an
    internal error 3, Ctrl-C 130), else exit 1 (Failed). Nothing is written either way."""
    why = f"the plan's warmup failed (exit {code}, {report.get('status') or 'no report'}): no bundle written"
    if code == EXIT_INVALID:
        return PlanError(why, file=plan)
    if code == EXIT_INTERNAL:
        return RuntimeError(why)
    return KeyboardInterrupt() if code == EXIT_INTERRUPTED else Failed(why)


def pack(roots: CacheRoots, head: Manifest) -> tuple[Manifest, dict]:
    """What the warmup left in `roots`: the manifest (every file with its sha256 and size, the
    DeepGEMM kernels with their keys, the keys the precompile manifest lists) and, per member
    name, its file on disk."""
    manifest, sources = packing.pack(dict(roots), head)
    return manifest._replace(keys=cached_keys(roots["triton"])), sources


def cached_keys(triton_dir: str) -> dict:
    """backend -> keys, as the precompile manifest in this Triton cache lists them ({}: none)."""
    try:
        with open(os.path.join(triton_dir, precompile.MANIFEST_NAME), encoding="utf-8") as f:
            return json.load(f).get("keys") or {}
    except (OSError, ValueError):
        return {}


# --- install ---------------------------------------------------------------------------------------

def install(path: str, roots: CacheRoots, here: dict) -> Installation:
    """Install a plan's bundle into `roots`. PlanError (one line) when the bundle is foreign,
    corrupted, or made for another environment."""
    manifest = archive.read_manifest(path)
    problem = environment.mismatch(manifest.fingerprint, here)
    if problem:
        raise PlanError(f"refused: the bundle was built for another environment ({problem})", file=path)
    names = deep_gemm.names_here(manifest, here.get("deep_gemm_include_dir"), path)
    destinations = {f: roots.directory(f) for f in roots}
    check_directories(destinations)  # a file in the way, read-only: one line before anything is written
    problem = archive.space_problem(manifest, tempfile.gettempdir(), destinations)
    if problem:
        raise PlanError(f"refused: the bundle {problem}", file=path)
    lacking = [f for f in PLAN_FAMILIES if f in families(manifest) and not roots.get(f)]
    if lacking:  # the FlashInfer file, on a machine whose fingerprint names no FlashInfer version or GPU
        raise PlanError(f"refused: the bundle holds {lacking[0]} files and there is no default {lacking[0]} "
                        f"cache to put them in: give --{lacking[0].replace('_', '-')}-cache", file=path)
    staging = tempfile.mkdtemp(prefix="warmup-bundle-")
    try:
        archive.verify_members(path, manifest, staging)
        with locked(roots["deep_gemm"]):
            return place_all(manifest, staging, roots, names, here.get("deep_gemm_include_dir"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def locked(root: str):
    """One installer at a time per cache root (others wait), the root made if missing; a cache that
    cannot take the lock file is one line."""
    def cannot(e: OSError):
        return cannot_write(e, root, "nothing was placed")

    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        raise cannot(e) from None
    return locks.exclusive(os.path.join(root, LOCK), cannot_open=cannot)
