"""An ``oci://REGISTRY/REPO[:TAG][@sha256:D]`` reference (executor/bundle/oci_ref.py), pulled once per
node into the node's cache (executor/bundle/oci.py speaks to the registry).

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

from .. import locks, oci as registry, oci_ref
from ..oci_ref import Reference
from .protocol import AlreadyFailed, Fetched

SCHEME = "oci"


class PullFailed(AlreadyFailed, registry.RegistryError):
    """A pull another process of the same server tried and failed (its mark): a registry's failure
    (the CLI's exit 1) that that process said already (the plugin says nothing)."""


def claims(value: str) -> bool:
    return oci_ref.is_reference(value)


def opened(value: str, *, where: str = "reference") -> "OciSource":
    return OciSource(oci_ref.parse(value, where=where))


class OciSource(NamedTuple):
    ref: Reference

    @property
    def name(self) -> str:
        return str(self.ref)

    remote = True

    @property
    def digest(self) -> str | None:
        return self.ref.digest

    def pin(self, *, timeout_s: float, plain_http: bool = False, environ=os.environ) -> "OciSource":
        """Asks the registry: a tag resolves to the digest it names now, a digest is checked to exist
        (RegistryError or PlanError, one line)."""
        pinned, _ = registry.resolve(self.ref, timeout_s=timeout_s, plain_http=plain_http, environ=environ)
        return OciSource(pinned)

    def path(self, cache_dir: str | None = None) -> str:
        return node_path(self.ref, _required(cache_dir))

    def fetch(self, cache_dir: str | None = None, *, timeout_s: float, server: str = "",
              plain_http: bool = False, environ=os.environ) -> Fetched:
        return fetch_once(self.ref, _required(cache_dir), timeout_s=timeout_s, server=server,
                          plain_http=plain_http, environ=environ)


def _required(cache_dir: str | None) -> str:
    if not cache_dir:
        raise ValueError("an oci:// bundle is fetched into a cache directory: none was given")
    return cache_dir


def node_path(ref: Reference, cache_dir: str) -> str:
    """Where this node keeps the bundle `ref` (pinned) names."""
    if not ref.digest:
        raise ValueError(f"{ref} is not pinned to a digest")
    return os.path.join(cache_dir, "oci", ref.digest.replace(":", "-") + ".bundle")


def fetch_once(ref: Reference, cache_dir: str, *, timeout_s: float, server: str = "",
               plain_http: bool = False, environ=os.environ) -> Fetched:
    """The node's copy of the bundle `ref` (pinned) names: there already, pulled by another process
    while this one waited, or pulled now. Raises oci.RegistryError or PlanError (one line), and
    PullFailed where another process of `server` met the failure."""
    path = node_path(ref, cache_dir)
    deadline = time.monotonic() + timeout_s
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _locked(path + ".lock", deadline, ref):
        if os.path.isfile(path):
            return Fetched(path, None)
        failed = _failed_mark(path, server)
        if server and os.path.exists(failed):
            with open(failed) as f:
                raise PullFailed(f.read().strip() or "an earlier pull of this server failed")
        try:
            pulled = registry.pull(ref, path, timeout_s=max(0.0, deadline - time.monotonic()),
                                   plain_http=plain_http, environ=environ)
        except (registry.RegistryError, PlanError) as e:
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
    return locks.exclusive(lock_path, deadline=deadline, waited_too_long=lambda: registry.RegistryError(
        f"{ref}: another process's pull did not finish by the deadline"))
