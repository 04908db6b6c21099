"""`warmup execute`: plan and execute, or execute an expanded plan exactly as planned.

    warmup execute PLAN --engine ENGINE [options]     plan, then execute
    warmup execute EXPANDED.yaml [options]            execute exactly what was planned;
                                                      refused when stale
    python3 -m executor.cli execute ...               the same without the entry point

Registered as a `warmup.commands` plugin (pyproject), so the planner never imports
the executor. Importing this module imports neither torch nor triton: the run does,
when a backend or the runner needs them. Exit codes: 0 every step ok or skipped; 1 a
step failed, a step was unavailable (unless --allow-missing), or the hot-path check or
the serving trace (--verify-trace) saw a compile; 2 invalid input; 3 internal error;
130 interrupted.
The report (--report) is written in every one of these cases.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from planner import api
from planner.cli import Parser
from planner.engine.facts import EngineFacts
from planner.errors import PlanError
from planner.output import check_outputs, check_writable
from planner.plan.steps import FAMILIES
from planner.tables.kernel_configs import table_path
from planner.words import did_you_mean

from .caches import deep_gemm_install
from .environ import scoped_environ
from .precompile import default_jobs
from .progress import Progress
from .registry import backend_families, known_backends
from .report import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_INVALID, Report  # one definition of the exit codes
from .run import INJECT_KINDS, Options, execute

KERNEL_CONFIG_DIR = "WARMUP_KERNEL_CONFIG_DIR"  # tuned tables: planner.tables.kernel_configs.config_root reads it


def add_commands(sub) -> None:
    """Entry point `warmup.commands`: add `execute` to the `warmup` parser."""
    p = sub.add_parser("execute", help="execute a warmup plan on this machine's GPU",
                       description=cmd_execute.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("plan", help="built-in plan name or plan YAML (planned first, needs --engine), "
                                "or an expanded plan file (`warmup plan -o`) executed as it is")
    p.add_argument("--engine", "-e", help="engine name or YAML: required with a plan; with an expanded plan "
                                          "it defaults to the built-in engine the plan names (for the stale check)")
    p.add_argument("--source-plan", metavar="PLAN",
                   help="with an expanded plan: the plan it was expanded from (default: the built-in plan it names)")
    p.add_argument("--backend", action="append", default=[], metavar="FAMILY=NAME",
                   help="which backend implements a kernel family where several are installed: "
                        f"FAMILY in {', '.join(FAMILIES)} or 'all'; NAME in triton, deep_gemm, flashinfer, "
                        "torch, null (default: what each step names). Repeatable")
    p.add_argument("--dry-run", action="store_true", help="walk the plan with the null backend and no runner "
                                                          "(no GPU; counts only)")
    p.add_argument("--on-error", choices=("stop", "continue"), default="stop",
                   help="after a failed step: stop (the rest is reported skipped) or continue (default: stop)")
    p.add_argument("--allow-missing", action="store_true",
                   help="steps whose backend or runner is missing (unavailable) do not fail the run")
    p.add_argument("--report", metavar="FILE", help="write the JSON report here (atomically, always)")
    p.add_argument("--jit-monitor", choices=("off", "warn", "error"), default="warn",
                   help="after the warmup is sealed, report each compile (warn) or raise (error) (default: warn)")
    p.add_argument("--jit-log", metavar="FILE", help="append every post-seal compile here as a JSON line")
    p.add_argument("--verify", type=int, default=0, metavar="N",
                   help="after sealing, run N random calls inside the plan's ranges and report every compile")
    p.add_argument("--verify-seed", type=int, default=0, metavar="SEED",
                   help="seed of --verify's calls and of --verify-trace's trace (default: 0)")
    p.add_argument("--verify-trace", type=int, default=0, metavar="N",
                   help="after sealing (and --verify), run N steps of the seeded serving trace "
                        "(executor.runner.trace) on the runner the batch steps warmed; report every compile "
                        "by kernel family and the first-step and p50/p99 step latencies (needs the runner)")
    p.add_argument("--runner", choices=("reference", "none"), default="reference",
                   help="model runner for batch and CUDA-graph steps: reference (executor.runner.reference) "
                        "or none (skip them) (default: reference)")
    p.add_argument("--device", default=None, help="torch device (default: cuda; cpu runs the Triton interpreter)")
    p.add_argument("--kernel-config-dir", metavar="DIR",
                   help="where tuned kernel tables are read and written "
                        "(default: $WARMUP_KERNEL_CONFIG_DIR, else the packaged plans/kernel-configs)")
    p.add_argument("--retune", action="store_true", help="tune again even where a table covers every bucket")
    p.add_argument("--flashinfer-cache", metavar="FILE",
                   help="FlashInfer autotune cache file (cache: persistent) (default: "
                        "VERSION/GPU/autotune_configs.json for this FlashInfer version and GPU, under WARMUP_FLASHINFER_CACHE_DIR, else under "
                        "~/.cache/warmup-planner/flashinfer_autotune, XDG_CACHE_HOME for ~/.cache when set; "
                        "`warmup bundle install` places a plan bundle's file there)")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="compile the plan's distinct kernel variants in N worker processes first (sharing the "
                        "on-disk caches), then run every step, which only loads them; 0 or 1: compile in this "
                        "process. Skipped when a manifest in the Triton cache lists every key "
                        "(default: the CPU cores, at most 32)")
    p.add_argument("--expect-cached", action="store_true",
                   help="seal the JIT monitor before the first step: every kernel must load from the disk caches "
                        "(a prepared cache, an installed bundle), and one compiled is a post-seal compile "
                        "(with --jit-monitor error its step fails); use with --jobs 0")
    p.add_argument("--no-progress", action="store_true", help="no progress output")
    p.add_argument("--inject-failure", action="append", default=[], metavar="STEP_ID[=error|oom|interrupt]",
                   help="testing: make a step fail with an exception, a CUDA OOM or a Ctrl-C")
    p.set_defaults(func=cmd_execute)


def cmd_execute(args) -> int:
    """Execute a warmup plan: every step through its handler and backend, with progress per stage,
    a summary table (steps run, kernel calls, variants compiled, variants loaded from the disk
    cache, wall time per stage) and a JSON report. Steps end ok, failed, unavailable (backend or
    runner missing here) or skipped. With --jobs N (default: the CPU cores, at most 32) the
    plan's distinct variants are first compiled in N worker processes sharing the disk caches;
    the summary then shows what the workers compiled ("pool") and the speed-up."""
    try:  # an output that cannot be written, or that is an input, is refused before the run, not after it
        check_run_outputs(args, [args.plan, args.engine, args.source_plan])
    except PlanError as e:
        print(f"warmup: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    # The report written is the last of these: one of input refused before a plan is loaded (its
    # error, no plan), then the plan's own, built by _execute once the plan and options are known.
    reports = [Report(options={"argv": sys.argv[1:]})]
    try:
        with scoped_environ(run_environment(args)):
            code = _run(args, reports)
    finally:
        written = not args.report or _write_report(reports[-1], args.report)
    # A report that could not be written is a refused write (exit 2), unless the run already failed worse.
    return code if written or code not in (0, 1) else EXIT_INVALID


def check_run_outputs(args, inputs) -> None:
    """Every output flag against every input (WriteError, exit 2): the plan and engine files, and
    for the report and the JIT log also the FlashInfer cache, which the run reads before it saves."""
    files = [f for f in inputs if f]
    check_outputs({"--flashinfer-cache": args.flashinfer_cache}, files)
    check_outputs({"--report": args.report, "--jit-log": args.jit_log}, [*files, *filter(None, [args.flashinfer_cache])])


def _run(args, reports: list) -> int:
    """The run, its failures recorded in the report (the last of `reports`) and turned into exit codes."""
    try:
        return _execute(args, reports)
    except KeyboardInterrupt:
        report = reports[-1]
        report.interrupted = True
        print("warmup: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - invalid input (PlanError) or a bug: report it, then exit
        report = reports[-1]
        if isinstance(e, PlanError):
            report.error, report.error_kind = str(e), "invalid"
            print(f"warmup: error: {e}", file=sys.stderr)
            return EXIT_INVALID
        report.error, report.error_kind = f"{type(e).__name__}: {e}", "internal"
        if os.environ.get("WARMUP_DEBUG"):
            raise
        print(f"warmup: internal error: {type(e).__name__}: {e} (set WARMUP_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL


def _write_report(report, path: str) -> bool:
    """Write the report; False (and one error line) when it cannot be written."""
    # A second Ctrl-C must not leave the report half written (the write is atomic anyway).
    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        previous = None
    try:
        report.write(path)
        print(f"report: {path}", file=sys.stderr)
        return True
    except OSError as e:  # planner.errors.WriteError, which names the path and the reason
        print(f"warmup: error: {e}", file=sys.stderr)
        return False
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def parse_backends(items: list[str], dry_run: bool) -> dict:
    chosen = {"all": "null"} if dry_run else {}
    for item in items:
        family, sep, name = item.partition("=")
        if not sep:
            family, name = "all", item
        if family != "all" and family not in FAMILIES:
            raise PlanError(f"--backend {item}: unknown family {family!r}{did_you_mean(family, FAMILIES + ('all',))} "
                            f"(families: {', '.join(FAMILIES)}, all)")
        if name not in known_backends():
            raise PlanError(f"--backend {item}: unknown backend {name!r}{did_you_mean(name, known_backends())} "
                            f"(backends: {', '.join(known_backends())})")
        if family != "all" and family not in backend_families(name):
            raise PlanError(f"--backend {item}: backend {name} does not implement {family} "
                            f"(it implements {', '.join(backend_families(name))})")
        chosen[family] = name
    return chosen


def parse_inject(items: list[str]) -> dict:
    out = {}
    for item in items:
        step_id, _, kind = item.partition("=")
        kind = kind or "error"
        if kind not in INJECT_KINDS:
            raise PlanError(f"--inject-failure {item}: kind must be one of {', '.join(INJECT_KINDS)}")
        out[step_id] = kind
    return out


def load_input(args):
    """(expanded plan, Engine, source description, the files read): plan first, or load and check
    an expanded file."""
    target = api.load_target(args.plan)
    installed = deep_gemm_install.find_install()
    deep_gemm = installed.label() if installed is not None else None  # the DeepGEMM this run would use
    if target.expanded is not None:
        engine, plan = _sources_of(target.expanded, args, target.path)
        api.check_fresh(target.expanded, engine, plan, file=target.path, deep_gemm=deep_gemm)
        return target.expanded, engine, {"kind": "expanded plan", "file": target.path,
                                         "freshness": "planner.api.check_fresh"}, [target.path, *api.input_files(plan, engine)]
    if not args.engine:
        raise PlanError("--engine is required to plan and execute a plan (or pass an expanded plan file)",
                        file=args.plan)
    engine = api.load_engine(args.engine)
    return (api.expand(target.plan, engine, deep_gemm), engine,
            {"kind": "plan", "plan": args.plan, "engine": args.engine}, api.input_files(target.plan, engine))


def _sources_of(expanded, args, path: str):
    """The engine (--engine, else the built-in one the plan names) and the plan (--source-plan, else
    the built-in one it names) to check an expanded plan against; refused when either is missing."""
    try:
        engine = api.load_engine(args.engine or expanded.engine)
        plan = api.source_plan(expanded, args.source_plan, file=path)
        if plan is None:
            plan = api.load_plan(expanded.plan)  # not a built-in plan: this names it as missing
    except PlanError as e:
        raise PlanError(f"cannot check that this expanded plan is fresh: {e}; pass the engine with --engine "
                        "and the plan with --source-plan", file=path) from None
    return engine, plan


def _execute(args, reports: list) -> int:
    backends = parse_backends(args.backend, args.dry_run)
    inject = parse_inject(args.inject_failure)
    jobs = _jobs(args)
    for flag, value in (("--verify", args.verify), ("--verify-trace", args.verify_trace)):
        if value < 0:
            raise PlanError(f"{flag} must be >= 0, got {value}")
    device = args.device or ("cpu" if args.dry_run else "cuda")
    expanded, engine, source, inputs = load_input(args)
    # The plans a plan extends are inputs too, known once it is loaded.
    try:
        check_outputs({"--report": args.report}, inputs)
    except PlanError:
        args.report = None  # refused: the report must not be written over that input after all
        raise
    check_run_outputs(args, inputs)
    if not args.dry_run:
        _check_table_folder(expanded, engine.facts)
    unknown = sorted(set(inject) - {s.id for s in expanded.steps})
    if unknown:
        raise PlanError(f"--inject-failure: no step {unknown[0]!r} in the plan")
    options = Options(backends=backends, on_error=args.on_error, jit_monitor=args.jit_monitor,
                      jit_log=args.jit_log, verify=args.verify, verify_seed=args.verify_seed,
                      verify_trace=args.verify_trace,
                      allow_missing=args.allow_missing, runner="none" if args.dry_run else args.runner,
                      device=device, retune=args.retune, flashinfer_cache=args.flashinfer_cache, inject=inject,
                      jobs=jobs, expect_cached=args.expect_cached)
    report = Report(expanded, {**options.public(), "argv": sys.argv[1:]})
    report.source = source
    reports.append(report)
    progress = Progress(enabled=not args.no_progress)
    execute(expanded, engine.facts, options, progress, report)
    sys.stdout.write(report.render_summary())
    sys.stdout.flush()
    return report.exit_code()


def _check_table_folder(expanded, engine: EngineFacts) -> None:
    """A plan that tunes the executor's kernels writes their tables at the end of its stage:
    a folder they cannot be written to is refused now (exit 2), not after the tuning."""
    if not any(step.kind == "autotune" and step.library != "flashinfer" for step in expanded.steps):
        return
    probe = table_path("probe", 1, 1, engine.device.name)  # a table's name: never written
    try:
        check_writable(probe)
    except PlanError as e:
        raise PlanError(f"the tuned tables (--kernel-config-dir, $WARMUP_KERNEL_CONFIG_DIR) cannot be written "
                        f"here: {e.message.removeprefix('cannot write: ')}", file=str(probe.parent)) from None


def _jobs(args) -> int:
    jobs = getattr(args, "jobs", None)
    if jobs is None:
        return default_jobs()
    if jobs < 0:
        raise PlanError(f"--jobs must be >= 0, got {jobs}")
    return jobs


def run_environment(args) -> dict:
    """What the run sets in the environment, for the run only (scoped_environ): the precompile
    workers take their settings from it, so these cannot be passed down as values alone.
    - WARMUP_KERNEL_CONFIG_DIR: where the planner and the kernels read tuned tables and autotune
      writes them: --kernel-config-dir, else the caller's $WARMUP_KERNEL_CONFIG_DIR, else the
      packaged plans/kernel-configs (planner.tables.kernel_configs.config_root: one default for planning and launching).
    - TRITON_INTERPRET=1 for a run off CUDA (not --dry-run): Triton must be imported in interpreter
      mode, so only where it is not imported yet and the caller set no mode of its own."""
    env = {}
    if args.kernel_config_dir:
        env[KERNEL_CONFIG_DIR] = os.path.abspath(args.kernel_config_dir)
    device = args.device or ("cpu" if args.dry_run else "cuda")
    if (not str(device).startswith("cuda") and not args.dry_run and "triton" not in sys.modules
            and "TRITON_INTERPRET" not in os.environ):
        env["TRITON_INTERPRET"] = "1"
    return env


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="warmup", description="Execute GPU kernel warmup plans (the executor's commands).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    add_commands(sub)
    from .bundle import add_commands as add_bundle_commands  # `python3 -m executor.cli bundle ...`

    add_bundle_commands(sub)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
