"""Execute an expanded plan: a flat loop over its steps, stage by stage, through their handlers.

Each step runs through the handler of its kind (executor.registry) and ends with a
``StepRecord`` (executor.records): `ok`, `failed` (any exception, with its text), `unavailable`
or `skipped`. A CUDA OOM is a failure like any other: the step's scratch memory is freed
and, with ``on_error="continue"``, the next step runs. What the rest of the run does around
the steps, the loop leaves to its hooks (executor.hooks): the precompile pool waits for and
accounts the jobs of each step, the report records each step and times each stage, the
progress display shows them. The steps of a stage of batch steps run inside the runner's
``warmup_scope()`` when it has one (KV connector off; on exit, also after a failure or
Ctrl-C, the connector is restored and the stage's unfinished requests are freed).

After the last step the precompile pool is closed, the JIT monitor sealed, and the optional
hot-path check (executor.verify) and serving trace (``verify_trace``) run on the same
runner, which is closed only then. The report is filled as the run goes, so the caller can
write it whatever happens.

With ``jobs > 1`` the distinct compile keys of the plan are first compiled in worker
processes (executor.precompile): the pool starts before anything here imports torch, and
the main process's launches are then disk loads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
import traceback

from planner.engine.facts import EngineFacts
from planner.errors import PlanError, one_line

from . import registry
from .backends.base import Skipped, Unavailable, is_oom
from .caches import deep_gemm_install
from .caches.roots import Env
from .context import Context, Options, backend_name
from .environ import scoped_environ
from .hooks import ProgressHook, ReportHook
from .jit_monitor import Monitor
from .precompile import Precompiler, prime_triton
from .progress import Progress
from .records import StepRecord
from .report import Report, environment

__all__ = ["Context", "Options", "execute", "run_step", "start_precompile"]

INJECT_KINDS = ("error", "oom", "interrupt")
STEP_ERROR_CHARS = 500  # a step's error in the report: its first line, this long at most
VERIFIED_FAMILIES = ("gemm", "grouped_gemm", "attention")  # what --verify calls again at random values
BATCH_METHODS = ("execute_model", "sample_tokens")  # a stage of these steps runs in runner.warmup_scope()


# --- one run -------------------------------------------------------------------------------------------

def execute(expanded, engine: EngineFacts | None = None, options: Options | None = None,
            progress: Progress | None = None, report: Report | None = None, runner=None,
            precompiler: Precompiler | None = None, monitor: Monitor | None = None) -> Report:
    """Run every step of `expanded`; returns the report (also filled in place when given).

    `engine`: the planner's record of the engine config (planner.engine.config.Engine.facts), as built
    once by the planner; none where the plan is run without one (no model runner, no tables).

    `runner`: a model runner to use instead of starting one; it stays the caller's (not closed).
    `precompiler`: the pool ``start_precompile`` started earlier (a serving engine starts it
    before loading its weights and builds its runner meanwhile); execute finishes it.
    `monitor`: a JIT monitor the caller installed and keeps (a serving engine's, which spans
    more than the plan): the steps are counted on it, and execute neither seals nor removes it."""
    # DeepGEMM reads DG_JIT_CACHE_DIR from the environment itself, in this process and in the
    # workers: vLLM's DeepGEMM cache when unset, set for this run only.
    with scoped_environ(deep_gemm_install.environment()):
        return _execute(expanded, engine, options, progress, report, runner, precompiler, monitor, run_env())


def run_env() -> Env:
    """The run's environment, resolved once (the cache roots the run's monitor, pool and claims
    read: executor/caches/roots.py), a copy: what the run's own steps set later is not a root."""
    return Env.of(dict(os.environ))


def _execute(expanded, engine, options, progress, report, runner, precompiler, monitor, env: Env) -> Report:
    options = with_engine_tables(options or Options(), engine)
    if options.verify_trace and options.runner == "none":
        raise PlanError("--verify-trace runs a serving trace on the model runner: it cannot be used with "
                        "--runner none (or --dry-run)")
    progress = progress or Progress(enabled=False)
    report = report or Report(expanded, options.public())
    owned = monitor is None
    monitor = monitor or Monitor(_monitor_mode(options, report), options.jit_log, env=env)
    ctx = Context(options, engine, progress, monitor, runner)
    pre = precompiler or _start_precompile(expanded.steps, options, progress, monitor, env=env)  # before torch and triton
    pre.attach(monitor, progress)  # a pool started ahead of the run (start_precompile) without them
    monitor.install()
    try:
        report.startup = start_up(ctx, expanded.steps)  # while the workers start up too
        if options.expect_cached and owned:
            monitor.seal(loads_ok=True)  # every kernel must come from the disk caches
        hooks = [pre.hook(), ReportHook(report), ProgressHook(progress, report)]
        kept = run_steps(expanded.steps, ctx, hooks)
        pre.close()  # the workers are gone (and their GPU memory) before the seal and the checks
        if owned:
            monitor.seal()
            _after_seal(report, ctx, kept)
    except KeyboardInterrupt:
        _interrupted(report, expanded.steps)
    finally:
        _finish(report, ctx, pre, owned)
    return report


def _monitor_mode(options: Options, report: Report) -> str:
    """The JIT monitor's mode: --verify and --verify-trace count compiles, so they turn it on."""
    if (options.verify or options.verify_trace) and options.jit_monitor == "off":
        flag = "--verify" if options.verify else "--verify-trace"
        report.options["jit_monitor_note"] = f"{flag} turned the JIT monitor on (warn)"
        return "warn"
    return options.jit_monitor


def _after_seal(report: Report, ctx: Context, kept: list) -> None:
    if not (ctx.options.verify or ctx.options.verify_trace):
        return  # executor.verify needs numpy, which a plain install (a dry run, say) does not have
    # Imported here, not at the top: executor.verify imports the serving trace and numpy
    # (bench/RESULTS.md, part A3), which would delay the precompile pool of every run.
    from .verify import hot_path_check, trace_check

    if ctx.options.verify:
        report.verify = hot_path_check(kept, report, ctx, ctx.options.verify, ctx.options.verify_seed)
    if ctx.options.verify_trace:
        trace_check(report, ctx, ctx.options.verify_trace, ctx.options.verify_seed, ctx.options.trace_config)


def _interrupted(report: Report, steps) -> None:
    """Ctrl-C: the steps not reached are recorded as not run."""
    report.interrupted = True
    done = {r.id for r in report.steps}
    for step in steps:
        if step.id not in done:
            report.add_step(StepRecord.not_run(step, "not run: interrupted (Ctrl-C)"))


def _finish(report: Report, ctx: Context, pre: Precompiler, owned: bool = True) -> None:
    report.precompile = pre.end_run(report.steps, interrupted=report.interrupted)
    monitor = ctx.monitor
    report.monitor = monitor.summary() if monitor.mode != "off" else {"mode": "off"}
    report.environment = environment(ctx.options.device)
    try:
        ctx.close()
    finally:
        if owned and not ctx.options.keep_monitor:
            monitor.uninstall()
    report.finished = time.time()


# --- the loop --------------------------------------------------------------------------------------------

def run_steps(steps, ctx: Context, hooks: list) -> list:
    """Every step, stage by stage, in plan order; returns the steps whose scratch tensors stay for
    the hot-path check (--verify)."""
    kept: list = []
    stopped_by: list = []  # the step whose failure stopped the run (--on-error stop)
    for stage, group in stages_of(steps):
        for hook in hooks:
            hook.stage_start(stage, group)
        try:
            with _batch_scope(ctx, group):
                for step in group:
                    _run_one(step, ctx, hooks, kept, stopped_by)
        finally:
            ctx.stage_scope = None
            for hook in hooks:
                hook.stage_end(stage)
    return kept


def _run_one(step, ctx: Context, hooks: list, kept: list, stopped_by: list) -> None:
    if stopped_by:
        record = StepRecord.not_run(step, f"not run: step {stopped_by[0]} failed (--on-error stop)")
        for hook in hooks:
            hook.after_step(step, record)
        return
    for hook in hooks:
        hook.before_step(step)
    record = run_step(step, ctx)
    for hook in hooks:
        hook.after_step(step, record)
    if record.interrupted:
        raise KeyboardInterrupt
    if record.status == "failed" and ctx.options.on_error == "stop":
        stopped_by.append(step.id)
    if ctx.options.verify and record.status == "ok" and step.family in VERIFIED_FAMILIES:
        kept.append(step)  # its scratch tensors stay for the hot-path check
    else:
        ctx.release(step)


@contextlib.contextmanager
def _batch_scope(ctx: Context, steps: list):
    """A stage of batch steps runs in the runner's warmup_scope(), entered at the stage's first use
    of the runner (so the runner still starts inside a step) and exited with the stage."""
    with contextlib.ExitStack() as scope:
        if all(getattr(s, "runner_method", None) in BATCH_METHODS for s in steps):
            ctx.stage_scope = scope
        yield


def stages_of(steps) -> list[tuple[str, list]]:
    """Consecutive steps of one stage (plans list stages in order)."""
    groups: list[tuple[str, list]] = []
    for step in steps:
        if groups and groups[-1][0] == step.stage:
            groups[-1][1].append(step)
        else:
            groups.append((step.stage, [step]))
    return groups


# --- one step ---------------------------------------------------------------------------------------------

def run_step(step, ctx: Context) -> StepRecord:
    record = StepRecord.for_step(step, backend="runner", planned_backend="runner")
    if step.family is not None:
        record.planned_backend, record.backend = step.backend, ctx.backend_name(step)
    ctx.step_ticks = 0
    ctx.monitor.begin_step(step.id)
    start = time.perf_counter()
    try:
        if step.id in ctx.options.inject:
            _inject(step, ctx.options.inject[step.id], ctx.device)
        out = registry.HANDLERS[type(step)](step, ctx)
        record.backend = out.get("backend", record.backend)
        record.kernel_calls = out.get("kernel_calls", ctx.step_ticks)
        record.details = out.get("details") or None
    except Unavailable as e:
        record.status, record.error = "unavailable", one_line(e, STEP_ERROR_CHARS)
    except Skipped as e:
        record.status, record.error = "skipped", one_line(e, STEP_ERROR_CHARS)
    except KeyboardInterrupt:
        record.status, record.error, record.interrupted = "failed", "interrupted (Ctrl-C)", True
        record.kernel_calls = ctx.step_ticks
    except Exception as e:  # noqa: BLE001 - every failure becomes the step's status
        record.status, record.error = "failed", one_line(f"{type(e).__name__}: {e}", STEP_ERROR_CHARS)
        record.kernel_calls, record.traceback, record.oom = ctx.step_ticks, traceback.format_exc(limit=8), is_oom(e)
        _free_after_failure(ctx, step)
    finally:
        record.wall_s = round(time.perf_counter() - start, 4)
        counts = ctx.monitor.end_step()
        record.jit = counts.as_dict() if counts is not None else None
    return record


def _inject(step, kind: str, device: str) -> None:
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "oom":
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and str(device).startswith("cuda") and torch.cuda.is_available():
            torch.empty(1 << 50, dtype=torch.uint8, device=device)  # 1 PiB: a real CUDA OOM
        raise MemoryError(f"injected out-of-memory in step {step.id}")
    raise RuntimeError(f"injected failure in step {step.id}")


def _free_after_failure(ctx: Context, step) -> None:
    ctx.release(step)
    try:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - the device may be in a bad state: the next step will say so
        pass


# --- start-up, tables, precompile ---------------------------------------------------------------------------

def with_engine_tables(options: Options, engine: EngineFacts | None) -> Options:
    """The options with the engine config's device as the one whose tuned tables the kernels read,
    here and in the precompile workers (their backends get the options): the tables the plan was
    made with (kernel_model.gemm_tables), also on a GPU of another name (an engine for H100 run on
    an H200). An argument, not the environment: nothing outlives the run."""
    if engine is None or options.table_device:
        return options
    return dataclasses.replace(options, table_device=engine.device.name)


def start_up(ctx: Context, steps) -> dict:
    """The main process's own start-up, before the first stage: load every backend the plan uses
    (imports torch, triton, the kernels; availability is checked once and cached, so a missing
    backend still makes its steps `unavailable`), create the CUDA context and pay Triton's fixed
    per-process costs (executor.precompile.prime_triton).
    Stage walls then measure warmup work, and with --jobs this overlaps the workers' start-up
    instead of following their compiles."""
    start = time.perf_counter()
    names = list(dict.fromkeys(ctx.backend_name(step) for step in steps if step.family is not None))
    out: dict = {"backends": {}}
    for name in names:
        try:
            ctx.backend(name)
            out["backends"][name] = "ok"
        except Unavailable as e:
            out["backends"][name] = one_line(e, 200)
    torch = sys.modules.get("torch")
    if torch is not None and str(ctx.device).startswith("cuda"):
        cuda_start = time.perf_counter()
        try:
            if torch.cuda.is_available():
                torch.empty(1, device=ctx.device)  # the CUDA context
                if "triton" in sys.modules:
                    prime_triton()  # Triton's driver, the hash of its sources, the backend's hash
                out["cuda_init_s"] = round(time.perf_counter() - cuda_start, 3)
        except Exception as e:  # noqa: BLE001 - the steps will report it
            out["cuda_error"] = one_line(f"{type(e).__name__}: {e}", 200)
    out["wall_s"] = round(time.perf_counter() - start, 3)
    return out


def start_precompile(expanded, engine: EngineFacts | None, options: Options,
                     monitor: Monitor | None = None, note=None) -> Precompiler:
    """Start the precompile pool of a plan ahead of ``execute`` (pass it as `precompiler`), so
    that the workers compile while the caller imports torch and builds its model runner.
    Imports neither torch nor triton here. Points this process and the workers at the
    engine's tuned tables (Options.table_device), as execute does. `monitor`: the JIT monitor
    the caller will pass to execute (the pool's DeepGEMM kernels are not its compiles); without
    it, execute gives the pool its own. `note`: where the line of a key taken over from another
    process goes (without it: the logger warmup_planner.precompile). DeepGEMM's root reaches the
    workers through their environment (precompile/workers/setup.py), not this process's."""
    return _start_precompile(expanded.steps, with_engine_tables(options, engine), None, monitor, note)


def _start_precompile(steps, options: Options, progress: Progress | None,
                      monitor: Monitor | None, note=None, env: Env | None = None) -> Precompiler:
    """The pool started (a start that fails leaves it off, with why: never the run's failure);
    `env`: the run's resolved environment (none ahead of a run: the pool reads this process's)."""
    return Precompiler(steps, options, lambda step: backend_name(options, step), progress, monitor, note,
                       env).start()
