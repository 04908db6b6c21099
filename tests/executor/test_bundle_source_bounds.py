"""Where a bundle comes from (executor/bundle/sources/, vllm_bridge/bundles/source.py), each promise
made to bite (issue 55 item 6's mutation pass): the node's pull lock and the caller's deadline bound
every wait, a mounted directory's hidden entries are not bundles, a failed pull's mark is read back by
the server's other processes, and the plugin's source honours WARMUP_REGISTRY_PLAIN_HTTP."""

from __future__ import annotations

import fcntl
import os
import socket
import time

import pytest

from executor.bundle import oci, oci_ref
from executor.bundle.sources import AlreadyFailed, directory, oci as sources
from planner.errors import PlanError
from test_bundle_oci import make_bundle, push, sha
from test_bundle_oci_bounds import plain_registry, registry  # noqa: F401 - fixtures

PINNED = "oci://127.0.0.1:{port}/w@sha256:" + "3" * 64


def test_a_pull_lock_held_past_the_deadline_is_one_line_and_no_pull(tmp_path, monkeypatch):
    """Another process holds the node's pull lock (its pull is slow): this one waits until its own
    deadline, then says so, without asking the registry."""
    ref = oci_ref.parse(PINNED.format(port=1))
    path = sources.node_path(ref, str(tmp_path))
    os.makedirs(os.path.dirname(path))
    monkeypatch.setattr(oci, "pull", lambda *a, **k: pytest.fail("pulled while another process held the lock"))
    with open(path + ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises(oci.RegistryError, match="another process's pull did not finish by the deadline"):
            sources.fetch_once(ref, str(tmp_path), timeout_s=0.5, server="s1")
        assert 0.5 <= time.monotonic() - started < 3
    assert not os.path.exists(path)


def test_the_lock_is_given_back_after_a_failed_pull(tmp_path):
    """A pull that failed leaves the lock free: the next asker (another server) is not kept waiting."""
    ref = oci_ref.parse(PINNED.format(port=1))
    for server in ("s1", "s2"):
        started = time.monotonic()
        with pytest.raises(oci.RegistryError, match="cannot be reached"):
            sources.fetch_once(ref, str(tmp_path), timeout_s=10, server=server)
        assert time.monotonic() - started < 5


def test_the_pull_gets_what_is_left_of_the_callers_deadline(tmp_path):
    """fetch_once's timeout bounds the pull it makes (a registry that accepts and never answers,
    whose read timeout is 30 s)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    ref = oci_ref.parse(PINNED.format(port=silent.getsockname()[1]))
    started = time.monotonic()
    try:
        with pytest.raises(oci.RegistryError, match="did not answer in time|gave up at the deadline"):
            sources.fetch_once(ref, str(tmp_path), timeout_s=1.5, server="s1")
    finally:
        silent.close()
    assert time.monotonic() - started < 6


def test_a_failed_pulls_mark_is_the_cause_the_other_processes_give(tmp_path):
    ref = oci_ref.parse(PINNED.format(port=1))
    with pytest.raises(oci.RegistryError) as first:
        sources.fetch_once(ref, str(tmp_path), timeout_s=10, server="s1")
    with pytest.raises(AlreadyFailed) as again:
        sources.fetch_once(ref, str(tmp_path), timeout_s=10, server="s1")
    assert str(again.value) == str(first.value)
    mark = sources.node_path(ref, str(tmp_path))[:-len(".bundle")] + ".s1.failed"
    with open(mark, "w"):
        pass  # a mark whose cause was not written (a full disk)
    with pytest.raises(AlreadyFailed, match="^an earlier pull of this server failed$"):
        sources.fetch_once(ref, str(tmp_path), timeout_s=10, server="s1")


def test_a_node_copy_needs_a_pinned_reference(tmp_path):
    with pytest.raises(ValueError, match="is not pinned to a digest"):
        sources.node_path(oci_ref.parse("oci://127.0.0.1:1/w:v1"), str(tmp_path))
    pinned = oci_ref.parse(PINNED.format(port=1))
    assert sources.node_path(pinned, str(tmp_path)) == os.path.join(str(tmp_path), "oci", "sha256-" + "3" * 64 + ".bundle")


def test_a_mounted_directorys_hidden_entries_and_subdirectories_are_not_its_bundle(tmp_path):
    """Kubernetes mounts a volume with hidden entries of its own (`..data`, timestamped directories):
    a bundle under a hidden name, or a directory named like a bundle, is not the volume's bundle."""
    volume = tmp_path / "volume"
    volume.mkdir()
    make_bundle(volume / "llama.warmup")
    make_bundle(volume / ".llama.warmup.old", seed=1)
    (volume / "..2026_01_01").mkdir()
    (volume / "other.warmup").mkdir()
    assert directory.bundle_in(str(volume)) == str(volume / "llama.warmup")
    os.unlink(volume / "llama.warmup")
    with pytest.raises(PlanError, match="it holds no warmup bundle"):
        directory.bundle_in(str(volume))


def test_the_plugin_speaks_plain_http_where_the_environment_asks(tmp_path, plain_registry):
    """WARMUP_REGISTRY_PLAIN_HTTP=1 (read by the plugin's Settings) reaches a registry without TLS that
    is not named loopback; without it the source speaks TLS and vLLM starts without the bundle, whatever
    the environment the source is handed says (Settings is its one reader)."""
    from vllm_bridge.bundles import source as bundle_source
    from vllm_bridge.settings import PluginError, Settings

    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = oci.push(str(bundle), oci_ref.parse(f"oci://{plain_registry.address}/w:v1"), {}, plain_http=True)
    value = f"oci://{plain_registry.address}/w:v1"
    for flag in (None, "0", "off", ""):
        tls = {**plain_registry.environ, "WARMUP_BUNDLE": value}
        if flag is not None:
            tls["WARMUP_REGISTRY_PLAIN_HTTP"] = flag
        assert not Settings.from_env(tls).registry_plain_http, flag
    tls = {**plain_registry.environ, "WARMUP_BUNDLE": value, "WARMUP_REGISTRY_PLAIN_HTTP": "1"}
    assert bundle_source.start(value, 20, tls, str(tmp_path / "tls")).wait() == (None, None)  # not asked: TLS
    for flag in ("1", "true", "yes", "on", " ON "):
        environ = {**plain_registry.environ, "WARMUP_BUNDLE": value, "WARMUP_REGISTRY_PLAIN_HTTP": flag}
        settings = Settings.from_env(environ)
        path, _ = bundle_source.start(value, 60, environ, str(tmp_path / f"cache-{flag.strip()}"),
                                      plain_http=settings.registry_plain_http).wait()
        assert path is not None and sha(path) == sha(bundle), flag
        assert environ["WARMUP_BUNDLE"] == str(pushed.reference)
    with pytest.raises(PluginError) as e:
        Settings.from_env({"WARMUP_REGISTRY_PLAIN_HTTP": "maybe"})
    assert str(e.value) == "warmup-planner: WARMUP_REGISTRY_PLAIN_HTTP must be 1 or 0, got 'maybe'"


def test_a_child_installs_the_digest_its_server_pinned_even_after_the_tag_moved(tmp_path, registry, monkeypatch):
    """vLLM's engine core and workers inherit WARMUP_BUNDLE pinned by the API server: a child asking
    for the tag gets the pinned bytes, though the tag names another bundle by then; where the server
    found none (WARMUP_BUNDLE=""), the child has none and says nothing."""
    from vllm_bridge.bundles import source as bundle_source

    first, second = tmp_path / "1.warmup", tmp_path / "2.warmup"
    make_bundle(first, seed=1)
    make_bundle(second, seed=2)
    pinned = push(first, f"oci://{registry.address}/w:v1")
    tag = f"oci://{registry.address}/w:v1"
    environ = {**registry.environ, "WARMUP_BUNDLE": tag}
    monkeypatch.setattr(bundle_source, "_STARTED", {})
    server = bundle_source.for_process(tag, 60, environ)
    assert sha(server.wait()[0]) == sha(first) and environ["WARMUP_BUNDLE"] == str(pinned.reference)
    push(second, tag)  # the tag moves
    child_environ = dict(environ)
    monkeypatch.setattr(bundle_source, "_STARTED", {})  # a child process: nothing started there yet
    child = bundle_source.for_process(tag, 60, child_environ)
    path, _ = child.wait()
    assert child.value == str(pinned.reference) and sha(path) == sha(first)
    assert bundle_source.for_process(str(pinned.reference), 60, child_environ) is child  # either name, one source
    monkeypatch.setattr(bundle_source, "_STARTED", {})
    none = bundle_source.for_process(tag, 60, {**environ, "WARMUP_BUNDLE": ""})
    assert none.wait() == (None, None) and none.cause is None


def test_a_pull_that_hangs_is_waited_for_no_longer_than_the_timeout(tmp_path, monkeypatch, caplog):
    """A fetch stuck beyond every bound of its own (here: oci.pull never returning): load_model's wait
    ends at the source's timeout, counted from its start, with one line naming it."""
    import logging
    import threading

    from vllm_bridge.bundles import source as bundle_source

    ref = oci_ref.parse(PINNED.format(port=1))
    stuck = threading.Event()
    monkeypatch.setattr(oci, "pull", lambda *a, **k: stuck.wait(30) and None)
    environ = {"WARMUP_BUNDLE": str(ref), bundle_source.SERVER: "s1"}
    try:
        with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
            source = bundle_source.start(str(ref), 1.0, environ, str(tmp_path))
            assert source.local_path() is None  # the pull goes on: no file yet
            time.sleep(0.5)
            began = time.monotonic()
            assert source.wait()[0] is None
            assert time.monotonic() - began < 1.0  # what was left of the 1 s, not 1 s more
    finally:
        stuck.set()
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.endswith("not on this node after 1 s (WARMUP_BUNDLE_PULL_TIMEOUT_S)")
