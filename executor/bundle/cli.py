"""`warmup bundle build|verify|install|inspect|push|pull` (a `warmup.commands` plugin, like `execute`).

    warmup bundle build PLAN --engine E -o FILE [--jobs N] [--runner none] [--report FILE]
    warmup bundle verify BUNDLE        install into a fresh directory, run the plan: 0 compiles or exit 1;
                                       per family what was never loaded, compiled again or read from the
                                       building machine's copy (--inert error: any such entry is exit 1).
                                       A vLLM start-up's bundle: what of its install into these caches the
                                       server used (run it after the load)
    warmup bundle install BUNDLE       into DG_JIT_CACHE_DIR (vLLM's when unset), TRITON_CACHE_DIR and
                                       --flashinfer-cache (default: the file `warmup execute` keeps for
                                       the bundle's FlashInfer version and GPU), every path a loader
                                       follows made this machine's;
                                       refused (exit 2, one line) on a mismatch; --target bundle: checked
                                       against the bundle's own fingerprint (an image built without a GPU)
    warmup bundle inspect BUNDLE       every member checked as install checks it; the fingerprint
                                       table; per family the entries, bytes (and the plan's keys)
    warmup bundle push FILE REF        to an OCI registry, REF oci://HOST/REPO[:TAG]: one artifact; prints
                                       REF pinned to its digest (executor/bundle/cli_registry.py)
    warmup bundle pull REF -o FILE     from an OCI registry, by tag or digest, every byte checked

BUNDLE, as the vLLM plugin's WARMUP_BUNDLE: a file, a directory holding one (an image volume), or
an oci:// reference, pulled into a temporary directory for the command's length (--plain-http,
--timeout as `pull`); each opened by its scheme's module (executor/bundle/sources/).

A bundle of a whole vLLM start-up is written by the vLLM plugin (WARMUP_BUNDLE_OUT) and installed by
it (WARMUP_BUNDLE) or by `install`, into vLLM's caches (--vllm-cache-root, else VLLM_CACHE_ROOT).
Its FlashInfer JIT modules go where FlashInfer loads prebuilt ones (its data/aot directory).

Exit codes as `warmup execute`: 0 ok; 1 verify saw a compile, a step failed, or build cannot
run its warmup here (no CUDA device: said in one line before any work), or an oci:// bundle's
registry could not be used; 2 invalid input (a plan or engine, an output that cannot be written, a
foreign, truncated, corrupted or unsafe bundle, a directory without one bundle, a reference that is
not one, a fingerprint mismatch); 3 internal error.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from planner.cli import run_guarded
from planner.errors import PlanError
from planner.output import check_outputs

from ..caches.registry import CacheRoots
from ..caches.roots import default_vllm_cache_root
from ..report import EXIT_FAILED, EXIT_OK
from . import archive, cli_registry, environment, inspect_report, ops, startup, usage


BUNDLE_HELP = ("the bundle: a file, a directory holding one (an image volume), or oci://HOST/REPO[:TAG][@sha256:D] "
               "(pulled into a temporary directory for the command's length)")
OPENED = ("verify", "install", "inspect")  # their argument is opened through the table of sources (sources/)

BUILD_HELP = """Run the plan's warmup (`warmup execute`, in a fresh process) into fresh cache
directories and pack them into one file. Before any work: the plan and engine must expand, the
output (and --report) must be writable (exit 2 otherwise), and the machine must have a CUDA
device (exit 1 otherwise, one line). A warmup that fails is exit 1 with nothing written."""


def add_commands(sub) -> None:
    p = sub.add_parser("bundle", help="build, verify, install, inspect, push or pull a warmup bundle",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmds = p.add_subparsers(dest="bundle_command", metavar="ACTION", required=True,
                            help="what to do with a bundle: build, verify, install, inspect, push or pull")
    b = cmds.add_parser("build", help="run the plan's warmup into fresh caches and pack them (needs a CUDA device)",
                        description=BUILD_HELP)
    b.add_argument("plan", help="the plan whose warmup fills the bundle (a built-in name or a YAML file)")
    b.add_argument("--engine", "-e", required=True, help="the engine the plan is expanded for (a built-in name or a YAML file)")
    b.add_argument("-o", "--output", required=True, help="the bundle file (written atomically)")
    b.add_argument("--jobs", "-j", type=int, default=None, help="precompile workers (as `warmup execute`)")
    b.add_argument("--runner", choices=("reference", "none"), default="reference",
                   help="the model the warmup's batches run through, as `warmup execute` takes it")
    b.add_argument("--report", help="keep the warmup's JSON report here")
    v = cmds.add_parser("verify", help="install into a fresh directory and run the plan: 0 compiles or exit 1; "
                                        "for a vLLM start-up's bundle, report what of its install was used")
    v.add_argument("bundle", help=BUNDLE_HELP)
    v.add_argument("--runner", choices=("reference", "none"), default="reference",
                   help="the model the verifying run's batches run through, as `warmup execute` takes it")
    v.add_argument("--report", help="the verifying run's JSON report")
    v.add_argument("--inert", choices=("warn", "error"), default="warn",
                   help="an installed entry never loaded or compiled again, or a building copy read in its place: "
                        "listed (warn) or also exit 1 (error)")
    v.add_argument("--vllm-cache-root", help="a vLLM start-up's bundle: the vLLM cache root it was installed "
                                             "under (default: VLLM_CACHE_ROOT, else ~/.cache/vllm)")
    i = cmds.add_parser("install", help="install into this machine's caches")
    i.add_argument("bundle", help=BUNDLE_HELP)
    i.add_argument("--deep-gemm-cache", help="DeepGEMM's cache root (default: DG_JIT_CACHE_DIR, else vLLM's)")
    i.add_argument("--triton-cache", help="Triton's cache (default: TRITON_CACHE_DIR, else ~/.triton/cache)")
    i.add_argument("--flashinfer-cache", help="FlashInfer's autotune file (default: the one `warmup execute` uses "
                                              "for the bundle's FlashInfer version and GPU, "
                                              "VERSION/GPU/autotune_configs.json under WARMUP_FLASHINFER_CACHE_DIR, "
                                              "else under ~/.cache/warmup-planner/flashinfer_autotune, "
                                              "XDG_CACHE_HOME for ~/.cache when set)")
    i.add_argument("--vllm-cache-root", help="a vLLM start-up bundle: vLLM's cache root (default: VLLM_CACHE_ROOT, "
                                             "else ~/.cache/vllm)")
    i.add_argument("--vllm-config-hash", help="a vLLM start-up bundle: refuse it unless it was built with this "
                                              "VllmConfig.compute_hash() (the plugin checks the live one itself)")
    i.add_argument("--target", choices=("machine", "bundle"), default="machine",
                   help="what the bundle's fingerprint is checked against: this machine (default), or the "
                        "bundle's own (a vLLM start-up's bundle baked into an image on a machine without its "
                        "GPU; the vLLM plugin checks the real machine when vLLM starts)")
    n = cmds.add_parser("inspect", help="check every member as install does; per family the entries, bytes, "
                                         "the plan's keys present and missing")
    n.add_argument("bundle", help=BUNDLE_HELP)
    for q in (v, i, n):
        cli_registry.add_registry_options(q, " of an oci:// bundle")
    for q in (b, v, i, n, *cli_registry.add_commands(cmds)):
        q.set_defaults(func=cmd_bundle)


def cmd_bundle(args) -> int:
    """Run one bundle action through the planner's guard: invalid input is one line and exit 2;
    an action that cannot be done here (ops.Failed) is one line and exit 1."""
    return run_guarded(_run_action, args)


def _run_action(args) -> int:
    try:
        if args.bundle_command not in OPENED:
            return ACTIONS[args.bundle_command](args)
        # `bundle`: the file to read; `named`: the text given, as lines say it; `origin`: where the
        # bundle came from, as an install's record keeps it (an oci:// bundle's pinned name, never the
        # temporary file it was pulled into for the command's length)
        with cli_registry.opened(args.bundle, args) as local:
            return ACTIONS[args.bundle_command](argparse.Namespace(**{**vars(args), "bundle": local.path,
                                                                      "named": args.bundle, "origin": local.origin}))
    except ops.Failed as e:
        print(f"warmup: error: {e}", file=sys.stderr)
        return EXIT_FAILED


def cmd_build(args) -> int:
    extra = ["--runner", args.runner] + (["--jobs", str(args.jobs)] if args.jobs is not None else [])
    manifest = ops.build(args.plan, args.engine, args.output, extra, args.report)
    print(f"bundle: {args.output}: {len(manifest.deep_gemm)} DeepGEMM kernels, "
          f"{sum(f.path.startswith('triton/') for f in manifest.files)} Triton files, "
          f"{sum(f.size for f in manifest.files) / 2**20:.1f} MiB; plan {manifest.plan} on {manifest.engine} "
          f"({manifest.plan_digest[:19]})")
    return EXIT_OK


def plan_roots(args, fingerprint: dict) -> CacheRoots:
    """A plan's caches here (executor/caches/roots.py), less what the options override; the
    FlashInfer file's is kept per FlashInfer version and GPU: the bundle's `fingerprint` names them
    (the install refuses a machine that differs)."""
    roots = CacheRoots.resolve(os.environ, families=ops.PLAN_FAMILIES, fingerprint=fingerprint)
    return roots.replace(deep_gemm=args.deep_gemm_cache or roots["deep_gemm"],
                         triton=args.triton_cache or roots["triton"],
                         flashinfer=args.flashinfer_cache or roots["flashinfer"])


def cmd_install(args) -> int:
    check_outputs({"--flashinfer-cache": args.flashinfer_cache}, [args.bundle])  # never over the bundle read
    manifest = archive.read_manifest(args.bundle)
    if manifest.origin == archive.VLLM:
        return install_startup(args)
    if args.target == "bundle":
        raise PlanError("--target bundle is for a vLLM start-up's bundle (the plugin checks the machine at "
                        "start); a plan's bundle is installed against this machine", file=args.bundle)
    installation = ops.install(args.bundle, plan_roots(args, manifest.fingerprint), environment.measure())
    print_installation(installation)
    return EXIT_OK


def startup_roots(args) -> CacheRoots:
    """vLLM's caches here as a vLLM started now would find them, less what the options override."""
    roots = CacheRoots.resolve(os.environ, args.vllm_cache_root)
    return roots.replace(deep_gemm=args.deep_gemm_cache or roots["deep_gemm"],
                         triton=args.triton_cache or roots["triton"])


def install_startup(args) -> int:
    as_built = args.target == "bundle"
    here = {**({} if as_built else environment.measure()), "vllm_config_hash": args.vllm_config_hash}
    installation = startup.install(args.bundle, startup_roots(args), here, args.vllm_cache_root, as_built=as_built,
                                   origin=args.origin)
    print_installation(installation)
    if as_built:
        print("note: installed against the bundle's own fingerprint (--target bundle), not this machine's; "
              "the vLLM plugin checks the machine when vLLM starts and removes this install if it differs")
    if args.vllm_config_hash is None:
        print("note: vllm_config_hash not checked (give --vllm-config-hash, or install with the plugin: "
              "WARMUP_BUNDLE); vLLM finds the torch.compile files only under the same configuration")
    return EXIT_OK


def print_installation(installation) -> None:
    """The install's line, then one per member not installed and per file removed."""
    print(installation.describe())
    for line in installation.problem_lines():
        print(f"  {line}")


def cmd_verify(args) -> int:
    manifest = archive.read_manifest(args.bundle)
    if manifest.origin == archive.VLLM:
        return verify_startup(args, manifest)
    # refused before the install and the run, not after them; the bundle is the command's input
    check_outputs({"--report": args.report}, [args.bundle])
    work = tempfile.mkdtemp(prefix="warmup-bundle-verify-")
    try:
        roots = ops.fresh_roots(work)
        installation = ops.install(args.bundle, roots, environment.measure())
        print(installation.describe() + " (into a fresh temporary directory)")
        installed = usage.mark(args.bundle, {f: roots.directory(f) for f in roots},
                               {f: p.paths for f, p in installation.families.items()}, manifest)
        extra = ["--runner", args.runner, "--jobs", "0", "--expect-cached", "--jit-monitor", "error",
                 "--on-error", "continue"]
        code, report = ops.run_execute(manifest.plan, manifest.engine, roots, extra,
                                       args.report or os.path.join(work, "report.json"),
                                       keep_report=args.report is not None)
        uses = usage.check(installed)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return max(verdict(code, report), use_verdict(uses, args.inert))


def verify_startup(args, manifest) -> int:
    """What of a vLLM start-up's bundle the server used, from the record its install left under
    this vLLM cache root (the plugin's WARMUP_BUNDLE, or `bundle install`)."""
    root = args.vllm_cache_root or default_vllm_cache_root()
    installed = usage.load(usage.record_path(root, manifest.digest()))
    if installed is None:
        raise ops.Failed(f"{args.named} was not installed under the vLLM cache root {root} (no record of it): "
                         "start vLLM with WARMUP_BUNDLE, or `warmup bundle install` it, then verify")
    return use_verdict(usage.check(installed), args.inert)


def use_verdict(uses: list, inert: str) -> int:
    """The use lines; exit 1 where an entry is inert and --inert error."""
    for line in usage.lines(uses):
        print(f"bundle use: {line}")
    count = usage.inert_count(uses)
    if count and inert == "error":
        print(f"bundle verify: FAILED: {count} installed entries inert (never loaded, compiled again, or read "
              "from the building machine's copy)")
        return EXIT_FAILED
    return EXIT_OK


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
    work = tempfile.mkdtemp(prefix="warmup-bundle-inspect-")
    try:
        archive.verify_members(args.bundle, manifest, work)  # what install would refuse: one line, exit 2
        paths = inspect_report.building_paths(manifest, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    vllm = manifest.origin == archive.VLLM
    what = f"a vLLM start-up (plan {manifest.plan or 'none'})" if vllm else f"plan {manifest.plan}"
    print(f"bundle {args.named}: {what}, engine {manifest.engine or '-'}, digest {manifest.plan_digest or '-'}")
    for line in inspect_report.fingerprint_table(manifest.fingerprint, with_vllm=vllm):
        print(line)
    print(f"members: {len(manifest.files)} files, each a listed regular file matching its size and sha256 "
          "(checked as install checks them)")
    for line in (inspect_report.startup_report(manifest) if vllm else inspect_report.key_report(manifest)) + paths:
        print(line)
    return EXIT_OK


ACTIONS = {"build": cmd_build, "verify": cmd_verify, "install": cmd_install, "inspect": cmd_inspect,
           **cli_registry.ACTIONS}
