"""The pool's long poles started from vLLM's first process, before vLLM's engine process exists.

vLLM's first process (the API server of `vllm serve`, or the process of an offline LLM) spends
tens of seconds on imports, resolving the model and starting the engine process before the
worker's load_model, where the pool starts (on the H100, 57 s of a 209 s plugin start with
FlashInfer, bench/RESULTS.md part X). FlashInfer's JIT modules are the pool's long poles (110 s of
nvcc each) and need no GPU. So the plugin wraps ``EngineArgs.create_engine_config`` in the process
that registers it: when vLLM makes its config, the model is named, and a thread plans from the
model's config.json (planner.engine.hf, the GPU's name from NVML: no CUDA in a process vLLM later forks),
expands WARMUP_PLAN for that engine, and starts the pool's build-ahead process for the plan's
FlashInfer modules. The engine's own plan, from the live VllmConfig, stays the authority: the pool's
jobs for those modules, and vLLM's own first calls, wait on FlashInfer's lock and find them built;
a module that plan does not need was built for nothing (CPU time, beside vLLM's own start). A model
whose config.json is not on disk yet, or a plan that cannot be made from it, starts nothing (one line).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import threading
import time

from kernel_model.device import capability_text, sm_capability
from planner.errors import PlanError, one_line

from . import model_inspection, patches, timeline
from .bundles import source as bundle_source
from .warmup.flashinfer_waits import prebuilt_cache_installed

log = logging.getLogger("vllm.warmup_planner")

PATCHED = "_warmup_planner_ahead"   # on EngineArgs: vLLM's create_engine_config
FLASHINFER_JIT = "flashinfer_jit"
_started = threading.Event()         # one start per process


def watch_engine_args(settings) -> bool:
    """Wrap vLLM's EngineArgs.create_engine_config (once; where FlashInfer is installed); True if wrapped."""
    if importlib.util.find_spec("flashinfer") is None:
        return False
    try:
        from vllm.engine.arg_utils import EngineArgs
    except Exception:  # noqa: BLE001 - another vLLM layout: the pool alone builds them
        return False

    def starting_ahead(original):
        def create_engine_config(self, *args, **kwargs):
            try:
                start(self, settings)
            except Exception as e:  # noqa: BLE001 - an optimisation: vLLM makes its config either way
                log.info("warmup-planner: FlashInfer's modules are not built ahead (%s: %s)", type(e).__name__,
                         one_line(e))
            return original(self, *args, **kwargs)
        return create_engine_config

    patches.wrap_once(EngineArgs, "create_engine_config", PATCHED, starting_ahead)
    return True


def start(engine_args, settings, launch=None) -> threading.Thread | None:
    """Plan and start the builds from a thread (vLLM goes on at once); once per process."""
    if _started.is_set():
        return None
    _started.set()
    request = Request.of(engine_args)
    def timed() -> None:  # beside vLLM's start, in the API server's timeline
        with timeline.span("plugin: plan ahead (FlashInfer's modules)", timeline.PLUGIN, background=True):
            with model_inspection.IMPORTING:  # its imports: a fork of the server for vLLM's inspection waits
                _plan_and_build(request, settings, launch or build_ahead)

    thread = threading.Thread(target=timed, name="warmup-build-ahead", daemon=True)
    thread.start()
    return thread


class Request:
    """What the plan ahead reads of vLLM's EngineArgs: the model, its revision, TP, max_model_len."""

    def __init__(self, model: str, revision=None, tp: int = 1, max_model_len=None):
        self.model, self.revision, self.tp, self.max_model_len = model, revision, tp, max_model_len

    @classmethod
    def of(cls, engine_args) -> "Request":
        return cls(str(getattr(engine_args, "model", "")), getattr(engine_args, "revision", None),
                   int(getattr(engine_args, "tensor_parallel_size", 1) or 1),
                   getattr(engine_args, "max_model_len", None))


def _plan_and_build(request: Request, settings, launch) -> None:
    try:
        modules, arch = modules_ahead(request, settings)
    except (PlanError, ValueError, OSError) as e:
        log.info("warmup-planner: FlashInfer's modules are not built ahead (%s); the pool builds them", one_line(e))
        return
    except Exception as e:  # noqa: BLE001 - an optimisation: the pool builds them
        log.info("warmup-planner: FlashInfer's modules are not built ahead (%s: %s)", type(e).__name__, one_line(e))
        return
    # the bundle's local file: WARMUP_BUNDLE may be a directory or an oci:// reference, fetched by now
    # (register waited for it before vLLM resolved the model)
    held = bundled_modules(bundle_source.for_process(settings.bundle, settings.pull_timeout_s).local_path())
    if held & {m.name for m in modules}:  # placed where FlashInfer loads them once the worker installs the bundle
        log.info("warmup-planner: FlashInfer's modules %s are not built ahead: WARMUP_BUNDLE holds them",
                 ", ".join(sorted(held & {m.name for m in modules})))
        modules = [m for m in modules if m.name not in held]
    if not modules:
        return
    pid = launch([m.generator for m in modules], arch, settings.timeout_s)
    log.info("warmup-planner: building FlashInfer's modules %s ahead of vLLM's engine, in process %s "
             "(plan %s for the model's config.json)%s", ", ".join(m.name for m in modules), pid, settings.plan,
             "" if prebuilt_cache_installed() else "; FlashInfer's prebuilt JIT cache (flashinfer-jit-cache) "
             "is not installed: with it, they would not be built at all")


def bundled_modules(path: str | None) -> set:
    """The FlashInfer modules a start-up bundle holds (its manifest only: the tar's first member)."""
    if not path:
        return set()
    from executor.bundle import read_manifest

    try:
        manifest = read_manifest(path)
    except Exception:  # noqa: BLE001 - the install says why in one line, at load_model
        return set()
    return {f.path.split("/")[1] for f in manifest.files if f.path.startswith("flashinfer_jit/")}


def modules_ahead(request: Request, settings) -> tuple[list, str]:
    """The FlashInfer modules WARMUP_PLAN builds for the model's config.json on this machine's GPU,
    and the GPU's architecture as FlashInfer reads it ('9.0'). ValueError: nothing to plan from."""
    from executor.precompile import gpu_capability, gpu_name
    from planner.engine import hf
    from planner.engine.config import engine_from_document
    from planner.yamlio import Document

    from .engine.from_vllm import gpu_of_device_name, installed_release
    from .warmup.worker_plan import config_path, make_plan

    path = config_path(request.model, request.revision)
    capability, name = gpu_capability(), gpu_name()
    if path is None or capability is None or name is None:
        raise ValueError("no config.json on disk yet" if path is None else "NVML does not name one GPU model")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    data = hf.engine_from_hf(config, hf.EngineRequest(
        tp=request.tp, max_model_len=request.max_model_len, sampler=sampler_ahead(), ignore_memory=True,
        vllm_release=installed_release(), gpu=gpu_of_device_name(name), source=path))
    expanded = make_plan(settings, engine_from_document(Document(data=data, file=f"<{path}, ahead>")))
    modules = [m for step in expanded.steps if getattr(step, "backend", None) == FLASHINFER_JIT
               for m in step.call_values()]
    return modules, capability_text(sm_capability(capability))


def sampler_ahead() -> str:
    """vLLM's top-k/top-p sampler as far as this process can tell without CUDA: FlashInfer's,
    unless VLLM_USE_FLASHINFER_SAMPLER=0 (the engine's plan decides for real, in the worker)."""
    return "triton" if os.environ.get("VLLM_USE_FLASHINFER_SAMPLER", "").strip() == "0" else "flashinfer"


BUILT_AHEAD = "FlashInfer's modules built ahead (their process)"  # the API server's timeline: a cold start's long pole


def build_ahead(generators: list[str], arch: str, timeout_s: float) -> int:
    """Start the pool's build-ahead process (a fresh interpreter, not a fork of vLLM's process),
    ending with this one; its lines go to this process's stderr, vLLM's log. Returns its pid. Its
    life is one span of this process's timeline, marked when it ends (a thread waits for it)."""
    from executor.precompile import build_ahead_command

    started = time.time()
    proc = subprocess.Popen(build_ahead_command(generators, arch, timeout_s), stdin=subprocess.DEVNULL,
                            close_fds=True)
    threading.Thread(target=_mark_when_built, args=(proc, started, generators), name="warmup-built-ahead",
                     daemon=True).start()
    return proc.pid


def _mark_when_built(proc: subprocess.Popen, started: float, generators: list[str]) -> None:
    """The build-ahead process's span, beside vLLM, once it has ended (whatever its exit)."""
    returncode = proc.wait()
    timeline.mark(BUILT_AHEAD, started, time.time(), timeline.PLUGIN, background=True, pid=proc.pid,
                  returncode=returncode, modules=[g.rsplit(":", 1)[-1] for g in generators])
