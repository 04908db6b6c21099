"""`warmup bundle build|verify|install|inspect` (a `warmup.commands` plugin, like `execute`).

    warmup bundle build PLAN --engine E -o FILE [--jobs N] [--runner none]
    warmup bundle verify FILE          install into a fresh directory, run the plan: 0 compiles or exit 1
    warmup bundle install FILE         into DG_JIT_CACHE_DIR (vLLM's when unset), TRITON_CACHE_DIR and
                                       --flashinfer-cache; refused (exit 2, one line) on a mismatch
    warmup bundle inspect FILE         the contents against the plan: keys present, missing, extra

Exit codes as `warmup execute`: 0 ok, 1 verify saw a compile or a step failed, 2 invalid input
(a foreign, truncated or corrupted file, a fingerprint mismatch), 3 internal error.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from planner import api
from planner.cli import run_guarded
from planner.steps import Keyed

from .. import dg_install
from ..precompile import manifest as precompile_manifest
from ..report import EXIT_FAILED, EXIT_OK
from . import archive, environment, ops


def add_commands(sub) -> None:
    p = sub.add_parser("bundle", help="build, verify, install or inspect a warmup bundle",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmds = p.add_subparsers(dest="bundle_command", metavar="ACTION", required=True)
    b = cmds.add_parser("build", help="run the plan's warmup into fresh caches and pack them")
    b.add_argument("plan")
    b.add_argument("--engine", "-e", required=True)
    b.add_argument("-o", "--output", required=True, help="the bundle file (written atomically)")
    b.add_argument("--jobs", "-j", type=int, default=None, help="precompile workers (as `warmup execute`)")
    b.add_argument("--runner", choices=("reference", "none"), default="reference")
    v = cmds.add_parser("verify", help="install into a fresh directory and run the plan: 0 compiles or exit 1")
    v.add_argument("bundle")
    v.add_argument("--runner", choices=("reference", "none"), default="reference")
    v.add_argument("--report", help="the verifying run's JSON report")
    i = cmds.add_parser("install", help="install into this machine's caches")
    i.add_argument("bundle")
    i.add_argument("--deep-gemm-cache", help="DeepGEMM's cache root (default: DG_JIT_CACHE_DIR, else vLLM's)")
    i.add_argument("--triton-cache", help="Triton's cache (default: TRITON_CACHE_DIR, else ~/.triton/cache)")
    i.add_argument("--flashinfer-cache", help="FlashInfer's autotune file (default: $DG... none: not installed)")
    n = cmds.add_parser("inspect", help="list the contents against the plan")
    n.add_argument("bundle")
    for q in (b, v, i, n):
        q.set_defaults(func=cmd_bundle)


def cmd_bundle(args) -> int:
    """Run one bundle action through the planner's guard: invalid input is one line and exit 2."""
    return run_guarded(ACTIONS[args.bundle_command], args)


def cmd_build(args) -> int:
    extra = ["--runner", args.runner] + (["--jobs", str(args.jobs)] if args.jobs is not None else [])
    manifest = ops.build(args.plan, args.engine, args.output, extra)
    print(f"bundle: {args.output}: {len(manifest.deep_gemm)} DeepGEMM kernels, "
          f"{sum(f.path.startswith('triton/') for f in manifest.files)} Triton files, "
          f"{sum(f.size for f in manifest.files) / 2**20:.1f} MiB; plan {manifest.plan} on {manifest.engine} "
          f"({manifest.plan_digest[:19]})")
    return EXIT_OK


def default_dirs(args) -> ops.CacheDirs:
    dg_install.use_vllm_cache_dir()
    return ops.CacheDirs(args.deep_gemm_cache or dg_install.writable_root(),
                         args.triton_cache or precompile_manifest.triton_cache_dir(),
                         args.flashinfer_cache or os.path.join(dg_install.writable_root(), "flashinfer-autotune.json"))


def cmd_install(args) -> int:
    placed = ops.install(args.bundle, default_dirs(args), environment.measure())
    print(describe(placed))
    return EXIT_OK


def describe(placed: dict) -> str:
    dg, tr, fi = placed["deep_gemm"], placed["triton"], placed["flashinfer"]
    return (f"installed: DeepGEMM {dg.new} kernels ({dg.kept} already there, {dg.rekeyed} re-keyed for this "
            f"install path), Triton {tr.new} entries ({tr.kept} already there), FlashInfer {fi.new} file; "
            f"{placed['manifest_keys']} keys in the precompile manifest")


def cmd_verify(args) -> int:
    manifest = archive.read_manifest(args.bundle)
    work = tempfile.mkdtemp(prefix="warmup-bundle-verify-")
    try:
        dirs = ops.CacheDirs.fresh(work)
        print(describe(ops.install(args.bundle, dirs, environment.measure())) + f" (fresh: {work})")
        extra = ["--runner", args.runner, "--jobs", "0", "--expect-cached", "--jit-monitor", "error",
                 "--on-error", "continue"]
        code, report = ops.run_execute(manifest.plan, manifest.engine, dirs, extra,
                                       args.report or os.path.join(work, "report.json"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return verdict(code, report)


def verdict(code: int, report: dict) -> int:
    """0 compiles and a clean run, or exit 1 saying how many compiled."""
    events = (report.get("jit_monitor") or {}).get("post_seal_events") or []
    walls = {s["stage"]: s["wall_s"] for s in report.get("stages") or []}
    if code == 0 and not events:
        print(f"bundle verify: ok: 0 compiles; warmup stages {sum(walls.values()):.2f} s ({walls})")
        return EXIT_OK
    kernels = ", ".join(sorted({str(e.get('kernel')) for e in events})[:5])
    print(f"bundle verify: FAILED: {len(events)} compiles ({kernels}); warmup exit {code}")
    return EXIT_FAILED


def cmd_inspect(args) -> int:
    manifest = archive.read_manifest(args.bundle)
    fp = manifest.fingerprint
    print(f"bundle {args.bundle}: plan {manifest.plan}, engine {manifest.engine}, digest {manifest.plan_digest}")
    print("fingerprint: " + ", ".join(f"{k}={fp.get(k)}" for k in environment.FIELDS + environment.PATH_FIELDS))
    for line in key_report(manifest):
        print(line)
    return EXIT_OK


def key_report(manifest) -> list[str]:
    """Per backend: the plan's keys present in the bundle, missing, and extra."""
    planned = plan_keys(manifest.plan, manifest.engine)
    held = {"deep_gemm": {k.key for k in manifest.deep_gemm if k.key}}
    for backend, keys in manifest.keys.items():
        held.setdefault(backend, set()).update(keys)
    helpers = sorted({k.name for k in manifest.deep_gemm if not k.key})
    lines = []
    for backend in sorted(set(planned) | set(held)):
        want, have = planned.get(backend, set()), held.get(backend, set())
        lines.append(f"{backend}: {len(want & have)} of {len(want)} plan keys present, {len(want - have)} missing, "
                     f"{len(have - want)} extra")
        lines += [f"  missing: {k}" for k in sorted(want - have)[:20]]
        lines += [f"  extra: {k}" for k in sorted(have - want)[:20]]
    if helpers:
        lines.append(f"deep_gemm helper kernels (no plan key, compiled with the first call): {', '.join(helpers)}")
    legacy = [k for k in manifest.deep_gemm if k.layout == dg_install.LEGACY]
    if legacy:
        movable = sum(k.context is not None for k in legacy)
        lines.append(f"deep_gemm 2.5/2.6 entries re-keyable for another install path: {movable} of {len(legacy)}")
    return lines


def plan_keys(plan: str, engine: str) -> dict:
    """backend -> the compile keys of the plan expanded now (as the manifest names it)."""
    expanded = api.expand(api.load_plan(plan), api.load_engine(engine))
    out: dict = {}
    for step in expanded.steps:
        if isinstance(step, Keyed) and step.compile_keys:
            out.setdefault(step.backend, set()).update(step.compile_keys)
    return out


ACTIONS = {"build": cmd_build, "verify": cmd_verify, "install": cmd_install, "inspect": cmd_inspect}
