"""Start-up bundles inside vLLM (vllm_bridge.plugin calls these from the patched Worker).

- ``WARMUP_BUNDLE=FILE``: at the plugin's ``register``, vLLM's model info (``install_early``: vLLM
  reads it while it resolves the model, before any worker exists); at ``load_model``, before vLLM compiles anything (torch.compile runs in
  the memory profile, after it), the bundle is installed into the caches this process will read
  (executor.bundle.startup): its fingerprint is checked first against this machine, this vLLM
  and the live ``VllmConfig.compute_hash()``, the hash vLLM keys its torch.compile cache with.
  The bundle's members are checked once per machine, in a background thread started at
  ``register`` in the first of the server's processes (executor/bundle/staging.py), so that the
  install at ``load_model`` only renames checked files into place.
  The install makes every path a loader follows this machine's, and removes what a loader would
  fail on, one log line each (executor/bundle/placement.py): vLLM then compiles those pieces.
- Before that, installs made against a bundle's own fingerprint (an image built without this GPU,
  ``warmup bundle install --target bundle``) are checked against this machine (``check_machine``).
- After ready (``compile_or_warm_up_model`` returned), what the install placed is checked for use
  (executor/bundle/usage.py): one line per family in vLLM's log, the entries never loaded, those
  compiled again and the building machine's copies read in their place named, and the lot in the
  plugin's report; ``WARMUP_BUNDLE_INERT=error`` makes any of them fatal (for CI: vLLM's start fails
  with that line), ``warn`` (the default) logs it.
- ``WARMUP_BUNDLE_OUT=FILE``: the cache directories are recorded at ``load_model`` (before
  vLLM's compile points TORCHINDUCTOR_CACHE_DIR at its own), and once ``compile_or_warm_up_model``
  has returned (vLLM is ready: everything it compiles or tunes at start is on disk) rank 0 lists
  their files (each one's inode, size and mtime) and returns: vLLM reports ready while a daemon
  thread hashes and packs them into FILE, each as it was listed (a file written after ready, a
  compile of the first request's, is not packed; one that changed is refused: no bundle), the file
  written whole or not at all. The process's exit waits for it (EXIT_WAIT_S at most, then stops it:
  nothing written). One line says when it was written and how long it took, or why it was not.

Both are work around vLLM's: a failure is one line of vLLM's log and vLLM goes on, cold or with
no bundle written (a server is never stopped by a bundle).
"""

from __future__ import annotations

import logging
import os
import time
from typing import NamedTuple

from ..settings import rank_of
from ..step_aside import cause_of
from .writer import Writer

log = logging.getLogger("vllm.warmup_planner")
ROOTS = "_warmup_planner_bundle_roots"  # on a worker: the Recorded of load_model
INSTALLED = "_warmup_planner_bundle_installed"  # on a worker: the usage.Installed of its install
INERT_SETTING = "WARMUP_BUNDLE_INERT"  # warn (default) | error: read as Settings.bundle_inert


class InertBundle(RuntimeError):
    """WARMUP_BUNDLE_INERT=error and the installed bundle has inert entries: vLLM's start fails."""


class Recorded(NamedTuple):
    """What a bundle to be built is made of, taken at load_model, before vLLM compiles: the cache
    roots (vLLM's compile then points TORCHINDUCTOR_CACHE_DIR inside its torch.compile cache, while
    the Triton kernels stay in the directory the plugin pinned at load_model) and the config hash
    (VllmConfig.compute_hash() changes while vLLM starts; an installing worker checks it at
    load_model, so the bundle carries the load_model value: one taken at ready refused the same
    configuration's load_model value, bench/RESULTS.md part T)."""

    roots: object
    config_hash: str | None


def vllm_cache_root() -> str | None:
    """vLLM's own VLLM_CACHE_ROOT (None where vLLM is not importable: tests)."""
    try:
        import vllm.envs as envs

        return envs.VLLM_CACHE_ROOT
    except Exception:  # noqa: BLE001 - resolved from the environment as vLLM does
        return None


def roots_now():
    """This process's cache roots, with vLLM's own VLLM_CACHE_ROOT (executor/caches/roots.py)."""
    from executor.caches.registry import CacheRoots

    return CacheRoots.resolve(os.environ, vllm_cache_root())


def record_dir() -> str:
    """Where the records of this machine's installs are kept: vLLM's cache root."""
    from executor.caches.roots import default_vllm_cache_root

    return vllm_cache_root() or default_vllm_cache_root()


def config_hash(vllm_config) -> str | None:
    """The hash vLLM keys its torch.compile cache with (None: the config cannot say)."""
    try:
        return str(vllm_config.compute_hash())
    except Exception:  # noqa: BLE001
        return None


def machine(vllm_config, recorded_hash: str | None = None) -> dict:
    """This worker's fingerprint: the machine's (torch is imported already) and the config hash
    (`recorded_hash`: the one taken at load_model, else the config's now)."""
    from executor.bundle import current_environment

    return {**current_environment(), "vllm_config_hash": recorded_hash or config_hash(vllm_config)}


def install_early(path: str | None, stage: bool = True) -> dict | None:
    """At the plugin's register, before vLLM resolves the model: the bundle's early families
    (vLLM's model info, which a cold start otherwise learns in a subprocess that imports the model,
    15-30 s on the H100). What was placed, or None (not asked, or refused: one log line; the rest
    of the bundle is still tried at load_model)."""
    if not path:
        return None
    from importlib.metadata import version

    from executor.bundle import install_startup_early

    try:
        placed = install_startup_early(path, roots_now(), version("vllm"), record_dir())
    except Exception as e:  # noqa: BLE001 - ours: one line, vLLM resolves the model itself
        log.warning("warmup-planner: bundle's model info not installed: %s", cause_of(e))
        return None
    finally:
        if stage:  # an oci:// bundle is checked by the thread that fetched it
            prepare_unless_in_place(path)
    if placed.families and any(p.new for p in placed.families.values()):
        log.info("warmup-planner: bundle %s, before vLLM resolves the model: %s", path, placed.describe())
    _log_problems(placed)
    return placed


def _log_problems(placed) -> None:
    """One line per member the install left out and per placed file it removed (vLLM compiles those)."""
    for line in placed.problem_lines():
        log.warning("warmup-planner: bundle: %s", line)


def prepare_unless_in_place(path: str) -> None:
    """The members checked in a background thread while vLLM starts (the install waits for it),
    unless this node's caches hold the bundle already (a rank started after another placed it)."""
    from executor.bundle import load_usage, prepare_in_background, read_manifest, startup_in_place, usage_record_path

    try:
        manifest = read_manifest(path)
        earlier = load_usage(usage_record_path(record_dir(), manifest.digest()))
        if startup_in_place(manifest, roots_now(), left_out=earlier.left_out if earlier else None):
            return
    except Exception:  # noqa: BLE001 - the install says why in one line
        return
    prepare_in_background(path)


def install_before_compile(worker, path: str | None, waited_s: float | None = None) -> dict | None:
    """Install WARMUP_BUNDLE (the local file: vllm_bridge.bundles.source; `waited_s`, how long this
    worker waited for its pull, None: a file, no pull); what was placed, or None (not asked, or refused: one log line)."""
    if not path:
        return None
    from executor.bundle import install_startup

    started = time.monotonic()
    try:
        placed = install_startup(path, roots_now(), machine(worker.vllm_config), record_dir())
    except Exception as e:  # noqa: BLE001 - ours: one line, vLLM starts cold
        log.warning("warmup-planner: bundle not installed, vLLM starts cold: %s", cause_of(e))
        return None
    if placed.installed is not None:  # None: another rank placed it all
        setattr(worker, INSTALLED, placed.installed)
    pull = "" if waited_s is None else f"; {waited_s:.2f} s waiting for its pull"
    log.info("warmup-planner: bundle %s %s (%.2f s%s)", path, placed.describe(), time.monotonic() - started, pull)
    _log_problems(placed)
    return placed


def check_machine(worker) -> list[str]:
    """Installs made against a bundle's own fingerprint (`warmup bundle install --target bundle`, an
    image built without this GPU), checked against this machine before vLLM reads its caches: one
    line each; a mismatch removes what that install placed (executor/bundle/machine_check.py)."""
    from executor.bundle import check_installs_on_machine, pending_installs

    try:
        if not pending_installs(record_dir()):
            return []
        lines = check_installs_on_machine(record_dir(), machine(worker.vllm_config))
    except Exception as e:  # noqa: BLE001 - ours: one line, vLLM starts (compiling what does not load)
        log.warning("warmup-planner: the installs made against a bundle's fingerprint could not be checked: %s",
                    cause_of(e))
        return []
    for line in lines:
        log.warning("warmup-planner: %s", line)
    return lines


def check_use(worker, inert: str = "warn") -> list | None:
    """After ready: what of this worker's install was loaded, never loaded, compiled again (one log
    line per family, one per inert entry); None where this worker installed nothing. Raises
    InertBundle (its line logged first) where `inert` is "error" (WARMUP_BUNDLE_INERT=error,
    Settings.bundle_inert) and an entry is inert."""
    installed = getattr(worker, INSTALLED, None)
    if installed is None:
        return None
    from executor.bundle import check_usage, inert_count, usage_lines

    try:
        uses = check_usage(installed)
    except Exception as e:  # noqa: BLE001 - ours: one line, the server runs
        log.warning("warmup-planner: the bundle's use could not be checked: %s", cause_of(e))
        return None
    for line in usage_lines(uses):
        log.log(logging.WARNING if line.startswith("  ") else logging.INFO, "warmup-planner: bundle use: %s", line)
    inert_entries = inert_count(uses)
    if inert_entries and inert == "error":
        message = (f"warmup-planner: {INERT_SETTING}=error: {inert_entries} entries of the bundle {installed.bundle} "
                   "are inert or were read from the building machine's copy (listed above)")
        log.error(message)
        raise InertBundle(message)
    return uses


def record_roots(worker, out: str | None) -> None:
    """Where this start-up's caches are, before vLLM compiles; the output's directory is made
    (as the CLI's `-o` does), and an output that still cannot be written is said now (one line),
    and nothing is packed at the end."""
    if not out:
        return
    from executor.bundle import check_output

    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        check_output(out)
    except Exception as e:  # noqa: BLE001
        log.warning("warmup-planner: WARMUP_BUNDLE_OUT: no bundle will be written: %s", cause_of(e))
        return
    setattr(worker, ROOTS, Recorded(roots_now(), config_hash(worker.vllm_config)))


def build_after_ready(worker, out: str | None, origin) -> Writer | None:
    """Rank 0 lists the start-up's caches now (vLLM's compile_or_warm_up_model has returned: every
    cache vLLM compiled or tuned into at start is complete) and packs them into WARMUP_BUNDLE_OUT in
    a thread of its own, after ready and off vLLM's critical path; the Writer, or None (nothing to
    pack, or the listing failed: one line)."""
    recorded = getattr(worker, ROOTS, None)
    if not out or recorded is None or rank_of(worker) != 0:
        return None
    from executor.bundle import list_startup

    # The roots of load_model: where vLLM's AOT compile moved TORCHINDUCTOR_CACHE_DIR since is
    # inside the torch.compile cache (packed with it), and Inductor's Triton kernels are in the
    # directory Inductor started with, which that move would have left out.
    ready = time.monotonic()
    try:
        listed = list_startup(out, recorded.roots, machine(worker.vllm_config, recorded.config_hash), origin)
    except Exception as e:  # noqa: BLE001 - ours: one line, the server runs
        log.warning("warmup-planner: no bundle written: %s", cause_of(e))
        return None
    return Writer(out, listed, ready).start()
