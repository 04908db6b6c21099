"""The plugin's settings: what the user set in the environment (README, "vLLM plugin").

vLLM calls the plugin's ``register`` in every process; it reads them there, once. A value it cannot
use is one line (PluginError), on which the plugin steps aside (vllm_bridge.step_aside), or stops
vLLM where WARMUP_STRICT=1 asks for it. Each worker (a rank) writes its own report and JIT log:
``with_rank``.
"""

from __future__ import annotations

import os
from typing import NamedTuple

DEFAULT_TIMEOUT_S = 300.0
# An oci:// bundle not on the node after this long: vLLM starts without it (a stock cold start of the
# smallest model served so far took ~330 s on the H100: a longer wait would lose to it).
PULL_TIMEOUT_S = 120.0
# The one truth table of a WARMUP_* switch (_flag): unset or empty is the switch's default.
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
FIX_SWITCH = "WARMUP_FIX_"  # + a start-up fix's name, upper case: its switch (fix_switch)


class PluginError(RuntimeError):
    """A one-line reason the worker does not start with the warmup the user asked for."""


class Settings(NamedTuple):
    """What the user set (README, "vLLM plugin")."""

    plan: str | None               # WARMUP_PLAN: built-in plan name or path (unset: the plugin is inert)
    report: str | None = None      # WARMUP_PLAN_REPORT: the executor's JSON report (rank suffix added)
    jit_log: str | None = None     # WARMUP_JIT_LOG: JSONL of compiles after ready (rank suffix added)
    engine: str | None = None      # WARMUP_ENGINE: an engine config to use instead of deriving one
    jobs: int | None = None        # WARMUP_JOBS: precompile worker processes (unset: the machine's
    #                                cores, at most one per key; 0 or 1: none, the plan compiles serially)
    strict: bool = False           # WARMUP_STRICT: a failure of the plugin stops vLLM (else it steps aside)
    timeout_s: float = DEFAULT_TIMEOUT_S  # WARMUP_PRECOMPILE_TIMEOUT: longest wait for the pool
    bundle: str | None = None      # WARMUP_BUNDLE: a start-up bundle installed before vLLM compiles
    bundle_out: str | None = None  # WARMUP_BUNDLE_OUT: the start-up's caches packed there once ready
    machine_check: bool = False    # an install made against a bundle's own fingerprint awaits this machine's check
    pull_timeout_s: float = PULL_TIMEOUT_S  # WARMUP_BUNDLE_PULL_TIMEOUT_S: longest wait for an oci:// bundle
    timeline: str | None = None    # WARMUP_TIMELINE: the start-up timeline's directory (else the report's)
    engine_core_fork: bool | None = None  # WARMUP_ENGINE_CORE_FORK: vLLM's engine core started by fork
    #                                (engine_core_start: unset, where the engine runs on one GPU; 1 always; 0 never)
    torch_compile_after_ready: str = "eager"  # WARMUP_TORCH_COMPILE_AFTER_READY: eager (a call that would
    #                                compile runs eagerly: executor/dynamo_stance.py) or compile (Dynamo's default)
    registry_plain_http: bool = False  # WARMUP_REGISTRY_PLAIN_HTTP: an oci:// bundle's registry spoken to
    #                                without TLS though not on loopback (bundles.source; the CLI's is --plain-http)
    bundle_inert: str = "warn"     # WARMUP_BUNDLE_INERT: warn (an installed entry nothing read by ready is
    #                                listed) or error (it stops vLLM's start: bundles.startup.check_use)
    fixes_off: tuple[str, ...] = ()  # WARMUP_FIX_<NAME>=0: the start-up fixes the user turned off, by name
    #                                (vllm_bridge/fixes.py: FIXES, switch fix_switch(name); unset: on)
    compile_load_beside_weights: bool = False  # WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS: vLLM's AOT-compiled
    #                                model loaded in a thread while the weights load (vllm_bridge/compile_load.py)
    model_inspection_fork: bool = True  # WARMUP_MODEL_INSPECTION_FORK: vLLM's model-class inspection in a
    #                                forked child of the API server (vllm_bridge/model_inspection.py); 0: vLLM's own
    flashinfer_split_compile: bool = True  # WARMUP_FLASHINFER_SPLIT_COMPILE: FlashInfer's nvcc spreads each compile
    #                                unit over the cores, where its workspace allows (vllm_bridge/flashinfer_flags.py)
    torch_mega_aot: bool = True    # WARMUP_TORCH_MEGA_AOT: vLLM's mega AOT artifact asked for where its torch
    #                                takes it, its default leaves it off and the cache allows (vllm_bridge/mega_aot.py)

    @classmethod
    def from_env(cls, environ=os.environ) -> "Settings":
        return cls(environ.get("WARMUP_PLAN") or None, environ.get("WARMUP_PLAN_REPORT") or None,
                   environ.get("WARMUP_JIT_LOG") or None, environ.get("WARMUP_ENGINE") or None,
                   _jobs(environ.get("WARMUP_JOBS", "")), strict_setting(environ),
                   _seconds(environ.get("WARMUP_PRECOMPILE_TIMEOUT", "")),
                   environ.get("WARMUP_BUNDLE") or None, environ.get("WARMUP_BUNDLE_OUT") or None,
                   _machine_check_pending(environ),
                   _seconds(environ.get("WARMUP_BUNDLE_PULL_TIMEOUT_S", ""), PULL_TIMEOUT_S, "WARMUP_BUNDLE_PULL_TIMEOUT_S"),
                   environ.get("WARMUP_TIMELINE") or None, _unset_or_flag(environ, "WARMUP_ENGINE_CORE_FORK"),
                   _choice(environ, "WARMUP_TORCH_COMPILE_AFTER_READY", ("eager", "compile")),
                   _flag(environ, "WARMUP_REGISTRY_PLAIN_HTTP"),
                   _choice(environ, "WARMUP_BUNDLE_INERT", ("warn", "error")), _fixes_off(environ),
                   _flag(environ, "WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS"), _flag(environ, "WARMUP_MODEL_INSPECTION_FORK", default=True),
                   _flag(environ, "WARMUP_FLASHINFER_SPLIT_COMPILE", default=True),
                   _flag(environ, "WARMUP_TORCH_MEGA_AOT", default=True))

    @property
    def asked(self) -> bool:
        """Whether the user asked for the plugin: a plan, a bundle to install or one to build."""
        return bool(self.plan or self.bundle or self.bundle_out)

    @property
    def active(self) -> bool:
        """Whether the plugin patches vLLM: a plan, a bundle to install or one to build, or an
        install that awaits this machine's check (`warmup bundle install --target bundle`)."""
        return self.asked or self.machine_check


def strict_setting(environ=os.environ) -> bool:
    """WARMUP_STRICT=1: the user asked for any failure of the plugin to stop vLLM (one line)."""
    return _flag(environ, "WARMUP_STRICT")


def _machine_check_pending(environ) -> bool:
    """Whether an install under vLLM's cache root awaits this machine's check (one directory listing)."""
    from executor.bundle import pending_installs as pending
    from executor.caches.roots import default_vllm_cache_root

    return bool(pending(default_vllm_cache_root(environ)))


def _jobs(text: str) -> int | None:
    if not text.strip():
        return None
    if not text.strip().isdigit():
        raise PluginError(f"warmup-planner: WARMUP_JOBS must be a whole number, got {text!r}")
    return int(text)


def _flag(environ, name: str, default: bool = False) -> bool:
    """A switch: TRUE or FALSE (any case, spaces around it ignored); unset or empty: `default`."""
    value = environ.get(name, "").strip().lower()
    if not value:
        return default
    if value not in TRUE + FALSE:
        raise PluginError(f"warmup-planner: {name} must be 1 or 0, got {environ[name]!r}")
    return value in TRUE


def _unset_or_flag(environ, name: str) -> bool | None:
    """A switch whose absence means something of its own (the plugin decides): None where unset or empty."""
    return _flag(environ, name) if environ.get(name, "").strip() else None


def fix_switch(name: str) -> str:
    """The switch of the start-up fix `name` (vllm_bridge/fixes.py: FIXES): WARMUP_FIX_<NAME>."""
    return FIX_SWITCH + name.upper()


def _fixes_off(environ) -> tuple[str, ...]:
    """The start-up fixes the user turned off, by name: every WARMUP_FIX_<NAME> set is read as a
    switch (on where unset or empty). Not only the known fixes' (importing fixes.FIXES here would
    close an import circle: fixes -> step_aside -> settings); a name no fix has turns nothing off."""
    return tuple(sorted(variable[len(FIX_SWITCH):].lower() for variable in environ
                        if variable.startswith(FIX_SWITCH) and not _flag(environ, variable, default=True)))


def _choice(environ, name: str, choices: tuple) -> str:
    """One of `choices` (the first where unset)."""
    value = environ.get(name, "").strip().lower() or choices[0]
    if value not in choices:
        raise PluginError(f"warmup-planner: {name} must be {' or '.join(choices)}, got {environ[name]!r}")
    return value


def _seconds(text: str, default: float = DEFAULT_TIMEOUT_S, name: str = "WARMUP_PRECOMPILE_TIMEOUT") -> float:
    if not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise PluginError(f"warmup-planner: {name} must be a positive number of seconds, got {text!r}")
    return value


def rank_of(worker) -> int:
    """A vLLM worker's rank (0 for a worker that names none)."""
    return int(getattr(worker, "rank", 0) or 0)


def with_rank(path: str | None, rank: int) -> str | None:
    """One file per worker: rank 0 keeps the name, rank r writes NAME.rankR.EXT."""
    if path is None or rank == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"
