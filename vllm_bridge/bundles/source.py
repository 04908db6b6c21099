"""WARMUP_BUNDLE as a file this process can install (vllm_bridge.bundles.startup installs it).

What the value names, and how a remote bundle is pinned and fetched, is executor/bundle/sources/'s
(one module per scheme, the table the CLI opens its argument through too); what is here is the
process choreography: which process pins, what it hands down, which thread fetches, who waits.

- A file: itself. A directory: the one bundle in it (Kubernetes mounts an OCI artifact as an
  image volume, read-only, with the bundle file under its title).
- ``oci://REGISTRY/REPO[:TAG][@sha256:D]``: the first process of the server (vLLM's API server)
  asks the registry for the manifest (RESOLVE_TIMEOUT_S at most), names the digest in one line and
  puts the pinned reference into the environment its children inherit (the engine core, the
  workers), so that every rank installs the same bytes even if the tag moves meanwhile. Each
  process then fetches the node's copy in a background thread (executor/bundle/sources/oci.py: the
  first pulls, the others wait on its lock and find the file), started at ``register``, long
  before a worker's ``load_model`` waits for it.
- A registry that is down, slow, or serves bytes that do not match their digest: the bundle is
  not installed, one line for the server (said by the process that met it), and vLLM starts as it
  would without it; the waits are bounded (WARMUP_BUNDLE_PULL_TIMEOUT_S, vllm_bridge.settings).
- A registry that is not on loopback is spoken to over TLS unless the user set
  WARMUP_REGISTRY_PLAIN_HTTP=1 (read by vllm_bridge.settings; `plain_http` here).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from .. import timeline
from ..settings import PULL_TIMEOUT_S
from ..step_aside import cause_of

log = logging.getLogger("vllm.warmup_planner")

RESOLVE_TIMEOUT_S = 10.0  # one small request (the manifest), in the API server, before the model is resolved
EARLY_WAIT_S = 15.0       # what the early install saves: vLLM's model inspection, 15-30 s on the H100
SERVER = "WARMUP_PLANNER_BUNDLE_SERVER"  # set by the plugin, not the user: the server's pull marks


class Source:
    """This process's view of WARMUP_BUNDLE: `wait` gives the local file, or None (said in one line)."""

    def __init__(self, value: str | None, path: str | None = None, timeout_s: float = PULL_TIMEOUT_S):
        self.value, self.path, self.timeout_s = value, path, timeout_s
        self.cause: str | None = None   # why there is no file
        self.said = False               # the cause was said, here or by another process of the server
        self.started = time.monotonic()
        self.thread: threading.Thread | None = None

    def _file(self) -> str | None:
        return None if self.cause else self.path

    def wait_early(self) -> str | None:
        """For the install before vLLM resolves the model: the file if the pull is done within
        EARLY_WAIT_S (else None, one info line: the pull goes on, the rest installs at load_model)."""
        if self.thread is not None:
            self.thread.join(EARLY_WAIT_S)
            if self.thread.is_alive():
                log.info("warmup-planner: bundle %s still being fetched after %.0f s: vLLM resolves the model "
                         "itself; the rest is installed at load_model", self.value, EARLY_WAIT_S)
                return None
        return self._file()

    def local_path(self) -> str | None:
        """The file if it is here now (no waiting): None while a pull goes on, or with no bundle."""
        if self.thread is not None and self.thread.is_alive():
            return None
        return self._file()

    def wait(self) -> tuple[str | None, float | None]:
        """For the install at load_model: (the file, or None: no bundle, said in one line; the
        seconds this call waited for the pull, None where nothing is pulled)."""
        waited = None
        if self.thread is not None:
            began = time.monotonic()
            self.thread.join(max(0.0, self.started + self.timeout_s - began))
            waited = time.monotonic() - began
            if self.thread.is_alive() and not self.cause:
                self.cause = f"not on this node after {self.timeout_s:.0f} s (WARMUP_BUNDLE_PULL_TIMEOUT_S)"
        say_not_installed(self)
        return self._file(), waited


_STARTED: dict = {}  # (pid, WARMUP_BUNDLE's value) -> Source: a forked child starts its own


def for_process(value: str | None, timeout_s: float = PULL_TIMEOUT_S, environ=os.environ, *,
                plain_http: bool = False) -> Source:
    """The source register started in this process (started now where register did not run: a
    process forked after it, whose fetching thread stayed in the parent). Once the server's first
    process has pinned the reference, its pinned value (or "": no bundle) is the one used.
    `plain_http`: Settings.registry_plain_http (WARMUP_REGISTRY_PLAIN_HTTP)."""
    if SERVER in environ and value and "WARMUP_BUNDLE" in environ:
        value = environ["WARMUP_BUNDLE"] or None
    key = (os.getpid(), value)
    if key not in _STARTED:
        _STARTED[key] = source = start(value, timeout_s, environ, plain_http=plain_http)
        pinned = environ.get("WARMUP_BUNDLE") if SERVER in environ else None
        if value and pinned and pinned != value:  # start pinned an oci:// tag: the same source by either name
            _STARTED[(os.getpid(), pinned)] = source
    return _STARTED[key]


def start(value: str | None, timeout_s: float = PULL_TIMEOUT_S, environ=os.environ,
          cache_dir: str | None = None, *, plain_http: bool = False) -> Source:
    """At the plugin's register: the local file, or the node's copy of a remote bundle being fetched
    (`plain_http`: a registry not on loopback spoken to without TLS, WARMUP_REGISTRY_PLAIN_HTTP).
    Which scheme the value names, and how it is pinned and fetched, is executor/bundle/sources/'s."""
    if not value:
        return Source(None)
    from executor.bundle import open_source

    try:
        place = open_source(value, where="WARMUP_BUNDLE")  # a local scheme takes any name: a remote one refused it
        if not place.remote:
            return _local(value, place)
        place = _pinned(place, environ, plain_http)
    except Exception as e:  # noqa: BLE001 - ours: one line, vLLM starts without the bundle
        environ["WARMUP_BUNDLE"] = ""  # the children inherit no bundle, and say nothing
        return _failed(value, cause_of(e))
    try:
        return _fetch_in_background(place, timeout_s, environ, cache_dir, plain_http)
    except Exception as e:  # noqa: BLE001 - a cache root it cannot use, a thread it cannot start
        return _failed(place.name, cause_of(e))


def _local(value: str, place) -> Source:
    """A file, or a directory's one bundle: its path now (a directory without one: one line, and
    each process of the server says it, as each reads the directory itself)."""
    try:
        return Source(value, place.path())
    except Exception as e:  # noqa: BLE001
        return _failed(value, cause_of(e))


def _failed(value: str, cause: str) -> Source:
    source = Source(value)
    source.cause = cause
    say_not_installed(source)
    return source


def _pinned(place, environ, plain_http: bool):
    """The bundle named by fixed bytes; the first process asks (a tag resolves to the digest it
    names now; a digest is checked to exist) and hands the pinned name down to its children."""
    if SERVER in environ and place.digest:
        return place  # a child: the API server pinned it
    environ.setdefault(SERVER, f"{os.getpid()}-{time.time_ns()}")
    asked = time.monotonic()
    pinned = place.pin(timeout_s=RESOLVE_TIMEOUT_S, plain_http=plain_http, environ=environ)
    environ["WARMUP_BUNDLE"] = pinned.name
    log.info("warmup-planner: bundle %s is %s (the registry answered in %.2f s); the node's copy is fetched in "
             "the background", place.name, pinned.digest, time.monotonic() - asked)
    return pinned


def _fetch_in_background(place, timeout_s: float, environ, cache_dir: str | None, plain_http: bool) -> Source:
    from executor.bundle import AlreadyFailed

    cache_dir = cache_dir or _cache_dir()
    source = Source(place.name, place.path(cache_dir), timeout_s)

    def run() -> None:
        try:
            fetched = place.fetch(cache_dir, timeout_s=timeout_s, server=environ.get(SERVER, ""),
                                  plain_http=plain_http, environ=environ)
        except AlreadyFailed as e:  # the process that met it said it
            source.cause, source.said = str(e), True
            return
        except Exception as e:  # noqa: BLE001 - ours: one line, vLLM starts without the bundle
            source.cause = cause_of(e)
            say_not_installed(source)  # here, now: this process may never wait for it
            return
        if fetched.pulled is not None:
            log.info("warmup-planner: bundle %s pulled to %s (%.1f MiB in %.2f s, sha256 checked)",
                     fetched.pulled.reference, fetched.path, fetched.pulled.size / 2**20,
                     time.monotonic() - source.started)
        from .startup import prepare_unless_in_place

        prepare_unless_in_place(fetched.path)  # the members checked while vLLM starts, as for a file bundle

    def timed() -> None:  # beside vLLM's start, in this process's timeline
        with timeline.span("plugin: bundle pull", timeline.PLUGIN, background=True, reference=place.name):
            run()

    source.thread = threading.Thread(target=timed, name="warmup-bundle-pull", daemon=True)
    source.thread.start()
    return source


def _cache_dir() -> str:
    """The node's bundles under vLLM's cache root (where its other caches are)."""
    from .startup import record_dir

    return os.path.join(record_dir(), "warmup_bundles")


def say_not_installed(source: Source) -> None:
    """The one line for the server: the process that met the cause says it."""
    if source.said or not source.cause:
        return
    source.said = True
    log.warning("warmup-planner: bundle %s not installed, vLLM starts without it: %s", source.value, source.cause)
