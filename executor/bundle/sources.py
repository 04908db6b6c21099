"""Where a bundle comes from: a file, a directory holding one (a Kubernetes image volume, mounted
read-only), or an ``oci://`` reference, pulled once per node into the node's cache.

Once per node: every process of a server (vLLM's API server, its engine core, each worker) asks
for the same digest; the first to take ``<digest>.lock`` pulls into ``<digest>.bundle`` (renamed
there only once every byte matched its digest, so the file's presence means checked), the others
wait on the lock, bounded by their deadline, and find the file. A puller that failed leaves its
cause in a ``<digest>.<server>.failed`` mark, so that the processes of the same server give up
with that cause instead of each asking the registry again; another server starts afresh.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from planner.errors import PlanError

from . import archive, locks, oci
from .oci_ref import Reference



class AlreadyFailed(oci.RegistryError):
    """Another process of the same server met this failure (and said it)."""


class Fetched(NamedTuple):
    path: str
    pulled: oci.Pulled | None   # None: this process found the file pulled (by another, or earlier)


def bundle_in(value: str) -> str:
    """The bundle file `value` names: the file itself, or the one bundle in a directory (an image
    volume mounts the artifact's layer under its title; anything else there is ignored)."""
    if not os.path.isdir(value):
        return value
    found = sorted(os.path.join(value, name) for name in os.listdir(value)
                   if not name.startswith(".") and os.path.isfile(os.path.join(value, name))
                   and _is_bundle(os.path.join(value, name)))
    if len(found) != 1:
        what = "no warmup bundle" if not found else f"{len(found)} warmup bundles ({', '.join(map(os.path.basename, found))})"
        raise PlanError(f"a bundle directory must hold one warmup bundle; it holds {what}", file=value)
    return found[0]


def _is_bundle(path: str) -> bool:
    try:
        archive.read_manifest(path)
        return True
    except PlanError:
        return False


def node_path(ref: Reference, cache_dir: str) -> str:
    """Where this node keeps the bundle `ref` (pinned) names."""
    if not ref.digest:
        raise ValueError(f"{ref} is not pinned to a digest")
    return os.path.join(cache_dir, "oci", ref.digest.replace(":", "-") + ".bundle")


def fetch_once(ref: Reference, cache_dir: str, *, timeout_s: float, server: str = "",
               plain_http: bool = False, environ=os.environ) -> Fetched:
    """The node's copy of the bundle `ref` (pinned) names: there already, pulled by another process
    while this one waited, or pulled now. Raises oci.RegistryError or PlanError (one line)."""
    path = node_path(ref, cache_dir)
    deadline = time.monotonic() + timeout_s
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _locked(path + ".lock", deadline, ref):
        if os.path.isfile(path):
            return Fetched(path, None)
        failed = _failed_mark(path, server)
        if server and os.path.exists(failed):
            with open(failed) as f:
                raise AlreadyFailed(f.read().strip() or "an earlier pull of this server failed")
        try:
            pulled = oci.pull(ref, path, timeout_s=max(0.0, deadline - time.monotonic()),
                              plain_http=plain_http, environ=environ)
        except (oci.RegistryError, PlanError) as e:
            if server:
                _write_mark(failed, str(e))
            raise
    return Fetched(path, pulled)


def _failed_mark(path: str, server: str) -> str:
    return f"{path[:-len('.bundle')]}.{server}.failed"


def _write_mark(path: str, cause: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(cause + "\n")
    except OSError:
        pass  # the others then ask the registry themselves


def _locked(lock_path: str, deadline: float, ref: Reference):
    """The node's pull lock, waited for until the deadline (another process is pulling)."""
    return locks.exclusive(lock_path, deadline=deadline, waited_too_long=lambda: oci.RegistryError(
        f"{ref}: another process's pull did not finish by the deadline"))
