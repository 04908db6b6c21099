"""Bundles through a real OCI registry (the CNCF distribution registry, Debian's docker-registry, on
loopback: tests/executor/registry_server.py): push and pull by tag and digest, bit-identical; a
tampered blob, a tampered manifest and a wrong digest refused; a registry that goes away mid-pull
or is not there at all is one line, no file and no leftover, within the deadline; the node's copy
pulled once by whichever process comes first (executor/bundle/sources/oci.py)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from executor.bundle import archive, oci, oci_auth, oci_ref, sources
from executor.bundle.sources import directory, oci as oci_source
from executor.bundle.archive import FORMAT, FileRecord, Manifest
from planner.errors import PlanError
from registry_server import RegistryServer, free_port, serve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(params=["open", "basic"])
def registry(request, tmp_path, monkeypatch):
    """The CNCF registry without and with HTTP Basic auth (htpasswd): every test of it runs against both."""
    server = serve(request.param, str(tmp_path), monkeypatch)
    yield server
    server.kill()


def make_bundle(path, size: int = 1 << 16, seed: int = 0, plan_digest: str = "sha256:plan") -> Manifest:
    """A small real bundle: one Triton member of incompressible bytes (so the blob is `size`-ish)."""
    data = hashlib.shake_256(f"member {seed}".encode()).digest(size)
    src = f"{path}.member"
    with open(src, "wb") as f:
        f.write(data)
    record = FileRecord("triton/HASH/k.bin", hashlib.sha256(data).hexdigest(), size)
    manifest = Manifest(FORMAT, "vllm-0.25-plugin", "an-engine", plan_digest, {"gpu": "NVIDIA H200", "torch": "2.11.0"},
                        [record], [], {})
    archive.write_bundle(str(path), manifest, {record.path: src})
    os.unlink(src)
    return manifest


def sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_cli(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "planner", "bundle", *argv], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **(env or {})}, timeout=120)


def push(bundle, ref: str) -> oci.Pushed:
    manifest = archive.read_manifest(str(bundle))
    from executor.bundle.cli_registry import annotations_of

    return oci.push(str(bundle), oci_ref.parse(ref), annotations_of(manifest))


# --- references -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, parts", [
    ("oci://localhost:5000/warmup/llama:v1", ("localhost:5000", "warmup/llama", "v1", None)),
    ("oci://ghcr.io/org/b@sha256:" + "a" * 64, ("ghcr.io", "org/b", None, "sha256:" + "a" * 64)),
    ("registry.example.com/a/b/c:t@sha256:" + "0" * 64, ("registry.example.com", "a/b/c", "t", "sha256:" + "0" * 64)),
    ("oci://[::1]:5000/r", ("[::1]:5000", "r", None, None)),
])
def test_references_parse_and_print_back(text, parts):
    ref = oci_ref.parse(text)
    assert tuple(ref) == parts
    assert str(ref) == (text if text.startswith("oci://") else "oci://" + text)


@pytest.mark.parametrize("text, why", [
    ("oci://llama:v1", "must start with the registry's host"),
    ("oci://host:5000/Upper/case", "is not lowercase path components"),
    ("oci://host/r@sha256:abc", "is not sha256:<64 lowercase hex digits>"),
    ("oci://host/r:" + "t" * 200, "is not a valid tag"),
    ("oci://host/r@md5:" + "a" * 32, "is not sha256"),
])
def test_a_bad_reference_is_one_line(text, why):
    with pytest.raises(PlanError, match=why):
        oci_ref.parse(text)


def test_a_registry_host_without_a_dot_is_the_host_not_a_namespace():
    client, container = oci._client(oci_ref.parse("oci://registry:5000/org/team/b:v1"), False)
    assert container.get_blob_url("sha256:x") == "registry:5000/v2/org/team/b/blobs/sha256:x"
    client, container = oci._client(oci_ref.parse("oci://localhost/b"), False)
    assert container.manifest_url("v1") == "localhost/v2/b/manifests/v1" and client.prefix == "http"


def test_loopback_registries_speak_plain_http_others_tls():
    assert oci_ref.parse("oci://localhost:5000/r").plain_http()
    assert oci_ref.parse("oci://127.0.0.1/r").plain_http()
    assert not oci_ref.parse("oci://ghcr.io/r").plain_http()
    assert not oci_ref.parse("oci://localhost.example.com/r").plain_http()


# --- push and pull ----------------------------------------------------------------------------------

def test_push_then_pull_by_digest_and_by_tag_is_bit_identical(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    manifest = make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/warmup/llama:v1")
    assert pushed.reference.tag == "v1" and pushed.reference.digest.startswith("sha256:")
    assert pushed.blob_digest == "sha256:" + sha(bundle)
    by_digest = oci.pull(oci_ref.parse(f"oci://{registry.address}/warmup/llama@{pushed.reference.digest}"),
                         str(tmp_path / "d.warmup"))
    by_tag = oci.pull(oci_ref.parse(f"oci://{registry.address}/warmup/llama:v1"), str(tmp_path / "t.warmup"))
    assert sha(tmp_path / "d.warmup") == sha(tmp_path / "t.warmup") == sha(bundle)
    assert by_tag.reference.digest == by_digest.reference.digest == pushed.reference.digest
    assert by_digest.annotations[oci.ANNOTATION_BUNDLE] == manifest.digest()
    assert by_digest.annotations[oci.ANNOTATION_PLAN] == "sha256:plan"
    assert json.loads(by_digest.annotations[oci.ANNOTATION_FINGERPRINT]) == manifest.fingerprint
    assert sorted(os.listdir(tmp_path)) == ["b.warmup", "d.warmup", "registry", "t.warmup"]  # no leftovers


def test_the_same_bundle_pushed_twice_has_the_same_digest_and_a_tag_moves(tmp_path, registry):
    first, second = tmp_path / "1.warmup", tmp_path / "2.warmup"
    make_bundle(first, seed=1)
    make_bundle(second, seed=2)
    a = push(first, f"oci://{registry.address}/w:latest")
    assert push(first, f"oci://{registry.address}/w:again").reference.digest == a.reference.digest
    b = push(second, f"oci://{registry.address}/w:latest")
    assert b.reference.digest != a.reference.digest
    resolved, _ = oci.resolve(oci_ref.parse(f"oci://{registry.address}/w:latest"))
    assert resolved.digest == b.reference.digest
    # the old digest still names the old bytes: a pinned node is not moved by the tag
    oci.pull(oci_ref.parse(f"oci://{registry.address}/w@{a.reference.digest}"), str(tmp_path / "old.warmup"))
    assert sha(tmp_path / "old.warmup") == sha(first)


def test_push_without_a_tag_is_by_digest_only(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/untagged")
    assert pushed.reference.tag is None
    oci.pull(pushed.reference, str(tmp_path / "p.warmup"))
    assert sha(tmp_path / "p.warmup") == sha(bundle)


def test_a_tampered_blob_is_refused_and_nothing_written(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/w:v1")
    stored = registry.blob_file(pushed.blob_digest)
    data = bytearray(open(stored, "rb").read())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    with open(stored, "wb") as f:
        f.write(data)
    out = tmp_path / "out" / "p.warmup"
    out.parent.mkdir()  # the pull makes no directory, as `>` makes none
    with pytest.raises(PlanError, match="a tampered or corrupted blob"):
        oci.pull(pushed.reference, str(out))
    assert os.listdir(out.parent) == []


def test_a_manifest_not_matching_the_digest_asked_for_is_refused(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/w:v1")
    stored = registry.blob_file(pushed.reference.digest)  # the registry keeps manifests as blobs too
    doc = json.loads(open(stored, "rb").read())
    doc["annotations"][oci.ANNOTATION_PLAN] = "sha256:other"
    with open(stored, "w") as f:
        f.write(json.dumps(doc))
    with pytest.raises(PlanError, match="not the one asked for"):
        oci.pull(pushed.reference, str(tmp_path / "p.warmup"))
    assert not (tmp_path / "p.warmup").exists()


def test_a_digest_the_registry_does_not_have_is_one_line(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    push(bundle, f"oci://{registry.address}/w:v1")
    wrong = oci_ref.parse(f"oci://{registry.address}/w@sha256:" + "1" * 64)
    with pytest.raises(oci.RegistryError, match="not in the registry"):
        oci.pull(wrong, str(tmp_path / "p.warmup"))
    assert not (tmp_path / "p.warmup").exists()


def test_an_artifact_that_is_no_bundle_is_refused(tmp_path, registry):
    other = tmp_path / "notes.txt"
    other.write_text("not a bundle")
    ref = oci_ref.parse(f"oci://{registry.address}/w:notes")
    registry_client, container = oci._client(ref, False)
    blob = "sha256:" + sha(other)
    oci._upload_blob(registry_client, container, str(other), blob, other.stat().st_size, time.monotonic() + 30)
    oci._upload_blob(registry_client, container, None, oci.EMPTY_CONFIG["digest"], 2, time.monotonic() + 30, data=b"{}")
    body = oci.artifact_manifest(blob, other.stat().st_size, "notes.txt", {}).replace(
        oci.LAYER_MEDIA_TYPE.encode(), b"text/plain")
    oci._request(registry_client, "PUT", container.manifest_url("notes"), time.monotonic() + 30, data=body,
                 headers={"Content-Type": oci.MANIFEST_MEDIA_TYPE})
    with pytest.raises(PlanError, match="not a warmup bundle artifact .layers: text/plain"):
        oci.pull(ref, str(tmp_path / "p.warmup"))


def test_a_tag_that_names_an_image_index_is_refused_exit_2_as_what_it_is(tmp_path, registry):
    """A multi-platform image's tag (an OCI index): the registry answers it (it is asked for), and the
    refusal names it, exit 2; it was "not in the registry" (HTTP 404), exit 1."""
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = push(bundle, f"oci://{registry.address}/w:v1")
    ref = oci_ref.parse(f"oci://{registry.address}/w:multi")
    registry_client, container = oci._client(ref, False)
    child = oci._request(registry_client, "GET", container.manifest_url(pushed.reference.digest), time.monotonic() + 30,
                         headers={"Accept": oci.MANIFEST_MEDIA_TYPE})
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"mediaType": oci.MANIFEST_MEDIA_TYPE, "digest": pushed.reference.digest, "size": len(child.content),
         "platform": {"architecture": "amd64", "os": "linux"}}]}).encode()
    oci._request(registry_client, "PUT", container.manifest_url("multi"), time.monotonic() + 30, data=index,
                 headers={"Content-Type": "application/vnd.oci.image.index.v1+json"})
    done = run_cli("pull", str(ref), "-o", str(tmp_path / "p.warmup"))
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert "it names an image index (a manifest per platform), not a warmup bundle artifact" in done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "p.warmup").exists()


def test_a_bundle_typed_artifact_whose_layer_is_no_bundle_is_refused_exit_2(tmp_path, registry):
    """What `oras push REF notes.txt:application/vnd.warmup-planner.bundle.v1.tar` makes: the layer's
    bytes match their digest, and are still no bundle."""
    other = tmp_path / "notes.txt"
    other.write_text("not a bundle")
    ref = oci_ref.parse(f"oci://{registry.address}/w:typed")
    client, container = oci._client(ref, False)
    blob, deadline = "sha256:" + sha(other), time.monotonic() + 30
    oci._upload_blob(client, container, str(other), blob, other.stat().st_size, deadline)
    oci._upload_blob(client, container, None, oci.EMPTY_CONFIG["digest"], 2, deadline, data=b"{}")
    oci._request(client, "PUT", container.manifest_url("typed"), deadline,
                 data=oci.artifact_manifest(blob, other.stat().st_size, "notes.txt", {}),
                 headers={"Content-Type": oci.MANIFEST_MEDIA_TYPE})
    done = run_cli("pull", str(ref), "-o", str(tmp_path / "p.warmup"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "refused: its bundle layer is not a warmup bundle (not a readable warmup bundle (not a tar archive))" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "p.warmup").exists()


def test_a_registry_going_away_mid_pull_is_one_line_no_file_and_a_later_pull_works(tmp_path, registry, monkeypatch):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle, size=64 << 20)
    pushed = push(bundle, f"oci://{registry.address}/w:big")
    monkeypatch.setattr(oci, "CHUNK", 16 << 10)  # small reads: the pull is still under way when the kill lands
    out = tmp_path / "out"
    out.mkdir()

    arrived, writer = threading.Event(), oci.open_output

    @contextlib.contextmanager
    def noting_bytes(path, binary=False):  # the file being written has no name to watch: its writes say
        with writer(path, binary) as f:
            write = f.write
            f.write = lambda chunk: (arrived.set(), write(chunk))[1]
            yield f

    monkeypatch.setattr(oci, "open_output", noting_bytes)

    def kill_once_bytes_arrive():
        if arrived.wait(30):
            registry.kill()

    killer = threading.Thread(target=kill_once_bytes_arrive)
    killer.start()
    started = time.monotonic()
    with pytest.raises(oci.RegistryError) as caught:
        oci.pull(pushed.reference, str(out / "p.warmup"), timeout_s=30)
    killer.join()
    assert time.monotonic() - started < 30
    assert "\n" not in str(caught.value) and ("broken off" in str(caught.value) or "ended after" in str(caught.value))
    assert os.listdir(out) == []
    RegistryServer(str(tmp_path / "registry"), port=registry.port, auth=registry.auth).start()  # same storage, back again
    try:
        oci.pull(pushed.reference, str(out / "p.warmup"))
        assert sha(out / "p.warmup") == sha(bundle)
    finally:
        subprocess.run(["pkill", "-f", str(tmp_path / "registry" / "config.yml")], check=False)


def test_no_registry_there_fails_fast_in_one_line(tmp_path):
    ref = oci_ref.parse(f"oci://127.0.0.1:{free_port()}/w:v1")
    started = time.monotonic()
    with pytest.raises(oci.RegistryError, match="cannot be reached"):
        oci.pull(ref, str(tmp_path / "p.warmup"), timeout_s=20)
    assert time.monotonic() - started < 10  # oras's own retries would take two minutes
    assert os.listdir(tmp_path) == []


def test_a_registry_that_never_answers_gives_up_at_the_deadline(tmp_path, monkeypatch):
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections, never answers
    monkeypatch.setattr(oci, "READ_TIMEOUT_S", 0.5)
    ref = oci_ref.parse(f"oci://127.0.0.1:{silent.getsockname()[1]}/w:v1")
    started = time.monotonic()
    try:
        with pytest.raises(oci.RegistryError, match="did not answer in time"):
            oci.pull(ref, str(tmp_path / "p.warmup"), timeout_s=20)
    finally:
        silent.close()
    assert time.monotonic() - started < 5


def test_credentials_come_from_docker_config_and_the_environment(tmp_path):
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"auths": {"reg.example:5000": {"auth": "YTpi"}}}))
    found = oci_auth.credentials("reg.example:5000", {"DOCKER_CONFIG": str(config)})
    assert (found.user, found.password, found.source) == ("a", "b", str(config / "config.json"))  # base64("a:b")
    assert oci_auth.credentials("other:5000", {"DOCKER_CONFIG": str(config)}) is None
    found = oci_auth.credentials("reg.example:5000", {"DOCKER_CONFIG": str(config), "ORAS_USER": "u", "ORAS_PASS": "p"})
    assert (found.user, found.password, found.source) == ("u", "p", "ORAS_USER/ORAS_PASS")


# --- the command line ------------------------------------------------------------------------------

def test_cli_push_and_pull_print_the_pinned_reference(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = run_cli("push", str(bundle), f"oci://{registry.address}/warmup/b:v1")
    assert pushed.returncode == 0, pushed.stderr
    ref = pushed.stdout.strip()
    assert ref.startswith(f"oci://{registry.address}/warmup/b:v1@sha256:") and pushed.stderr.startswith("pushed ")
    pulled = run_cli("pull", ref, "-o", str(tmp_path / "p.warmup"))
    assert (pulled.returncode, pulled.stdout.strip()) == (0, ref), pulled.stderr
    assert sha(tmp_path / "p.warmup") == sha(bundle)


@pytest.mark.parametrize("argv, code, why", [
    (["push", "NOTABUNDLE", "oci://REG/w:v1"], 2, "not a readable warmup bundle"),
    (["push", "BUNDLE", "oci://REG/w@sha256:" + "a" * 64], 2, "a digest is what the push makes"),
    (["push", "BUNDLE", "w:v1"], 2, "must start with the registry's host"),
    (["pull", "oci://REG/w:missing", "-o", "OUT"], 1, "not in the registry"),
    (["pull", "oci://127.0.0.1:1/w:v1", "-o", "OUT"], 1, "cannot be reached"),
    (["pull", "oci://REG/w:v1", "-o", "TMP"], 2, "cannot write"),
    (["pull", "oci://REG/w:v1", "-o", "-"], 2, "a bundle is a binary archive; name a file"),
    (["pull", "oci://REG/w:v1", "-o", "OUT", "--timeout", "0"], 2, "must be a positive number of seconds"),
    (["push", "BUNDLE", "oci://REG/w:v1", "--timeout", "soon"], 2, "must be a positive number of seconds"),
])
def test_cli_failures_are_one_line_with_the_exit_code(tmp_path, registry, argv, code, why):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    (tmp_path / "junk").write_text("junk")
    subs = {"REG": registry.address, "NOTABUNDLE": str(tmp_path / "junk"), "BUNDLE": str(bundle),
            "OUT": str(tmp_path / "p.warmup"), "TMP": str(tmp_path)}
    for k, v in subs.items():
        argv = [a.replace(k, v) for a in argv]
    done = run_cli(*argv)
    assert done.returncode == code, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1 and why in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "p.warmup").exists()


# --- sources: a directory, the node's copy ---------------------------------------------------------

def test_a_mounted_directory_holding_one_bundle_is_that_bundle(tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    make_bundle(volume / "llama.warmup")
    (volume / "README").write_text("an image volume may hold other files")
    os.chmod(volume, 0o555)  # mounted read-only
    try:
        assert directory.bundle_in(str(volume)) == str(volume / "llama.warmup")
        assert sources.open_source(str(volume)).path() == str(volume / "llama.warmup")
        assert sources.open_source(str(volume / "llama.warmup")).path() == str(volume / "llama.warmup")
    finally:
        os.chmod(volume, 0o755)


@pytest.mark.parametrize("count, why", [(0, "it holds no warmup bundle"), (2, "it holds 2 warmup bundles")])
def test_a_directory_without_exactly_one_bundle_is_one_line(tmp_path, count, why):
    for i in range(count):
        make_bundle(tmp_path / f"{i}.warmup", seed=i)
    with pytest.raises(PlanError, match=why):
        sources.open_source(str(tmp_path)).path()


def _fetch_in_child(ref: str, cache: str, out: str) -> None:
    """One of a server's processes asking for the node's copy (a separate interpreter)."""
    code = ("import sys, json; from executor.bundle import oci_ref; from executor.bundle.sources import oci; "
            "f = oci.fetch_once(oci_ref.parse(sys.argv[1]), sys.argv[2], timeout_s=60, server='s1'); "
            "print(json.dumps([f.path, f.pulled is not None]))")
    with open(out, "w") as f:
        subprocess.run([sys.executable, "-c", code, ref, cache], stdout=f, check=True, cwd=ROOT, timeout=120)


def test_the_node_copy_is_pulled_once_by_whichever_process_comes_first(tmp_path, registry):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle, size=8 << 20)
    pushed = push(bundle, f"oci://{registry.address}/w:v1")
    cache = tmp_path / "cache"
    threads = [threading.Thread(target=_fetch_in_child, args=(str(pushed.reference), str(cache), str(tmp_path / f"{i}.json")))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(4)]
    assert len({path for path, _ in results}) == 1
    assert sum(pulled for _, pulled in results) == 1  # one pull; three found it pulled
    assert sha(results[0][0]) == sha(bundle)
    assert sorted(os.listdir(cache / "oci")) == sorted([os.path.basename(results[0][0]),
                                                        os.path.basename(results[0][0])[:-len(".bundle")] + ".bundle.lock"])


def test_a_failed_pull_is_not_asked_again_by_the_same_servers_processes(tmp_path):
    ref = oci_ref.parse(f"oci://127.0.0.1:{free_port()}/w@sha256:" + "2" * 64)
    with pytest.raises(oci.RegistryError, match="cannot be reached"):
        oci_source.fetch_once(ref, str(tmp_path), timeout_s=10, server="s1")
    calls = []
    real = oci.pull
    try:
        oci.pull = lambda *a, **k: calls.append(a) or real(*a, **k)
        with pytest.raises(oci.RegistryError, match="cannot be reached"):
            oci_source.fetch_once(ref, str(tmp_path), timeout_s=10, server="s1")  # the mark: no second ask
        assert calls == []
        with pytest.raises(oci.RegistryError, match="cannot be reached"):
            oci_source.fetch_once(ref, str(tmp_path), timeout_s=10, server="s2")  # another server asks again
        assert len(calls) == 1
    finally:
        oci.pull = real


def test_a_registry_that_trickles_the_blob_gives_up_at_the_deadline(tmp_path):
    """No real registry trickles: a loopback HTTP server that serves a bundle's manifest at once and its
    blob a few bytes a second, which never trips a read timeout; the pull's deadline still holds."""
    import http.server

    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    blob = "sha256:" + sha(bundle)
    body = oci.artifact_manifest(blob, bundle.stat().st_size, "b.warmup", {})

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            data = body if "/manifests/" in self.path else bundle.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if "/manifests/" in self.path:
                self.wfile.write(data)
                return
            for i in range(0, min(len(data), 4096), 16):  # never more than 26 s of it
                self.wfile.write(data[i:i + 16])
                self.wfile.flush()
                time.sleep(0.1)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        started = time.monotonic()
        with pytest.raises(oci.RegistryError, match="gave up at the deadline after"):
            oci.pull(oci_ref.parse(f"oci://127.0.0.1:{server.server_address[1]}/w:v1"), str(tmp_path / "p.warmup"),
                     timeout_s=2)
        assert time.monotonic() - started < 5
    finally:
        server.shutdown()
    assert not (tmp_path / "p.warmup").exists() and sorted(os.listdir(tmp_path)) == ["b.warmup"]
