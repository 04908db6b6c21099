"""The vLLM plugin (entry point group ``vllm.general_plugins``): vLLM warms up from a plan.

vLLM calls ``register`` in every process, before a worker class is resolved
(vllm/plugins/__init__.py, load_general_plugins). Without WARMUP_PLAN, WARMUP_BUNDLE and
WARMUP_BUNDLE_OUT, and with no install under vLLM's cache root awaiting this machine's check
(`warmup bundle install --target bundle`), it does nothing. With one of them, the installed vLLM must be a release in
vllm_bridge.releases, a start-up bundle's model info is placed (WARMUP_BUNDLE: vLLM reads it next,
while it resolves the model), and that release's GPU Worker is patched:

- ``EngineArgs.create_engine_config`` (in vLLM's first process): FlashInfer's modules the plan would
  build are started then, from the model's config.json, in a process of their own (vllm_bridge.ahead);
- ``load_model``: the plan is made (engine from the live VllmConfig, a stale saved plan refused),
  a start-up bundle installed (WARMUP_BUNDLE, vllm_bridge.bundles.startup) and the cache directories
  recorded for one to be built (WARMUP_BUNDLE_OUT), and the plan's precompile pool started before
  vLLM loads the weights; once they are loaded, the kernel each block-FP8 linear was built with is
  checked against the engine config's (one warning line);
- ``determine_available_memory``: vLLM's profile run (torch.compile, then one forward pass) runs
  beside the pool; once it returns, and before vLLM measures the GPU's memory, the pool's device
  lane (workers that hold a CUDA context: DeepGEMM) is finished and gone (bounded; a failed lane
  falls back to vLLM's own warmup). The compile lane (CUDA-free: FlashInfer's nvcc builds, Triton)
  goes on, bounded by WARMUP_PRECOMPILE_TIMEOUT;
- ``compile_or_warm_up_model``: vLLM's own method with the plan in place of what the plan models
  (vllm_bridge.warmup.worker); then, vLLM ready, the start-up's caches listed, and packed into
  WARMUP_BUNDLE_OUT by a thread of their own while vLLM reports ready (vllm_bridge.bundles.startup).

Patching twice is a no-op: the originals are kept on the class.

The plugin never stops vLLM (vllm_bridge.step_aside): a setting or a vLLM release it cannot use (at
register), an engine or a plan it cannot make, a report it cannot write (at load_model), a pool that
fails: one warning line naming the cause, and vLLM's methods run as they would without WARMUP_PLAN
(a bundle the user asked for still goes its own way). WARMUP_STRICT=1 makes the failure fatal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.util
import os
import sys
import time

from . import ahead, compile_load, engine_core_start, fixes, flashinfer_flags, mega_aot, model_inspection, timeline
from .bundles import source as bundle_source, startup as bundle
from .releases import RELEASES, Release, UnsupportedVllm, release_for
from .settings import Settings, rank_of, strict_setting
from .step_aside import StepAside, Verdict, agree, cause_of, step_aside
from .warmup.executor_options import pin_triton_cache
from .warmup.swaps import swapped, then_finish_device_lane
from .warmup.worker import WorkerWarmup

PATCHED = "_warmup_planner_originals"  # on the Worker class: {method name: vLLM's function}
STATE = "_warmup_planner"               # on a worker: its WorkerWarmup, or its StepAside


def register() -> None:
    settings = _settings(os.environ)
    if settings is None:
        return
    if timeline.begin(settings) is None:  # no timeline asked for: nothing timed
        _register(settings)
        return
    with timeline.span("plugin: register", timeline.PLUGIN):
        _register(settings)
    timeline.watch_engine_args()  # after ahead's wrapper: vLLM's config and the plan ahead's start, timed


def _register(settings: Settings) -> None:
    if not settings.active:
        return
    import vllm

    if vllm.__version__ not in RELEASES and not settings.asked:
        # on only for an install's machine check (`warmup bundle install --target bundle`): the user
        # asked for nothing, so another vLLM is one line, and vLLM starts as it would
        bundle.log.warning("warmup-planner: an install awaits this machine's check, which needs vLLM %s; vLLM %s "
                           "is installed: not checked", ", ".join(RELEASES), vllm.__version__)
        return
    release = _release(vllm.__version__, settings)
    if release is None:
        return
    patch_worker(release, settings)
    fixes.apply_fixes(release.missing_fixes, after_import, settings.fixes_off)  # where the model runner is imported
    engine_core_start.choose_start(settings.engine_core_fork)  # before vLLM makes its config and starts its engine core
    if settings.flashinfer_split_compile:
        flashinfer_flags.choose_flags()  # before any process of this server builds a FlashInfer module
    if settings.torch_mega_aot:
        # before vLLM makes its config and its engine core computes the compile cache's key
        mega_aot.choose(bundle_named=bool(settings.bundle or settings.bundle_out))
    if settings.model_inspection_fork:
        model_inspection.watch(after_import)  # before vLLM resolves the model's class
    with _timed(bool(settings.bundle), "plugin: bundle pin"):
        source = bundle_source.for_process(settings.bundle, settings.pull_timeout_s,  # an oci:// pull starts here
                                           plain_http=settings.registry_plain_http)
    with _timed(bool(settings.bundle), "plugin: bundle install (model info)"):
        bundle.install_early(source.wait_early(), stage=source.thread is None)  # vLLM resolves the model next
    if settings.plan:
        ahead.watch_engine_args(settings)  # the pool's long poles start once vLLM names the model


def _settings(environ) -> Settings | None:
    """The user's settings; one the plugin cannot use (PluginError), or a cache root it cannot list,
    makes it step aside (None). WARMUP_STRICT itself must be readable: whether the user asked for a
    failure to be fatal cannot be guessed, so a value of it that is neither 1 nor 0 is fatal."""
    try:
        return Settings.from_env(environ)
    except Exception as e:  # noqa: BLE001 - any failure of ours: vLLM starts without the plugin
        step_aside(cause_of(e), strict_setting(environ))
        return None


def _release(version: str, settings: Settings) -> Release | None:
    """The installed vLLM's row of the release table; another vLLM: the plugin steps aside (None),
    in every process alike (the first says it), since a method it would patch may be renamed."""
    try:
        return release_for(version)
    except UnsupportedVllm as e:
        step_aside(cause_of(e), settings.strict)
        return None


def patched_methods(release: Release) -> dict:
    """The Worker methods the plugin wraps, by name, with the function that wraps each."""
    return {release.load_method: _load_model, release.memory_method: _determine_available_memory,
            release.warmup_method: _compile_or_warm_up_model}


def patch_worker(release: Release, settings: Settings) -> None:
    """Patch the release's Worker class once its module is imported: now where it is, else when
    the process imports it. vLLM's API server never does (its worker runs in the engine core's
    process), and importing it there only to patch it cost the API server ~2-3 s of imports before
    it resolved the model (bench/RESULTS.md part Y)."""
    if release.worker_module in sys.modules:
        _patch_or_step_aside(release, settings)
    else:
        after_import(release.worker_module, lambda module: _patch_or_step_aside(release, settings))


def _patch_or_step_aside(release: Release, settings: Settings) -> None:
    """Patch the Worker class; a class without a method the release table names (the import of
    vLLM's worker would fail with it): the plugin steps aside, the class as it is."""
    try:
        _patch_worker_class(release, settings)
    except Exception as e:  # noqa: BLE001 - any failure of ours: vLLM starts without the plugin
        step_aside(cause_of(e), settings.strict)


def _patch_worker_class(release: Release, settings: Settings):
    """Patch the release's Worker class (once); returns it."""
    cls = getattr(importlib.import_module(release.worker_module), release.worker_class)
    if PATCHED in vars(cls):
        return cls
    wrappers = patched_methods(release)
    setattr(cls, PATCHED, {name: getattr(cls, name) for name in wrappers})
    for name, wrap in wrappers.items():
        setattr(cls, name, wrap(vars(cls)[PATCHED][name], release, settings))
    return cls


class _ThenCall(importlib.abc.Loader):
    """A module's own loader, then `callback(module)` once the module has run; every other
    attribute is the loader's (linecache and inspect ask it for the source)."""

    def __init__(self, loader, callback):
        self._loader, self._callback = loader, callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for one module name it asks the other finders, once, and wraps the
    loader they return (a post-import hook)."""

    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once, and the lookup below must not find this finder again
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenCall(spec.loader, self.callback)
        return spec


def after_import(name: str, callback) -> None:
    """`callback(module)` right after the module `name` is first imported in this process."""
    if not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))


def unpatch_worker(release: Release) -> None:
    """Restore the release's Worker class (tests; a process that turns the plugin off)."""
    cls = getattr(importlib.import_module(release.worker_module), release.worker_class)
    originals = vars(cls).get(PATCHED)
    if originals is not None:
        for name, original in originals.items():
            setattr(cls, name, original)
        delattr(cls, PATCHED)


def _load_model(original, release: Release, settings: Settings):
    @functools.wraps(original)
    def load_model(self, *args, **kwargs):
        with _method_span(self, "Worker.load_model"):
            return _load_model_body(self, original, settings, release, args, kwargs)
    return load_model


def _load_model_body(self, original, settings: Settings, release: Release, args, kwargs):
    pin_triton_cache()  # before the model exists: the same Triton directory cold or warm, bundle or not
    if settings.compile_load_beside_weights:
        compile_load.installed()  # before vLLM's loader makes the model
    with _timed(bool(settings.plan), "plugin: engine and plan"):
        state = _prepared(self, release, settings)  # before the weights: a failure steps aside at once
    _bundle_before_compile(self, settings)  # before the pool: it then finds the bundle's kernels
    if runs_plan(state):
        with timeline.span("plugin: monitor and pool start", timeline.PLUGIN):
            state = _started(self, state, settings)
    if not runs_plan(state):  # no plan, or stepped aside: a bundle only, vLLM's method as it is
        return original(self, *args, **kwargs)
    try:
        with state.phases.phase("load_model"):
            result = original(self, *args, **kwargs)
    except BaseException:
        state.abandon("not needed: vLLM's load_model failed")
        raise
    with timeline.span("plugin: live layers checked", timeline.PLUGIN):
        state.check_live_kernels()
    return result


@contextlib.contextmanager
def _method_span(worker, name: str):
    """One of vLLM's Worker methods as a mark of the timeline (vLLM's: the plugin's own marks nested
    in it are its share), and the worker's rank on this process's timeline."""
    timeline.set_rank(rank_of(worker))
    with timeline.span(name):
        yield


def _timed(when: bool, phase: str):
    """The plugin's own step as a mark of the timeline, where it does something (else no mark)."""
    return timeline.span(phase, timeline.PLUGIN) if when else contextlib.nullcontext()


def runs_plan(state) -> bool:
    """Whether a worker's state runs the plan: None (no WARMUP_PLAN) and a StepAside do not."""
    return state is not None and not isinstance(state, StepAside)


def _prepared(worker, release: Release, settings: Settings):
    """The worker's state, kept on it: None without WARMUP_PLAN, its WorkerWarmup (engine and plan
    made, the report's path checked), or its StepAside: any failure of those, this rank's."""
    if settings.plan is None:
        return None
    try:
        state = WorkerWarmup.prepare(worker, release, settings)
    except Exception as e:  # noqa: BLE001 - any failure of ours: vLLM starts without the plugin
        state = step_aside(cause_of(e), settings.strict, rank_of(worker))
    setattr(worker, STATE, state)
    return state


def _started(worker, state, settings: Settings):
    """The state once its monitor and pool are started; a start that fails withdraws what it
    installed (the pool's processes would outlive the plan) and steps aside."""
    try:
        state.start()
        return state
    except Exception as e:  # noqa: BLE001 - any failure of ours: vLLM starts without the plugin
        state.withdraw("the plugin stepped aside")
        aside = step_aside(cause_of(e), settings.strict, rank_of(worker))
    setattr(worker, STATE, aside)
    return aside


def _bundle_before_compile(worker, settings: Settings) -> None:
    if settings.machine_check:
        with timeline.span("plugin: bundle machine check", timeline.PLUGIN):
            bundle.check_machine(worker)  # before vLLM, or a bundle, reads the caches
    with _timed(bool(settings.bundle), "plugin: bundle pull wait"):
        path, waited_s = bundle_source.for_process(settings.bundle, settings.pull_timeout_s,
                                                   plain_http=settings.registry_plain_http).wait()
    with _timed(bool(path), "plugin: bundle install"):
        bundle.install_before_compile(worker, path, waited_s)
    with _timed(bool(settings.bundle_out), "plugin: bundle roots recorded"):
        bundle.record_roots(worker, settings.bundle_out)


def _determine_available_memory(original, release: Release, settings: Settings):
    @functools.wraps(original)
    def determine_available_memory(self, *args, **kwargs):
        with _method_span(self, "Worker.determine_available_memory"):
            return _determine_available_memory_body(self, original, release, args, kwargs)
    return determine_available_memory


def _determine_available_memory_body(self, original, release: Release, args, kwargs):
    state = getattr(self, STATE, None)
    if not runs_plan(state):
        return original(self, *args, **kwargs)
    # The device lane's processes, and their GPU memory, gone before vLLM measures (after its
    # profile run, inside its memory profile); the compile lane goes on (vllm_bridge.warmup.pool_lane).
    runner = self.model_runner
    profile = getattr(runner, release.profile_method)
    with state.phases.phase("profile run"), swapped(runner, release.profile_method,
                                                    then_finish_device_lane(state, profile)):
        return original(self, *args, **kwargs)


def _compile_or_warm_up_model(original, release: Release, settings: Settings):
    @functools.wraps(original)
    def compile_or_warm_up_model(self, *args, **kwargs):
        with _method_span(self, "Worker.compile_or_warm_up_model"):
            result = _compile_or_warm_up_model_body(self, original, release, settings, args, kwargs)
        timeline.mark("ready", time.time(), what="compile_or_warm_up_model returned: the worker is ready")
        return result
    return compile_or_warm_up_model


def _compile_or_warm_up_model_body(self, original, release: Release, settings: Settings, args, kwargs):
    state = _agreed(self, release, settings)
    if not runs_plan(state):  # no plan, or stepped aside: vLLM's method as it is, a bundle's work after it
        result = original(self, *args, **kwargs)
        _bundle_after_ready(self, settings, None)
        return result
    result = state.warm_up(lambda: original(self, *args, **kwargs))
    _bundle_after_ready(self, settings, state)
    return result


def _bundle_after_ready(worker, settings: Settings, state) -> None:
    """The install's use checked (before packing, which reads every file), into the report where a
    plan ran; the start-up's caches listed for WARMUP_BUNDLE_OUT."""
    with _timed(bool(settings.bundle), "plugin: bundle use checked"):
        uses = bundle.check_use(worker, settings.bundle_inert)
    if uses is not None and state is not None:
        state.amend_report("bundle_use", [dataclasses.asdict(u) for u in uses])
    with _timed(bool(settings.bundle_out), "plugin: bundle listed for packing"):
        bundle.build_after_ready(worker, settings.bundle_out, _origin(state))


def _agreed(worker, release: Release, settings: Settings):
    """The worker's state once every rank has said whether it steps aside (step_aside.agree: the
    plan's batches are collectives, so one rank's step-aside is every rank's): a rank that would run
    the plan runs vLLM's own warmup instead when another rank stepped aside."""
    if settings.plan is None:
        return None
    state = getattr(worker, STATE, None) or _prepared(worker, release, settings)  # load_model not ours to wrap
    own = state.cause if isinstance(state, StepAside) else getattr(state, "fallback", None)
    first = agree(Verdict(rank_of(worker), own), settings.strict)
    if first is not None and own is None:
        state.step_aside(f"rank {first.rank} stepped aside ({first.cause})", by_another_rank=True)
    return state


def _origin(state):
    """What the bundle says started vLLM: the plan the plugin ran, if any."""
    from executor.bundle import Origin

    if state is None:
        return Origin()
    return Origin(state.expanded.plan, state.expanded.engine, getattr(state.report, "digest", None) or "")
