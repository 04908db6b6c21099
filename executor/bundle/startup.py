"""A bundle of a whole vLLM start-up: every cache vLLM's start-up compiled or tuned into, packed
once vLLM is ready (the plugin: WARMUP_BUNDLE_OUT) and installed where a vLLM started the same
way reads it (the plugin before vLLM compiles: WARMUP_BUNDLE; or `warmup bundle install`).

The families, where each lives, what is packed of it, how it relocates and how its use is seen are
their modules' (executor/caches/, table in executor/caches/registry.py); the roots of one machine
are ``CacheRoots.resolve`` (the plugin passes vLLM's own VLLM_CACHE_ROOT). A directory inside
another family's is packed once, with the outer one.

Install checks the fingerprint (environment.mismatch: the machine, vLLM's version and the config
hash; or, ``as_built``, the bundle's own, for an image built without a GPU: the plugin then checks
the machine at start, executor/bundle/machine_check.py) and every member before it writes anything,
then, under the lock, places each family (executor/bundle/placement.py: relocated to this
machine's paths, placed whole, checked as its loader takes it) and leaves the record of what it
placed (executor/bundle/usage.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import NamedTuple

from planner.errors import PlanError

from .. import precompile
from ..caches import deep_gemm
from ..caches import registry
from ..caches.registry import CacheRoots, of
from ..caches.roots import default_vllm_cache_root
from ..caches.targets import cannot_write, check_directories
from ..caches.tree import Placed, undo
from . import archive, environment, ops, packing, records, staging, usage
from .archive import FORMAT, VLLM, Manifest
from .placement import Installation, families, place_all, removed

def early() -> tuple[str, ...]:
    """The families placed before vLLM resolves the model."""
    return tuple(f.name for f in registry.FAMILIES if f.early)


# --- build -----------------------------------------------------------------------------------------

class Origin(NamedTuple):
    """What started vLLM: the plan the plugin ran (if any), the engine, the plan's digest."""

    plan: str = ""
    engine: str = ""
    plan_digest: str = ""


def pack(roots: CacheRoots, fingerprint: dict, origin: Origin) -> tuple[Manifest, dict]:
    """The manifest of everything under the roots (every regular file with its sha256 and size;
    DeepGEMM's kernels with their keys) and, per member name, its file on disk."""
    head = Manifest(FORMAT, origin.plan, origin.engine, origin.plan_digest, fingerprint, [], [], {}, origin=VLLM)
    manifest, sources = packing.pack(roots.distinct(), head)
    keys = ops.cached_keys(roots["triton"]) if roots.get("triton") else {}
    return manifest._replace(keys=keys), sources


def build(out: str, roots: CacheRoots, fingerprint: dict, origin: Origin) -> Manifest:
    """Pack the start-up's caches into `out` (written whole or not at all)."""
    ops.check_output(out)
    return write_listed(out, listing(out, roots, fingerprint, origin))


def listing(out: str, roots: CacheRoots, fingerprint: dict, origin: Origin) -> packing.Listing:
    """What `build` packs, listed now (the vLLM plugin: the moment vLLM is ready), nothing hashed
    yet; PlanError (one line) where the caches are empty."""
    head = Manifest(FORMAT, origin.plan, origin.engine, origin.plan_digest, fingerprint, [], [], {}, origin=VLLM)
    listed = packing.listing(roots.distinct(), head)
    if not listed.sources:
        raise PlanError("no bundle written: the start-up's caches are empty (" +
                        ", ".join(f"{f} {r}" for f, r in roots.distinct().items()) + ")", file=out)
    keys = ops.cached_keys(roots["triton"]) if roots.get("triton") else {}
    return listed._replace(head=listed.head._replace(keys=keys))


def write_listed(out: str, listed: packing.Listing, cancelled=None) -> Manifest:
    """The listed files hashed and packed into `out` as they were listed (written whole or not at
    all; a file changed since is PlanError, one line); `cancelled()` true stops it (archive.Cancelled)."""
    manifest = packing.hashed(listed, cancelled)
    # install_early reads no further than the early families
    archive.write_bundle(out, manifest, listed.sources, first=early(), cancelled=cancelled)
    return manifest


# --- install ---------------------------------------------------------------------------------------

def check(manifest: Manifest, roots: CacheRoots, here: dict, path: str) -> None:
    """Everything refused before a byte is written: another environment (one line naming the
    field, the bundle's value and this machine's), a family this machine has no directory for."""
    problem = environment.mismatch(manifest.fingerprint, here)
    if problem:
        raise PlanError(f"refused: the bundle was built for another environment ({problem})", file=path)
    held = families(manifest)
    known = set(registry.names())
    lacking = [f for f in sorted(held) if f in known and not roots.get(f)]
    if lacking or held - known:
        what = lacking[0] if lacking else sorted(held - known)[0]
        raise PlanError(f"refused: the bundle holds {what} files and there is no {what} cache to put them in",
                        file=path)


def install(path: str, roots: CacheRoots, here: dict, record_dir: str | None = None,
            as_built: bool = False, origin: str | None = None) -> Installation:
    """Install a start-up bundle into `roots`; the record of what was placed (usage.Installed) is
    kept under `record_dir`, vLLM's cache root, and names the bundle by `origin` (where it came
    from: an oci:// bundle's pinned name, where `path` is a temporary file), else by `path`.
    PlanError (one line, nothing written) when the bundle is foreign, corrupted, unsafe or made
    for another environment or vLLM configuration.
    `as_built`: `here` is the bundle's own fingerprint (an image built on a CPU machine), and the
    record says the machine is still to be checked. The members are checked once per machine
    (executor/bundle/staging.py: the plugin starts that at register)."""
    manifest = archive.read_manifest(path)
    if as_built:
        here = as_built_target(manifest, here)
    try:
        check(manifest, roots, here, path)
    except PlanError:
        staging.discard(manifest)
        raise
    names = deep_gemm.names_here(manifest, here.get("deep_gemm_include_dir"), path)
    record_dir = record_dir or default_vllm_cache_root()
    earlier = usage.load(usage.record_path(record_dir, manifest.digest()))
    left_out = earlier.left_out if earlier is not None else {}
    if not all_in_place(manifest, roots, names, left_out):  # caches that hold it already may be read-only (an image)
        _check_space(path, manifest, roots, families(manifest), record_dir)
    # another rank of this node may be placing it: its staging lock is waited for, then its work found
    with staging.consume(path, manifest, unless=lambda: all_in_place(manifest, roots, names, left_out)) as staged:
        if staged is None:
            return Installation({f: Placed(kept=len(_members(manifest, f))) for f in sorted(families(manifest))})
        with ops.locked(_lock_root(roots, families(manifest))):
            placed = place_all(manifest, staged, roots, names, here.get("deep_gemm_include_dir"), move=True)
            absent = {f: _absent(manifest, roots, f, names) for f in families(manifest)}
    installed = record_use(path, manifest, roots, placed, absent, record_dir, fingerprint=here if as_built else None,
                           pending=as_built, origin=origin)
    return placed._replace(installed=installed)


def as_built_target(manifest: Manifest, given: dict) -> dict:
    """The bundle's own fingerprint as the install's target, with what the caller gave (a config
    hash) and this machine's DeepGEMM include directory, where DeepGEMM is installed here (2.5/2.6
    entries are re-keyed for it; no GPU is asked)."""
    here = {**manifest.fingerprint, **{k: v for k, v in given.items() if v is not None}}
    local = precompile.deep_gemm_fingerprint()
    if local is not None:
        here["deep_gemm_include_dir"] = local["include_dir"]
    return here


def install_early(path: str, roots: CacheRoots, vllm_version: str | None,
                  record_dir: str | None = None) -> Installation:
    """The early families of a start-up bundle, before vLLM resolves the model (the plugin's
    register: no worker, no GPU asked, no configuration hash yet). Checked against vLLM's version
    alone: a model-info entry describes vLLM's own model class and carries the hash of its source
    file, which vLLM checks again. Only their members are read (they come first in the tar); the
    rest of the bundle waits for ``install`` at load_model. Same refusals and placement as ``install``."""
    manifest = archive.read_manifest(path)
    if manifest.origin != VLLM or manifest.fingerprint.get("vllm") != vllm_version:
        raise PlanError("refused: the bundle was built for another environment "
                        f"(vllm: bundle {manifest.fingerprint.get('vllm')!r}, here {vllm_version!r})", file=path)
    wanted = families(manifest) & set(early())
    if not wanted:
        return Installation({})
    if all(not _absent(manifest, roots, family) for family in wanted):
        # vLLM loads its plugins in every process (API server, engine core, each worker): only the
        # first one places them; the others find its files and check nothing twice
        return Installation({f: Placed(kept=len(_members(manifest, f))) for f in sorted(wanted)})
    record_dir = record_dir or default_vllm_cache_root()
    _check_space(path, manifest, roots, wanted, record_dir)
    staged = tempfile.mkdtemp(prefix="warmup-bundle-early-")
    try:
        archive.verify_members(path, manifest, staged, only=tuple(sorted(wanted)))
        with ops.locked(_lock_root(roots, wanted)):
            placed = place_all(manifest, staged, roots, {}, None, wanted, move=True)
            absent = {f: _absent(manifest, roots, f) for f in wanted}
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return placed._replace(installed=record_use(path, manifest, roots, placed, absent, record_dir))


def _check_space(path: str, manifest: Manifest, roots: CacheRoots, wanted: set, record_dir: str) -> None:
    """Refused before anything is written: a cache (or the records' directory) that is a file or
    cannot be written (WriteError), or too little room for the bundle (PlanError)."""
    destinations = {f: roots.directory(f) for f in wanted}
    check_directories({**destinations, "lock": _lock_root(roots, wanted),
                       "install records": records.records_dir(record_dir)})
    problem = archive.space_problem(manifest, tempfile.gettempdir(), destinations)
    if problem:
        raise PlanError(f"refused: the bundle {problem}", file=path)


def _lock_root(roots: CacheRoots, wanted: set) -> str:
    """One installer at a time: the lock lives in DeepGEMM's root, else the first family's."""
    if roots.get("deep_gemm"):
        return roots.directory("deep_gemm")
    return next(roots.directory(f) for f in registry.names() if roots.get(f) and f in wanted)


def _members(manifest: Manifest, family: str) -> list[str]:
    """The family's member paths, relative to its root."""
    return [f.path.split("/", 1)[1] for f in manifest.files if f.path.split("/")[0] == family]


def _absent(manifest: Manifest, roots: CacheRoots, family: str, names: dict | None = None) -> list[str]:
    """The family's members not at their place under its root (`names`: DeepGEMM's entry names here)."""
    root = roots.get(family)
    if not root:
        return _members(manifest, family)
    where = of(family).member_path
    return [m for m in _members(manifest, family) if not _is_file(where(root, m, names or {}))]


def _is_file(path: str | None) -> bool:
    return path is not None and os.path.isfile(path)


def all_in_place(manifest: Manifest, roots: CacheRoots, names: dict | None = None, left_out: dict | None = None) -> bool:
    """Whether an install of this bundle would place nothing: every member at its place, but those
    an earlier install of it here left out (not installable, or removed by the checks)."""
    return all(set(_absent(manifest, roots, family, names)) <= set((left_out or {}).get(family, ()))
               for family in families(manifest))


def record_use(path: str, manifest: Manifest, roots: CacheRoots, placed: Installation, absent: dict,
               record_dir: str, fingerprint: dict | None = None, pending: bool = False,
               origin: str | None = None) -> usage.Installed:
    """Mark what was placed (executor/bundle/usage.py) and keep the record under vLLM's cache root
    (`record_dir`), found there by the bundle's digest (`warmup bundle verify`, the plugin); it names
    the bundle by `origin`, else by `path`. `fingerprint`: the one an as-built install was checked
    against; `pending`: mark it for the plugin's check of the machine.
    A record that cannot be written (a full disk) removes what was placed: the use report, the
    plugin's check and its removal of a mismatched install all start from the record, so nothing
    may stay placed without one. That is one line (WriteError)."""
    paths = {f: p.paths for f, p in placed.families.items() if p.paths}
    record = usage.record_path(record_dir, manifest.digest())
    try:
        installed = usage.mark(origin or path, {f: roots.directory(f) for f in paths}, paths, manifest,
                               {f: a for f, a in absent.items() if a}, fingerprint)
        _keep_record(installed, record, pending)
    except OSError as e:
        placed_paths = [p for family in paths.values() for p in family]
        undo(placed_paths)
        raise cannot_write(e, record, f"the install record could not be written, so {removed(placed_paths)}") from None
    return installed


def _keep_record(installed: usage.Installed, record: str, pending: bool) -> None:
    """The record, after its mark when `pending`: a process that dies between them leaves a mark
    the plugin's check reports and drops, never an unchecked install. A mark this call made is
    taken back when the record cannot be written."""
    made_mark = pending and not os.path.exists(record + records.UNCHECKED)
    if pending:
        os.makedirs(os.path.dirname(record), exist_ok=True)
        records.mark_pending(record)
    try:
        usage.save(installed, record)
    except OSError:
        if made_mark:
            with contextlib.suppress(OSError):
                os.unlink(record + records.UNCHECKED)
        raise


def summary(manifest: Manifest) -> str:
    """One line: the bundle's families with their files and bytes."""
    sizes: dict = {}
    for f in manifest.files:
        count, size = sizes.get(f.path.split("/")[0], (0, 0))
        sizes[f.path.split("/")[0]] = (count + 1, size + f.size)
    return ", ".join(f"{family} {n} files {size / 2**20:.1f} MiB" for family, (n, size) in sizes.items())
