"""What a run is given and what its handlers see: the options, the backends and the model runner.

``Options`` are `warmup execute`'s choices; ``Context`` is what every step handler gets:
the backends (each loaded once, its availability checked once, so a missing optional
library makes its steps `unavailable` rather than failing the run), the model runner
(started at the first step that needs it, or the caller's), progress ticks and the
CUDA-graph capture flag.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import asdict, dataclass, field

from planner.engine.facts import EngineFacts

from . import registry
from .backends.base import Skipped, Unavailable
from .jit_monitor import Monitor
from .precompile import PRECOMPILE_BACKENDS
from .progress import Progress


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
    expect_cached: bool = False                    # sealed before the first step: a compile is a miss
    precompile_backends: tuple = PRECOMPILE_BACKENDS  # backends whose variants workers compile
    backend_settings: dict = field(default_factory=dict)  # backend name -> its settings (constructor)
    worker_env: dict = field(default_factory=dict)  # environment the precompile workers get on top of ours
    table_device: str | None = None                # whose tuned tables the kernels read (the engine's device)

    def public(self) -> dict:
        return asdict(self)


class Context:
    """What handlers see: backends, the runner, progress ticks, the capture flag."""

    def __init__(self, options: Options, engine: EngineFacts | None, progress: Progress, monitor: Monitor,
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
                self._availability[name] = (False, f"no backend named {name!r} (known: {', '.join(registry.known_backends())})")
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

    def release(self, step) -> None:
        """Every backend frees the step's scratch tensors (best effort)."""
        for backend in self._backends.values():
            try:
                backend.release(step)
            except Exception:  # noqa: BLE001
                pass

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
