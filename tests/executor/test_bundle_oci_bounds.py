"""The OCI client's bounds and promises, each made to bite (issue 55 item 6: a mutation pass over
executor/bundle/oci.py, oci_ref.py, cli_registry.py, sources/ and vllm_bridge/bundles/source.py).

Each test checks what a user or a node sees (an exit code, a line, a time bound, a digest refused,
the bytes a registry holds), against the CNCF registry on loopback without and with HTTP Basic auth
(registry_server.py), or, for what no real registry does (never accepting a connection, never
answering), against a socket that does just that."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import socket
import threading
import time

import pytest

import registry_server
from executor.bundle import oci, oci_ref
from planner.errors import PlanError
from registry_server import RegistryServer, serve
from test_bundle_oci import make_bundle, push, run_cli, sha


REGISTRY_LIMIT = 4 << 20  # the distribution registry's limit on a manifest: it serves no larger one (HTTP 500)


@pytest.fixture(params=["open", "basic"])
def registry(request, tmp_path, monkeypatch):
    """The CNCF registry without and with HTTP Basic auth (htpasswd)."""
    server = serve(request.param, str(tmp_path), monkeypatch)
    yield server
    server.kill()


def fetch(ref: oci_ref.Reference, path: str) -> bytes:
    """What the registry serves at one of its /v2/ paths (through the client's own auth)."""
    client, _ = oci._client(ref, False)
    response = oci._request(client, "GET", f"{ref.registry}/v2/{ref.repository}/{path}", time.monotonic() + 30,
                            headers={"Accept": oci.MANIFEST_MEDIA_TYPE})
    assert response.status_code == 200, response.status_code
    return response.content


# --- what is pushed ---------------------------------------------------------------------------------

def test_the_pushed_artifact_is_what_its_manifest_says(tmp_path, registry):
    """Another tool (oras, containerd, a registry's garbage collector) reads the config and the layer by
    the manifest's descriptors: each names the bytes the registry holds, size and digest."""
    bundle = tmp_path / "llama.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/warmup/llama:v1")
    manifest = json.loads(fetch(pushed.reference, f"manifests/{pushed.reference.digest}"))
    assert manifest["artifactType"] == oci.ARTIFACT_TYPE and manifest["mediaType"] == oci.MANIFEST_MEDIA_TYPE
    config = fetch(pushed.reference, f"blobs/{manifest['config']['digest']}")
    assert config == b"{}" and manifest["config"]["size"] == len(config)
    assert manifest["config"]["digest"] == "sha256:" + hashlib.sha256(config).hexdigest()
    [layer] = manifest["layers"]
    blob = fetch(pushed.reference, f"blobs/{layer['digest']}")
    assert blob == bundle.read_bytes() and layer["size"] == len(blob) == pushed.size
    assert layer["annotations"] == {"org.opencontainers.image.title": "llama.warmup"}


# --- what is pulled: the manifest's bound -----------------------------------------------------------

def test_a_manifest_at_the_limit_is_pulled(tmp_path, registry):
    """The registry's own limit is ours: a manifest of MANIFEST_LIMIT bytes (its JSON padded with
    spaces in the registry's storage, the tag still naming it) is pulled."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/w:v1")
    stored = registry.blob_file(pushed.reference.digest)
    body = open(stored, "rb").read()
    with open(stored, "wb") as f:
        f.write(body + b" " * (REGISTRY_LIMIT - len(body)))
    pulled = oci.pull(oci_ref.parse(f"oci://{registry.address}/w:v1"), str(tmp_path / "p.warmup"))
    assert sha(tmp_path / "p.warmup") == sha(bundle) and pulled.size == bundle.stat().st_size


def serving(handler_class):
    """A loopback HTTP server with `handler_class` (a registry that misbehaves as no real one does);
    its address, and a stop function."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop():
        server.shutdown()
        server.server_close()
    return f"127.0.0.1:{server.server_address[1]}", stop


def test_a_manifest_over_the_limit_is_refused(tmp_path):
    """A registry (not the CNCF one, which will not serve it) answering a manifest one byte over the
    limit: refused as the input it is (exit 2's PlanError), no blob asked for, nothing written."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    body = oci.artifact_manifest("sha256:" + sha(bundle), bundle.stat().st_size, "b.warmup", {})
    body += b" " * (REGISTRY_LIMIT + 1 - len(body))
    asked = []

    class Oversized(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            asked.append(self.path)
            data = body if "/manifests/" in self.path else bundle.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    address, stop = serving(Oversized)
    try:
        with pytest.raises(PlanError, match=f"refused: its manifest is {REGISTRY_LIMIT + 1} bytes"):
            oci.pull(oci_ref.parse(f"oci://{address}/w:v1"), str(tmp_path / "p.warmup"))
    finally:
        stop()
    assert asked == ["/v2/w/manifests/v1"] and not (tmp_path / "p.warmup").exists()


# --- time bounds ------------------------------------------------------------------------------------

def test_a_deadline_already_spent_sends_nothing_and_writes_nothing(tmp_path, registry):
    """Every request asks the deadline first: a loopback registry answers in a millisecond, and still
    no request goes out once the time is up."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/w:v1")
    with pytest.raises(oci.RegistryError, match="gave up at the deadline"):
        oci.pull(pushed.reference, str(tmp_path / "p.warmup"), timeout_s=1e-9)
    with pytest.raises(oci.RegistryError, match="gave up at the deadline"):
        oci.push(str(bundle), oci_ref.parse(f"oci://{registry.address}/w:v2"), {}, timeout_s=1e-9)
    assert not (tmp_path / "p.warmup").exists()
    with pytest.raises(oci.RegistryError, match="not in the registry"):
        oci.resolve(oci_ref.parse(f"oci://{registry.address}/w:v2"))  # the push sent nothing


def test_a_registry_that_never_answers_is_given_up_on_at_the_callers_deadline(tmp_path):
    """READ_TIMEOUT_S (30 s) bounds one read; a deadline shorter than it bounds the read too."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections, never answers
    ref = oci_ref.parse(f"oci://127.0.0.1:{silent.getsockname()[1]}/w:v1")
    started = time.monotonic()
    try:
        with pytest.raises(oci.RegistryError, match="did not answer in time"):
            oci.pull(ref, str(tmp_path / "p.warmup"), timeout_s=1.5)
    finally:
        silent.close()
    assert time.monotonic() - started < 6
    assert os.listdir(tmp_path) == []


def test_a_registry_that_never_accepts_the_connection_is_given_up_on_after_the_connect_timeout(tmp_path):
    """A full accept queue (a registry's host overloaded, a firewall that drops): the connection never
    completes; the pull gives up after CONNECT_TIMEOUT_S (5 s), not at the transfer's deadline."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    queued = socket.create_connection(full.getsockname(), timeout=5)  # the one the queue holds: the next waits
    ref = oci_ref.parse(f"oci://127.0.0.1:{full.getsockname()[1]}/w:v1")
    started = time.monotonic()
    try:
        with pytest.raises(oci.RegistryError, match="cannot be reached"):
            oci.pull(ref, str(tmp_path / "p.warmup"), timeout_s=60)
    finally:
        queued.close()
        full.close()
    assert oci.CONNECT_TIMEOUT_S - 0.5 < time.monotonic() - started < 15
    assert os.listdir(tmp_path) == []


# --- --plain-http: a registry that is not named as loopback ------------------------------------------

class OtherLoopback(RegistryServer):
    """The registry on 127.0.0.2: reachable here, but not one of the names spoken to in plain HTTP
    unasked (oci_ref._LOOPBACK), as a registry on a private network without TLS."""

    @property
    def address(self) -> str:
        return f"127.0.0.2:{self.port}"


@pytest.fixture(params=["open", "basic"])
def plain_registry(request, tmp_path, monkeypatch):
    monkeypatch.setattr(registry_server, "CONFIG", registry_server.CONFIG.replace("127.0.0.1", "127.0.0.2"))
    monkeypatch.setattr(registry_server, "RegistryServer", OtherLoopback)
    server = serve(request.param, str(tmp_path), monkeypatch)
    yield server
    server.kill()


def test_plain_http_is_spoken_where_asked_and_tls_elsewhere(tmp_path, plain_registry):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    ref = f"oci://{plain_registry.address}/w:v1"
    assert not oci_ref.parse(ref).plain_http()
    tls = run_cli("push", str(bundle), ref, "--timeout", "20")  # HTTPS to a server speaking HTTP
    assert tls.returncode == 1 and tls.stdout == "" and tls.stderr.count("\n") == 1, tls.stderr
    assert tls.stderr.startswith(f"warmup: error: HEAD {plain_registry.address}/v2/w/blobs/sha256:"), tls.stderr
    pushed = run_cli("push", str(bundle), ref, "--plain-http")
    assert pushed.returncode == 0, pushed.stderr
    pulled = run_cli("pull", ref, "-o", str(tmp_path / "p.warmup"), "--plain-http")
    assert (pulled.returncode, pulled.stdout) == (0, pushed.stdout), pulled.stderr
    assert sha(tmp_path / "p.warmup") == sha(bundle)
    refused = run_cli("pull", ref, "-o", str(tmp_path / "q.warmup"))
    assert refused.returncode == 1 and not (tmp_path / "q.warmup").exists(), refused.stderr


def test_a_registry_that_stalls_mid_blob_is_said_as_such(tmp_path, monkeypatch):
    """The blob's headers and its first bytes, then silence: the read times out (urllib3's own
    ReadTimeoutError, not requests'), said as the registry not answering, after the bytes it sent."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    body = oci.artifact_manifest("sha256:" + sha(bundle), bundle.stat().st_size, "b.warmup", {})
    release = threading.Event()

    class Stalls(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            data = body if "/manifests/" in self.path else bundle.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data if "/manifests/" in self.path else data[:1000])
            self.wfile.flush()
            if "/blobs/" in self.path:
                release.wait(30)

        def log_message(self, *args):
            pass

    monkeypatch.setattr(oci, "READ_TIMEOUT_S", 0.5)
    address, stop = serving(Stalls)
    started = time.monotonic()
    try:
        with pytest.raises(oci.RegistryError) as caught:
            oci.pull(oci_ref.parse(f"oci://{address}/w:v1"), str(tmp_path / "p.warmup"), timeout_s=20)
    finally:
        release.set()
        stop()
    assert str(caught.value) == (f"GET {address}/v2/w/blobs/sha256:{sha(bundle)}: broken off after 1000 bytes: "
                                 "the registry did not answer in time")
    assert time.monotonic() - started < 5 and not (tmp_path / "p.warmup").exists()


def test_a_manifest_without_end_is_refused_after_the_limit_not_held_whole(tmp_path):
    """A registry that streams a manifest with no Content-Length and no end: refused once the body
    passes the registry limit, having read no more than a chunk beyond it."""
    sent = []

    class Endless(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            piece = b"{" * 65536
            try:
                for _ in range(10_000):  # 640 MiB unless the client stops reading
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    sent.append(len(piece))
            except OSError:
                pass

        def log_message(self, *args):
            pass

    address, stop = serving(Endless)
    try:
        with pytest.raises(PlanError, match=f"refused: its manifest is over {oci.MANIFEST_LIMIT} bytes"):
            oci.pull(oci_ref.parse(f"oci://{address}/w:v1"), str(tmp_path / "p.warmup"), timeout_s=20)
    finally:
        stop()
    assert sum(sent) < 64 * oci.MANIFEST_LIMIT and not (tmp_path / "p.warmup").exists()


# --- what the registry refuses, and what it is not asked ------------------------------------------------

def test_the_same_bundle_and_annotations_in_any_order_have_one_digest(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    annotations = {oci.ANNOTATION_BUNDLE: "sha256:b", oci.ANNOTATION_PLAN: "sha256:p", oci.ANNOTATION_FINGERPRINT: "{}"}
    first = oci.push(str(bundle), oci_ref.parse(f"oci://{registry.address}/w:a"), annotations)
    again = oci.push(str(bundle), oci_ref.parse(f"oci://{registry.address}/w:b"), dict(reversed(annotations.items())))
    assert first.reference.digest == again.reference.digest


def test_a_push_without_a_tag_makes_no_tag(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/untagged")
    oci.pull(pushed.reference, str(tmp_path / "p.warmup"))
    assert push(bundle, f"oci://{registry.address}/untagged:v1").reference.digest == pushed.reference.digest
    assert json.loads(fetch(pushed.reference, "tags/list"))["tags"] == ["v1"]  # the tag asked for, and no other
    assert sha(tmp_path / "p.warmup") == sha(bundle)


READ_ONLY = "  maintenance:\n    readonly:\n      enabled: true\n  delete:\n"


def test_a_registry_that_refuses_the_write_is_one_line_exit_1(tmp_path, registry, monkeypatch):
    """The registry in read-only maintenance (its uploads and manifest writes answered 405): a push of
    a bundle it holds already sends no upload, and the refused manifest is the line; a new bundle's
    refused upload is the line; nothing is said pushed, and pulls still work."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    push(bundle, f"oci://{registry.address}/w:v1")
    registry.kill()
    monkeypatch.setattr(registry_server, "CONFIG", registry_server.CONFIG.replace("  delete:\n", READ_ONLY))
    read_only = RegistryServer(registry.workdir, port=registry.port, auth=registry.auth).start()
    try:
        known = run_cli("push", str(bundle), f"oci://{registry.address}/w:v2")
        make_bundle(tmp_path / "new.warmup", seed=7)
        new = run_cli("push", str(tmp_path / "new.warmup"), f"oci://{registry.address}/w:v3")
        pulled = run_cli("pull", f"oci://{registry.address}/w:v1", "-o", str(tmp_path / "p.warmup"))
    finally:
        read_only.kill()
    assert (known.returncode, known.stdout, known.stderr) == (
        1, "", f"warmup: error: PUT {registry.address}/v2/w/manifests/v2: HTTP 405\n")
    assert (new.returncode, new.stdout, new.stderr) == (
        1, "", f"warmup: error: POST {registry.address}/v2/w/blobs/uploads/: HTTP 405\n")
    assert pulled.returncode == 0 and sha(tmp_path / "p.warmup") == sha(bundle), pulled.stderr


def test_a_blob_the_registry_finds_not_matching_its_digest_is_refused_not_pushed(tmp_path, registry, monkeypatch):
    """The file changed between its hashing and its upload (here: its hash misread): the registry
    refuses the upload (DIGEST_INVALID), and the push says so at the blob, not at a later step."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    real = oci.archive.sha256_file
    monkeypatch.setattr(oci.archive, "sha256_file", lambda path, stat=False: ("0" * 64, real(path, stat=True)[1]))
    with pytest.raises(oci.RegistryError) as caught:
        push(bundle, f"oci://{registry.address}/w:v1")
    assert str(caught.value).startswith(f"PUT blob sha256:{'0' * 64}: HTTP 400 (DIGEST_INVALID"), str(caught.value)
    with pytest.raises(oci.RegistryError, match="not in the registry"):
        oci.resolve(oci_ref.parse(f"oci://{registry.address}/w:v1"))


def test_the_api_speaks_tls_unless_asked_or_loopback_named(tmp_path, plain_registry):
    """oci.push, oci.resolve and oci.pull default to TLS for a registry not named as loopback."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    ref = oci_ref.parse(f"oci://{plain_registry.address}/w:v1")
    with pytest.raises(oci.RegistryError):
        oci.push(str(bundle), ref, {}, timeout_s=10)
    pushed = oci.push(str(bundle), ref, {}, plain_http=True)
    for call in (lambda **k: oci.resolve(ref, **k), lambda **k: oci.pull(ref, str(tmp_path / "p.warmup"), **k)):
        with pytest.raises(oci.RegistryError):
            call(timeout_s=10)
        assert not (tmp_path / "p.warmup").exists()
        assert call(plain_http=True)[0].digest == pushed.reference.digest
    assert sha(tmp_path / "p.warmup") == sha(bundle)


def test_a_manifest_the_registry_cannot_serve_is_its_error_exit_1(tmp_path, registry):
    """The registry answers 500 (here: a stored manifest over its own limit, which it will not
    serve): the registry's failure (exit 1), not its error document read as a manifest (exit 2)."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/w:v1")
    stored = registry.blob_file(pushed.reference.digest)
    body = open(stored, "rb").read()
    with open(stored, "wb") as f:
        f.write(body + b" " * (REGISTRY_LIMIT + 1 - len(body)))
    done = run_cli("pull", f"oci://{registry.address}/w:v1", "-o", str(tmp_path / "p.warmup"))
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr == f"warmup: error: GET {registry.address}/v2/w/manifests/v1: HTTP 500 (UNKNOWN: unknown error)\n"
    assert not (tmp_path / "p.warmup").exists()


REF = oci_ref.parse("oci://registry.example/w@sha256:" + "a" * 64)
LAYER = {"mediaType": oci.LAYER_MEDIA_TYPE, "digest": "sha256:" + "b" * 64, "size": 10}


@pytest.mark.parametrize("manifest, why", [
    ({"layers": None}, "not a warmup bundle artifact (layers: none;"),
    ({"mediaType": oci.INDEX_MEDIA_TYPES[0], "manifests": []}, "it names an image index (a manifest per platform)"),
    ({"manifests": [{"digest": "sha256:" + "c" * 64}], "layers": [LAYER]}, "it names an image index"),
    ({"layers": ["a string", 3, LAYER]}, None),  # what is no descriptor is passed over
    ({"layers": [LAYER, dict(LAYER)]}, f"not a warmup bundle artifact (layers: {oci.LAYER_MEDIA_TYPE};"),
    ({"layers": [{**LAYER, "size": "10"}]}, "its bundle layer has no sha256 digest and size"),
    ({"layers": [{**LAYER, "digest": "md5:" + "b" * 32}]}, "its bundle layer has no sha256 digest and size"),
    ({"layers": [{k: v for k, v in LAYER.items() if k != "digest"}]}, "its bundle layer has no sha256 digest and size"),
    ({"layers": [{k: v for k, v in LAYER.items() if k != "size"}]}, "its bundle layer has no sha256 digest and size"),
])
def test_a_manifest_whose_layers_are_no_bundle_layer_is_one_line(manifest, why):
    """What a registry's manifest can hold (any JSON): one bundle layer with a sha256 digest and an
    integer size, or a PlanError naming the reference, never a crash."""
    if why is None:
        assert oci.bundle_layer(REF, manifest) == LAYER
        return
    with pytest.raises(PlanError) as caught:
        oci.bundle_layer(REF, manifest)
    assert why in caught.value.message and caught.value.file == str(REF)


def test_a_blob_the_registry_lost_is_its_error_and_nothing_written(tmp_path, registry):
    """The manifest is there, its layer's blob is not (garbage-collected, a storage fault): the
    registry's answer, exit 1, not its error document taken for the blob."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/w:v1")
    os.unlink(registry.blob_file(pushed.blob_digest))
    done = run_cli("pull", str(pushed.reference), "-o", str(tmp_path / "p.warmup"))
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.startswith(f"warmup: error: GET {registry.address}/v2/w/blobs/{pushed.blob_digest}: HTTP 404"), done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "p.warmup").exists()


# --- references ---------------------------------------------------------------------------------------

def test_a_reference_without_tag_or_digest_names_latest(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/w:latest")
    pulled = oci.pull(oci_ref.parse(f"oci://{registry.address}/w"), str(tmp_path / "p.warmup"))
    assert pulled.reference.digest == pushed.reference.digest and sha(tmp_path / "p.warmup") == sha(bundle)
    assert str(pulled.reference) == f"oci://{registry.address}/w@{pushed.reference.digest}"


@pytest.mark.parametrize("registry_name, plain", [
    ("[::1]", True), ("[::1]:5000", True), ("localhost", True), ("127.0.0.1:5000", True),
    ("[2001:db8::1]:5000", False), ("localhost.example:5000", False), ("127.0.0.2:5000", False),
])
def test_only_loopback_names_speak_plain_http_unasked(registry_name, plain):
    ref = oci_ref.parse(f"oci://{registry_name}/w:v1")
    assert ref.plain_http() is plain
    client, _ = oci._client(ref, False)
    assert client.prefix == ("http" if plain else "https")


# --- the command line ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e400"])
def test_a_timeout_that_is_no_positive_finite_number_is_refused_exit_2(tmp_path, value):
    from executor.bundle.cli_registry import seconds

    with pytest.raises(Exception, match="must be a positive number of seconds"):
        seconds(value)
    assert seconds("0.5") == 0.5 and seconds("600") == 600.0


def test_the_cli_says_what_it_pushed_and_pulled(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    manifest = make_bundle(bundle, size=3 << 20)
    pushed = run_cli("push", str(bundle), f"oci://{registry.address}/w:v1")
    ref = pushed.stdout.strip()
    assert pushed.stderr == f"pushed {bundle} (3.0 MiB, bundle {manifest.digest()[:12]}) as {ref}\n", pushed.stderr
    pulled = run_cli("pull", f"oci://{registry.address}/w:v1", "-o", str(tmp_path / "p.warmup"), "--timeout", "60")
    assert pulled.stdout == f"{ref}\n"
    assert pulled.stderr == f"pulled {ref} into {tmp_path / 'p.warmup'} (3.0 MiB, sha256 checked)\n", pulled.stderr


def test_pull_without_an_output_is_a_usage_error_exit_2(tmp_path):
    done = run_cli("pull", "oci://127.0.0.1:1/w:v1")
    assert done.returncode == 2 and "the following arguments are required: -o/--output" in done.stderr, done.stderr
    assert os.listdir(tmp_path) == []


def test_the_fingerprint_annotation_is_sorted_whatever_the_bundles_order():
    from executor.bundle.archive import FORMAT, Manifest
    from executor.bundle.cli_registry import annotations_of

    def of(fingerprint):
        return annotations_of(Manifest(FORMAT, "vllm-0.25-plugin", "e", "sha256:p", fingerprint, [], [], {}))

    forward = of({"gpu": "NVIDIA H200", "torch": "2.11.0"})
    assert forward[oci.ANNOTATION_FINGERPRINT] == '{"gpu":"NVIDIA H200","torch":"2.11.0"}'
    assert of({"torch": "2.11.0", "gpu": "NVIDIA H200"})[oci.ANNOTATION_FINGERPRINT] == forward[oci.ANNOTATION_FINGERPRINT]


@pytest.mark.parametrize("text", ["oci://ghcr.io", "oci://bad_host/w:v1", "oci://host:port/w"])
def test_a_reference_whose_registry_is_missing_or_no_host_is_refused(text):
    with pytest.raises(PlanError, match="it must start with the registry's host"):
        oci_ref.parse(text)


def test_a_blob_longer_than_its_manifest_says_is_refused_nothing_written(tmp_path, registry):
    """A manifest naming the right blob with too small a size (the registry accepts it): the pull reads
    no further than the size and one chunk, refuses the blob, names both sizes and digests."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/w:v1")
    size = bundle.stat().st_size
    client, container = oci._client(pushed.reference, False)
    body = oci.artifact_manifest(pushed.blob_digest, size - 10, "b.warmup", {})
    put = oci._request(client, "PUT", container.manifest_url("short"), time.monotonic() + 30, data=body,
                       headers={"Content-Type": oci.MANIFEST_MEDIA_TYPE})
    assert put.status_code == 201, put.text
    ref = oci_ref.parse(f"oci://{registry.address}/w:short")
    with pytest.raises(PlanError) as caught:
        oci.pull(ref, str(tmp_path / "p.warmup"))
    said = re.fullmatch(r"refused: the registry's blob is over (\d+) bytes with sha256 [0-9a-f]{12}\.\.\., the manifest "
                        + re.escape(f"names {size - 10} bytes {pushed.blob_digest[7:19]}... (a tampered or corrupted blob)"),
                        caught.value.message)
    assert said and size - 10 < int(said.group(1)) <= size, caught.value.message
    assert not (tmp_path / "p.warmup").exists()
