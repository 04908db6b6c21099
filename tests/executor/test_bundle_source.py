"""WARMUP_BUNDLE in the plugin (vllm_bridge/bundles/source.py), against the CNCF registry on loopback:
the first process pins a tag to its digest and hands it down, the node's copy is fetched once in the
background, and every failure of the registry is one line for the server and a bounded wait, after
which vLLM starts without the bundle."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import time

import pytest

from executor.bundle import oci, oci_ref
from registry_server import PASSWORD, free_port, serve
from test_bundle_oci import make_bundle, push, sha
from vllm_bridge.bundles import source as bundle_source
from vllm_bridge.settings import PluginError, Settings

LOGGER = "vllm.warmup_planner"


@pytest.fixture(params=["open", "basic"])
def registry(request, tmp_path, monkeypatch):
    """The CNCF registry without and with HTTP Basic auth; `server.environ` has the credentials."""
    server = serve(request.param, str(tmp_path), monkeypatch)
    yield server
    server.kill()


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_first_process_pins_a_tag_and_the_node_copy_is_the_pushed_bytes(tmp_path, registry, caplog):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/warmup/llama:v1")
    environ = {**registry.environ, "WARMUP_BUNDLE": f"oci://{registry.address}/warmup/llama:v1"}
    with caplog.at_level(logging.INFO, logger=LOGGER):
        source = bundle_source.start(environ["WARMUP_BUNDLE"], 60, environ, str(tmp_path / "cache"))
        path, waited = source.wait()
    assert environ["WARMUP_BUNDLE"] == str(pushed.reference) and bundle_source.SERVER in environ
    assert path == os.path.join(tmp_path, "cache", "oci", pushed.reference.digest.replace(":", "-") + ".bundle")
    assert sha(path) == sha(bundle) and waited is not None and waited < 30
    lines = [r.getMessage() for r in caplog.records]
    assert re.fullmatch(re.escape(f"warmup-planner: bundle oci://{registry.address}/warmup/llama:v1 is "
                                  f"{pushed.reference.digest} (the registry answered in ") + r"\d+\.\d\d"
                        + re.escape(" s); the node's copy is fetched in the background"), lines[0])
    assert lines[1].startswith(f"warmup-planner: bundle {pushed.reference} pulled to {path} (") and len(lines) == 2


def test_a_child_takes_the_pinned_reference_and_finds_the_node_copy(tmp_path, registry, caplog, monkeypatch):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    push(bundle, f"oci://{registry.address}/w:v1")
    environ = {**registry.environ, "WARMUP_BUNDLE": f"oci://{registry.address}/w:v1"}
    first = bundle_source.start(environ["WARMUP_BUNDLE"], 60, environ, str(tmp_path / "cache"))
    assert first.wait()[0] is not None
    push(tmp_path / "b.warmup", f"oci://{registry.address}/w:v1")  # the same bytes; a child must not ask anyway
    monkeypatch.setattr(oci, "resolve", lambda *a, **k: pytest.fail("a child resolved the tag again"))
    monkeypatch.setattr(oci, "pull", lambda *a, **k: pytest.fail("a child pulled again"))
    child_environ = dict(environ)  # what the engine core and the workers inherit
    with caplog.at_level(logging.INFO, logger=LOGGER):
        child = bundle_source.start(child_environ["WARMUP_BUNDLE"], 60, child_environ, str(tmp_path / "cache"))
        path, _ = child.wait()
    assert path == first.path and caplog.records == []


def test_a_registry_that_is_down_is_one_line_and_the_children_inherit_no_bundle(tmp_path, caplog):
    value = f"oci://127.0.0.1:{free_port()}/w:v1"
    environ = {"WARMUP_BUNDLE": value}
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        source = bundle_source.start(value, 60, environ, str(tmp_path))
        assert source.wait() == (None, None) and source.wait_early() is None
    assert time.monotonic() - started < 10
    [line] = warnings(caplog)
    assert line.startswith(f"warmup-planner: bundle {value} not installed, vLLM starts without it: ")
    assert "cannot be reached" in line and environ["WARMUP_BUNDLE"] == ""
    caplog.clear()
    assert Settings.from_env(environ).bundle is None  # a child: nothing to install, nothing said
    assert bundle_source.for_process(value, 60, environ).wait() == (None, None) and warnings(caplog) == []


def test_a_pull_broken_off_is_said_once_by_the_process_that_met_it(tmp_path, registry, caplog, monkeypatch):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/w:v1")
    monkeypatch.setattr(oci, "LAYER_MEDIA_TYPE", "application/other")  # this pull finds no bundle layer
    environ = {**registry.environ, "WARMUP_BUNDLE": f"oci://{registry.address}/w:v1"}
    with caplog.at_level(logging.INFO, logger=LOGGER):
        first = bundle_source.start(environ["WARMUP_BUNDLE"], 60, environ, str(tmp_path / "cache"))
        first.thread.join(30)
        child = bundle_source.start(environ["WARMUP_BUNDLE"], 60, dict(environ), str(tmp_path / "cache"))
        assert child.wait()[0] is None and first.wait()[0] is None
    [line] = warnings(caplog)
    assert line.startswith(f"warmup-planner: bundle {pushed.reference} not installed") and "not a warmup bundle" in line
    assert not os.path.exists(first.path)


def test_a_pull_that_does_not_finish_gives_up_at_the_timeout(tmp_path, caplog, monkeypatch):
    """A registry that answers the manifest, then never sends the blob (the deadline bounds the wait)."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    manifest = {"layers": [{"mediaType": oci.LAYER_MEDIA_TYPE, "digest": "sha256:" + sha(bundle),
                            "size": bundle.stat().st_size}]}
    pinned = oci_ref.parse(f"oci://127.0.0.1:{free_port()}/w@sha256:" + hashlib.sha256(b"m").hexdigest())
    monkeypatch.setattr(oci, "resolve", lambda ref, **k: (pinned, manifest))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the blob's registry: accepts, never answers
    monkeypatch.setattr(oci, "_client", _client_to(silent.getsockname()[1]))
    environ = {"WARMUP_BUNDLE": f"oci://{pinned.registry}/w:v1"}
    started = time.monotonic()
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER):
            source = bundle_source.start(environ["WARMUP_BUNDLE"], 1.5, environ, str(tmp_path / "cache"))
            path, waited = source.wait()
    finally:
        silent.close()
    assert path is None and time.monotonic() - started < 5 and waited < 5
    [line] = warnings(caplog)
    assert "not installed, vLLM starts without it" in line and ("deadline" in line or "did not answer" in line
                                                                 or "not on this node after" in line)


def _client_to(port: int):
    real = oci._client

    def client(ref, plain_http, environ=os.environ):
        return real(ref._replace(registry=f"127.0.0.1:{port}"), plain_http, environ)
    return client


def test_a_directory_is_the_bundle_it_holds_and_a_file_itself(tmp_path):
    make_bundle(tmp_path / "only.warmup")
    assert bundle_source.start(str(tmp_path)).wait() == (str(tmp_path / "only.warmup"), None)
    assert bundle_source.start(str(tmp_path / "only.warmup")).wait_early() == str(tmp_path / "only.warmup")


def test_an_empty_directory_is_one_line(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert bundle_source.start(str(tmp_path)).wait() == (None, None)
    [line] = warnings(caplog)
    assert "a bundle directory must hold one warmup bundle; it holds no warmup bundle" in line


def test_a_bad_reference_is_one_line(caplog):
    environ = {"WARMUP_BUNDLE": "oci://registry.example/Upper"}
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert bundle_source.start(environ["WARMUP_BUNDLE"], 60, environ).wait() == (None, None)
    [line] = warnings(caplog)
    assert "oci://registry.example/Upper: not a valid WARMUP_BUNDLE: its repository 'Upper'" in line and environ["WARMUP_BUNDLE"] == ""


@pytest.mark.parametrize("value", ["0", "-3", "soon", "inf"])
def test_a_pull_timeout_that_is_no_number_of_seconds_is_refused(value):
    with pytest.raises(PluginError, match="WARMUP_BUNDLE_PULL_TIMEOUT_S must be a positive number of seconds"):
        Settings.from_env({"WARMUP_BUNDLE": "x", "WARMUP_BUNDLE_PULL_TIMEOUT_S": value})
    assert Settings.from_env({"WARMUP_BUNDLE_PULL_TIMEOUT_S": "30"}).pull_timeout_s == 30.0


def test_one_source_per_process_and_value_and_none_is_no_bundle(tmp_path, monkeypatch):
    """A process's sources are kept by value: a start without WARMUP_BUNDLE after one with it (tests,
    an offline LLM made twice) gets no bundle, not the earlier one's."""
    make_bundle(tmp_path / "b.warmup")
    monkeypatch.setattr(bundle_source, "_STARTED", {})
    assert bundle_source.for_process(str(tmp_path / "b.warmup"), 60, {}).wait()[0] == str(tmp_path / "b.warmup")
    assert bundle_source.for_process(None, 60, {}).wait() == (None, None)
    assert bundle_source.for_process(str(tmp_path / "b.warmup"), 60, {}) is bundle_source.for_process(
        str(tmp_path / "b.warmup"), 60, {})


def test_a_fetch_that_cannot_start_is_one_line_not_a_stopped_vllm(tmp_path, registry, caplog, monkeypatch):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    push(bundle, f"oci://{registry.address}/w:v1")
    monkeypatch.setattr(bundle_source, "_cache_dir", lambda: (_ for _ in ()).throw(OSError(30, "Read-only file system")))
    environ = {**registry.environ, "WARMUP_BUNDLE": f"oci://{registry.address}/w:v1"}
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert bundle_source.start(environ["WARMUP_BUNDLE"], 60, environ).wait() == (None, None)
    [line] = warnings(caplog)
    assert "not installed, vLLM starts without it: OSError: [Errno 30] Read-only file system" in line


@pytest.fixture
def basic_registry(tmp_path, monkeypatch):
    server = serve("basic", str(tmp_path), monkeypatch)
    yield server
    server.kill()


def test_credentials_the_registry_refuses_are_one_line_that_says_so(tmp_path, basic_registry, caplog):
    registry = basic_registry
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    push(bundle, f"oci://{registry.address}/w:v1")
    environ = {**registry.environ, "ORAS_PASS": PASSWORD + "-wrong", "WARMUP_BUNDLE": f"oci://{registry.address}/w:v1"}
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert bundle_source.start(environ["WARMUP_BUNDLE"], 60, environ, str(tmp_path / "cache")).wait() == (None, None)
    [line] = warnings(caplog)
    assert "not installed, vLLM starts without it" in line and f"authentication failed: {registry.address} refused" in line
    assert "UNAUTHORIZED" in line and "user 'alice' from ORAS_USER/ORAS_PASS" in line and "cannot be reached" not in line
