"""Execute an expanded plan: every step through its handler, in order, with statuses.

Each step ends `ok`, `failed` (any exception, with its text and the step id),
`unavailable` (its backend or the model runner is missing here) or `skipped`
(`--runner none`, or not reached after a failure with ``on_error="stop"``). A CUDA
OOM is a failure like any other: the step's scratch memory is freed and, with
``on_error="continue"``, the next step runs. After the last step the JIT monitor is
sealed and the optional hot-path check (executor.verify) runs, then the optional
serving trace on the same runner (``verify_trace``), and only then is the runner
closed. The steps of a stage of batch steps run inside the runner's
``warmup_scope()`` when it has one (KV connector off; on exit, also after a failure
or Ctrl-C, the connector is restored and the stage's unfinished requests are freed).
The report object is filled as the run goes, so the caller can write it whatever
happens.

With ``jobs > 1`` the distinct compile keys of the plan are first compiled in worker
processes (executor.precompile): the pool starts before anything here imports torch,
each step waits for the jobs of its own keys only, and the main process's launches are
then disk loads. Each record says what the workers compiled for the keys it reaches
first (``precompile``); the report's ``precompile`` section has the pool's totals.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field

from . import registry
from .backends.base import Skipped, Unavailable, is_oom
from .jit_monitor import Monitor
from planner.tables import TABLE_DEVICE_ENV

from .precompile import PRECOMPILE_BACKENDS, Precompiler
from .progress import Progress
from .report import Report, environment

INJECT_KINDS = ("error", "oom", "interrupt")
VERIFIED_FAMILIES = ("gemm", "grouped_gemm", "attention")  # what --verify calls again at random values
BATCH_METHODS = ("execute_model", "sample_tokens")  # a stage of these steps runs in runner.warmup_scope()


@dataclass
class Options:
    backends: dict = field(default_factory=dict)  # family (or "all") -> backend name
    on_error: str = "stop"                         # stop | continue
    jit_monitor: str = "warn"                      # off | warn | error
    jit_log: str | None = None                     # JSONL of post-seal compiles
    verify: int = 0                                # random hot-path calls after sealing
    verify_seed: int = 0                           # also the serving trace's seed
    verify_trace: int = 0                          # serving-trace steps on the runner after sealing
    trace_config: dict = field(default_factory=dict)  # other TraceConfig fields for verify_trace (bench)
    allow_missing: bool = False
    runner: str = "reference"                      # reference | none
    device: str = "cuda"
    retune: bool = False
    flashinfer_cache: str | None = None
    inject: dict = field(default_factory=dict)     # step id -> error | oom | interrupt (tests)
    keep_monitor: bool = False                     # leave the sealed monitor installed afterwards
    jobs: int = 0                                  # worker processes that precompile (0 or 1: none)
    precompile_backends: tuple = PRECOMPILE_BACKENDS  # backends whose variants workers compile

    def public(self) -> dict:
        return asdict(self)


class Context:
    """What handlers see: backends, the runner, progress ticks, the capture flag."""

    def __init__(self, options: Options, engine: dict | None, progress: Progress, monitor: Monitor,
                 runner=None):
        self.options = options
        self.engine = engine
        self.progress = progress
        self.monitor = monitor
        self.device = options.device
        self.capturing = False
        self.step_ticks = 0
        self._backends: dict = {}
        self._availability: dict = {}
        self._runner = runner              # a caller's runner is used, and closed by the caller
        self._owns_runner = runner is None
        self._runner_error: str | None = None
        # During a stage of batch steps: where runner.warmup_scope() is entered, at the stage's
        # first use of the runner (so the runner still starts inside a step), and exited with it.
        self.stage_scope: contextlib.ExitStack | None = None

    def tick(self, n: int) -> None:
        self.step_ticks += n
        self.progress.tick(n)

    # --- backends ------------------------------------------------------------------------------

    def backend_name(self, step) -> str:
        return backend_name(self.options, step)

    def backend(self, name: str):
        """The backend instance, or Unavailable with the reason (checked once per run)."""
        if name not in self._availability:
            try:
                cls = registry.load_backend(name)
            except KeyError:
                self._availability[name] = (False, f"no backend named {name!r} (known: {', '.join(registry.BACKENDS)})")
            except Exception as e:  # noqa: BLE001 - a backend module must never crash the run
                self._availability[name] = (False, f"backend module failed to import ({type(e).__name__}: {e})")
            else:
                instance = cls(self.device, self.options)
                try:
                    self._availability[name] = instance.available()
                except Exception as e:  # noqa: BLE001
                    self._availability[name] = (False, f"{type(e).__name__}: {e}")
                if self._availability[name][0]:
                    self._backends[name] = instance
        ok, why = self._availability[name]
        if not ok:
            raise Unavailable(f"backend {name}: {why}")
        return self._backends[name]

    def backend_for(self, step):
        """The backend that runs a family step, or Unavailable when it cannot (checked on its
        class first: a backend that does not implement the family is not even started)."""
        name = self.backend_name(step)
        try:
            families = registry.backend_families(name)
        except Exception:  # noqa: BLE001 - unknown or broken: self.backend says which
            families = None
        if families is not None and step.family not in families:
            raise Unavailable(f"backend {name} does not implement {step.family}")
        return self.backend(name)

    # --- the model runner ---------------------------------------------------------------------------

    def get_runner(self, required: bool = True):
        runner = self._get_runner(required)
        if runner is not None and self.stage_scope is not None:
            stack, self.stage_scope = self.stage_scope, None  # once per stage
            scope = getattr(runner, "warmup_scope", None)     # optional in the runner protocol
            if scope is not None:
                stack.enter_context(scope())
        return runner

    def _get_runner(self, required: bool):
        if self.options.runner == "none":
            if required:
                raise Skipped("--runner none: batch and CUDA-graph steps are not run")
            return None
        if self._runner is not None:
            return self._runner
        if self._runner_error is None:
            try:
                module = importlib.import_module("executor.runner.reference")
            except ModuleNotFoundError as e:
                if e.name not in ("executor.runner.reference", "executor.runner"):
                    raise
                self._runner_error = "no model runner (executor.runner.reference is not installed)"
            else:
                if self.engine is None:
                    self._runner_error = "no model runner: it needs the engine config"
                else:
                    try:
                        self._runner = module.ReferenceRunner(self.engine, device=self.device)
                    except Exception as e:
                        self._runner_error = f"the model runner failed to start ({type(e).__name__}: {e})"
                        raise
                    return self._runner
        if required:
            raise Unavailable(self._runner_error)
        return None

    def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None and self._owns_runner:
            runner.close()
        for backend in self._backends.values():
            try:
                backend.close()
            except Exception:  # noqa: BLE001 - closing must not hide the run's own result
                pass


def backend_name(options: Options, step) -> str:
    """The backend that runs a family step: --backend's choice for its family, else the plan's."""
    chosen = options.backends.get(step.family) or options.backends.get("all")
    return chosen or step.backend


def _first_line(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    for backend in ctx._backends.values():
        try:
            backend.release(step)
        except Exception:  # noqa: BLE001
            pass
    try:
        import sys
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - the device may be in a bad state: the next step will say so
        pass


def run_step(step, ctx: Context) -> dict:
    record = {"id": step.id, "stage": step.stage, "kind": step.kind, "status": "ok",
              "backend": None, "planned_backend": None, "kernel_calls": 0,
              "planned_calls": step.planned_calls(), "wall_s": 0.0, "error": None, "jit": None}
    if step.family is not None:
        record["planned_backend"] = step.backend
        record["backend"] = ctx.backend_name(step)
    else:
        record["backend"] = record["planned_backend"] = "runner"
    ctx.step_ticks = 0
    ctx.progress.step_start(step)
    ctx.monitor.begin_step(step.id)
    start = time.perf_counter()
    try:
        if step.id in ctx.options.inject:
            _inject(step, ctx.options.inject[step.id], ctx.device)
        out = registry.HANDLERS[type(step)](step, ctx)
        record["backend"] = out.get("backend", record["backend"])
        record["kernel_calls"] = out.get("kernel_calls", ctx.step_ticks)
        if out.get("details"):
            record["details"] = out["details"]
    except Unavailable as e:
        record.update(status="unavailable", error=_first_line(e))
    except Skipped as e:
        record.update(status="skipped", error=_first_line(e))
    except KeyboardInterrupt:
        record.update(status="failed", error="interrupted (Ctrl-C)", kernel_calls=ctx.step_ticks,
                      interrupted=True)
    except Exception as e:  # noqa: BLE001 - every failure becomes the step's status
        record.update(status="failed", error=_first_line(f"{type(e).__name__}: {e}"),
                      kernel_calls=ctx.step_ticks, traceback=traceback.format_exc(limit=8))
        if is_oom(e):
            record["oom"] = True
        _free_after_failure(ctx, step)
    finally:
        record["wall_s"] = round(time.perf_counter() - start, 4)
        counts = ctx.monitor.end_step()
        record["jit"] = counts.as_dict() if counts is not None else None
    return record


def stages_of(steps) -> list[tuple[str, list]]:
    """Consecutive steps of one stage (plans list stages in order)."""
    groups: list[tuple[str, list]] = []
    for step in steps:
        if groups and groups[-1][0] == step.stage:
            groups[-1][1].append(step)
        else:
            groups.append((step.stage, [step]))
    return groups


def execute(expanded, engine: dict | None = None, options: Options | None = None,
            progress: Progress | None = None, report: Report | None = None, runner=None,
            precompiler: Precompiler | None = None) -> Report:
    """Run every step of `expanded`; returns the report (also filled in place when given).

    `runner`: a model runner to use instead of starting one; it stays the caller's (not closed).
    `precompiler`: the pool ``start_precompile`` started earlier (a serving engine starts it
    before loading its weights and builds its runner meanwhile); execute finishes it."""
    options = options or Options()
    if options.verify_trace and options.runner == "none":
        from planner.errors import PlanError

        raise PlanError("--verify-trace runs a serving trace on the model runner: it cannot be used with "
                        "--runner none (or --dry-run)")
    progress = progress or Progress(enabled=False)
    report = report or Report(expanded, options.public())
    mode = options.jit_monitor
    if (options.verify or options.verify_trace) and mode == "off":
        mode = "warn"  # the hot-path check and the trace count compiles: they need the monitor
        flag = "--verify" if options.verify else "--verify-trace"
        report.options["jit_monitor_note"] = f"{flag} turned the JIT monitor on (warn)"
    monitor = Monitor(mode, options.jit_log)
    ctx = Context(options, engine, progress, monitor, runner)
    tables_before = use_engine_tables(engine)  # before any kernel (or worker) reads a tuned table
    if precompiler is not None:
        pre = precompiler
        pre.progress = pre.progress or progress
    else:
        pre = _start_precompile(expanded.steps, options, progress)  # first: before torch and triton
    monitor.install()
    index_of = {id(step): i for i, step in enumerate(expanded.steps)}
    kept: list[dict] = []
    stopped_by: str | None = None
    try:
        report.startup = start_up(ctx, expanded.steps)  # while the workers start up too
        for stage, steps in stages_of(expanded.steps):
            progress.stage_start(stage, len(steps), sum(s.planned_calls() for s in steps))
            stage_start = time.perf_counter()
            try:
                with contextlib.ExitStack() as scope:  # exited at the stage's end, also on failure or Ctrl-C
                    if all(getattr(s, "runner_method", None) in BATCH_METHODS for s in steps):
                        ctx.stage_scope = scope
                    for step in steps:
                        if stopped_by is not None:
                            report.add_step(_not_run(step, f"not run: step {stopped_by} failed (--on-error stop)"))
                            continue
                        waited = pre.wait_for(step)  # the workers' jobs of this step's keys
                        record = run_step(step, ctx)
                        pre.annotate(record, waited)
                        report.add_step(record)
                        progress.step_end(record)
                        pre.after_step(step, index_of[id(step)])
                        if record.get("interrupted"):
                            raise KeyboardInterrupt
                        if record["status"] == "failed" and options.on_error == "stop":
                            stopped_by = step.id
                            pre.cancel(f"not needed: step {stopped_by} failed (--on-error stop)")
                        if options.verify and record["status"] == "ok" and step.family in VERIFIED_FAMILIES:
                            kept.append(step)  # its scratch tensors stay for the hot-path check
                        else:
                            _release(ctx, step)
            finally:
                ctx.stage_scope = None
                report.stage_wall[stage] = report.stage_wall.get(stage, 0.0) + time.perf_counter() - stage_start
                progress.stage_end(report.stage_summary(stage))
        pre.close()  # the workers are gone (and their GPU memory) before the seal and the checks
        monitor.seal()
        if options.verify:
            from .verify import hot_path_check

            report.verify = hot_path_check(kept, report, ctx, options.verify, options.verify_seed)
        if options.verify_trace:
            from .verify import trace_check

            trace_check(report, ctx, options.verify_trace, options.verify_seed, options.trace_config)
    except KeyboardInterrupt:
        report.interrupted = True
        done = {r["id"] for r in report.steps}
        for step in expanded.steps:
            if step.id not in done:
                report.add_step(_not_run(step, "not run: interrupted (Ctrl-C)"))
    finally:
        _finish_precompile(pre, report)
        report.monitor = monitor.summary() if monitor.mode != "off" else {"mode": "off"}
        report.environment = environment(options.device)
        try:
            ctx.close()
        finally:
            if not options.keep_monitor:
                monitor.uninstall()
            restore_tables(tables_before)
        report.finished = time.time()
    return report


def use_engine_tables(engine: dict | None) -> str | None:
    """Make the kernels, here and in the precompile workers, read the tuned tables of the
    engine config's device: the tables the plan was made with (kernel_model.gemm_tables),
    also on a GPU of another name (an engine for H100 run on an H200). Returns the previous
    setting, for ``restore_tables`` when the run ends."""
    previous = os.environ.get(TABLE_DEVICE_ENV)
    if engine is not None:
        os.environ[TABLE_DEVICE_ENV] = engine["device"]["name"]
    return previous


def restore_tables(previous: str | None) -> None:
    if previous is None:
        os.environ.pop(TABLE_DEVICE_ENV, None)
    else:
        os.environ[TABLE_DEVICE_ENV] = previous


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
            out["backends"][name] = _first_line(e, 200)
    torch = sys.modules.get("torch")
    if torch is not None and str(ctx.device).startswith("cuda"):
        cuda_start = time.perf_counter()
        try:
            if torch.cuda.is_available():
                torch.empty(1, device=ctx.device)  # the CUDA context
                if "triton" in sys.modules:
                    from .precompile import prime_triton

                    prime_triton()  # Triton's driver, the hash of its sources, the backend's hash
                out["cuda_init_s"] = round(time.perf_counter() - cuda_start, 3)
        except Exception as e:  # noqa: BLE001 - the steps will report it
            out["cuda_error"] = _first_line(f"{type(e).__name__}: {e}", 200)
    out["wall_s"] = round(time.perf_counter() - start, 3)
    return out


def start_precompile(expanded, engine: dict | None, options: Options) -> Precompiler:
    """Start the precompile pool of a plan ahead of ``execute`` (pass it as `precompiler`), so
    that the workers compile while the caller imports torch and builds its model runner.
    Imports neither torch nor triton here. Points this process and the workers at the
    engine's tuned tables (WARMUP_TABLE_DEVICE), as execute does."""
    use_engine_tables(engine)
    return _start_precompile(expanded.steps, options, None)


def _start_precompile(steps, options: Options, progress: Progress | None) -> Precompiler:
    pre = Precompiler(steps, options, lambda step: backend_name(options, step), progress)
    try:
        pre.start()
    except Exception as e:  # noqa: BLE001 - precompiling is an optimisation: never the run's failure
        try:
            pre.cancel("failed to start")
        except Exception:  # noqa: BLE001
            pass
        pre.status, pre.reason = "off", f"precompile failed to start ({type(e).__name__}: {e})"
    return pre


def _finish_precompile(pre: Precompiler, report: Report) -> None:
    try:
        pre.close(interrupted=report.interrupted)
        pre.write_manifest(report.steps)
    except Exception as e:  # noqa: BLE001
        pre.reason = (pre.reason or "") + f" (closing failed: {type(e).__name__}: {e})"
    report.precompile = pre.summary()


def _release(ctx: Context, step) -> None:
    for backend in ctx._backends.values():
        try:
            backend.release(step)
        except Exception:  # noqa: BLE001
            pass


def _not_run(step, why: str) -> dict:
    return {"id": step.id, "stage": step.stage, "kind": step.kind, "status": "skipped",
            "backend": None, "planned_backend": None, "kernel_calls": 0, "planned_calls": step.planned_calls(),
            "wall_s": 0.0, "error": why, "jit": None}
