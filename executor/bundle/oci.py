"""A bundle file as one OCI artifact: pushed to and pulled from any registry that speaks the
distribution API (the CNCF registry, Harbor, ECR, GCR, GHCR, Artifactory), through ``oras``.

The artifact: an OCI image manifest (``artifactType`` ours) whose one layer is the bundle file,
byte for byte, with the empty config; the bundle's manifest digest, plan digest and fingerprint are
the manifest's annotations, so ``oras manifest fetch`` or a registry's UI shows what was built where
without pulling it. The manifest is serialised canonically (sorted keys, no spaces): the same bundle
pushed twice has the same digest.

What oras does not do is ours: every byte pulled is checked against the digest that names it (the
manifest against the reference's digest, the blob against the manifest's), every request has a
timeout and the whole transfer a deadline (oras retries a failed request for two minutes: not
here, a node must step aside in bounded time), and the file is written whole or not at all.

Credentials as the registry tools read them, given as the registry's challenge asks (Basic, or a
Bearer token from its token service): executor/bundle/oci_auth.py. A refusal is "authentication
failed" with the registry's answer (exit 1), never "cannot be reached".
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from contextlib import nullcontext
from typing import NamedTuple

from planner import progress
from planner.errors import PlanError
from planner.output import open_output, read_back

from . import archive
from . import oci_auth
from .oci_ref import Reference

ARTIFACT_TYPE = "application/vnd.warmup-planner.bundle.v1"
LAYER_MEDIA_TYPE = "application/vnd.warmup-planner.bundle.v1.tar"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
# What a tag may name instead of one manifest: an index of several (a multi-platform image). Asked
# for too, so that the registry answers with it and the refusal says what it is (a registry asked for
# manifests only answers 404 for an index: "not in the registry" was the wrong cause).
INDEX_MEDIA_TYPES = ("application/vnd.oci.image.index.v1+json",
                     "application/vnd.docker.distribution.manifest.list.v2+json")
EMPTY_CONFIG = {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2,
                "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}  # b"{}"
TITLE = "org.opencontainers.image.title"
ANNOTATION_BUNDLE = "dev.warmup-planner.bundle.digest"           # archive.Manifest.digest()
ANNOTATION_PLAN = "dev.warmup-planner.bundle.plan-digest"
ANNOTATION_FINGERPRINT = "dev.warmup-planner.bundle.fingerprint"  # JSON, sorted keys
MANIFEST_LIMIT = 4 << 20          # the distribution registry's own limit on a manifest
CHUNK = 1 << 20
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0             # one socket read; the whole transfer has its own deadline


class RegistryError(Exception):
    """The registry could not be used (down, slow, refused the credentials): one line; the CLI
    exits 1 (ops.Failed), the plugin steps aside."""


class Pushed(NamedTuple):
    reference: Reference   # pinned: tag (if any) and the manifest's digest
    blob_digest: str
    size: int


class Pulled(NamedTuple):
    reference: Reference   # pinned to the manifest digest that was checked
    blob_digest: str
    size: int
    annotations: dict


# --- the client ---------------------------------------------------------------------------------

def _client(ref: Reference, plain_http: bool, environ=os.environ):
    """An oras Registry for this reference's registry (its session and URLs), with the credentials
    the registry tools would use; the requests and their authorization are ours (_request)."""
    try:
        import oras.provider
    except ImportError:
        raise RegistryError("oci:// needs the oras client: pip install 'warmup-planner[registry]'") from None

    registry = oras.provider.Registry(hostname=ref.registry, insecure=plain_http or ref.plain_http())
    container = registry.get_container(ref.repository)  # the registry is the hostname: oras would take a dotless one for a namespace
    registry.warmup_auth = oci_auth.Session(ref.registry, oci_auth.credentials(ref.registry, environ))
    return registry, container


def _request(registry, method: str, url: str, deadline: float, data=None, headers=None, stream=False):
    """One request, answering the registry's challenge once (Basic or Bearer, as it asks): not
    oras' do_request, which retries for minutes and reads every challenge as a token's."""
    auth = registry.warmup_auth
    full = f"{registry.prefix}://{url}"
    response = _send(registry, method, full, deadline, data=data, headers=auth.apply(headers), stream=stream)
    if response.status_code != 401:
        return _refused(response, auth)
    response.close()
    try:
        auth.answer(response, lambda realm, params, h: _send(registry, "GET", realm, deadline, params=params, headers=h))
    except oci_auth.AuthFailed as e:
        raise RegistryError(f"{method} {url}: {e}") from None
    if hasattr(data, "seek"):
        data.seek(0)  # the refused request may have read some of a streamed body
    return _refused(_send(registry, method, full, deadline, data=data, headers=auth.apply(headers), stream=stream), auth)


def _refused(response, auth):
    """A 401 after the challenge was answered, or a 403: the registry refused these credentials."""
    if response.status_code in (401, 403):
        raise RegistryError(f"{response.request.method} {response.url.split('://', 1)[-1]}: {auth.failure(response)}")
    return response


def _send(registry, method: str, url: str, deadline: float, **kw):
    """requests, bounded: each request by the time left before the deadline."""
    _check_deadline(deadline, url)
    import requests

    left = max(0.1, deadline - time.monotonic())
    try:
        return registry.session.request(method, url, timeout=(min(CONNECT_TIMEOUT_S, left), min(READ_TIMEOUT_S, left)),
                                        verify=registry._tls_verify, **kw)
    except requests.RequestException as e:
        raise RegistryError(f"{method} {url.split('://', 1)[-1]}: {_why(e)}") from None


def _why(e: Exception) -> str:
    import requests

    if isinstance(e, requests.ConnectionError):
        return "the registry cannot be reached (connection failed)"
    if isinstance(e, (requests.Timeout, TimeoutError)) or type(e).__name__ == "ReadTimeoutError":
        return "the registry did not answer in time"
    return f"{type(e).__name__}: {e}"


def _read_some(response, url: str, size: int) -> bytes:
    """What one socket read gives (urllib3's read1): the deadline is asked between reads, since a
    registry that trickles bytes never trips a read timeout and read(n) waits for all n."""
    import urllib3.exceptions

    try:
        return response.raw.read1(CHUNK)
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise RegistryError(f"GET {url}: broken off after {size} bytes: {_why(e)}") from None


def _check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise RegistryError(f"{what}: gave up at the deadline")


def _expect(response, ok: tuple, what: str) -> None:
    if response.status_code not in ok:
        said = oci_auth.detail(response, "")
        raise RegistryError(f"{what}: HTTP {response.status_code}{(' (' + said + ')') if said else ''}")


# --- push ---------------------------------------------------------------------------------------

def artifact_manifest(blob_digest: str, size: int, title: str, annotations: dict) -> bytes:
    """The manifest's bytes, canonical: the same bundle and annotations give the same digest."""
    doc = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": {**EMPTY_CONFIG, "data": "e30="},
        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": blob_digest, "size": size,
                    "annotations": {TITLE: title}}],
        "annotations": annotations,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def push(path: str, ref: Reference, annotations: dict, *, timeout_s: float = 600.0,
         plain_http: bool = False, environ=os.environ) -> Pushed:
    """The bundle file as one artifact at `ref` (a tag, or none: by digest only); the reference
    pinned to the manifest's digest."""
    if ref.digest:
        raise PlanError("push: a digest is what the push makes; give a tag or none", file=str(ref))
    deadline = time.monotonic() + timeout_s
    progress.current().phase(f"hashing {os.path.basename(path)}")
    hexdigest, st = archive.sha256_file(path, stat=True)
    blob_digest, size = "sha256:" + hexdigest, st.st_size
    registry, container = _client(ref, plain_http, environ)
    _upload_blob(registry, container, path, blob_digest, size, deadline)
    _upload_blob(registry, container, None, EMPTY_CONFIG["digest"], 2, deadline, data=b"{}")
    body = artifact_manifest(blob_digest, size, os.path.basename(path), annotations)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    url = container.manifest_url(ref.tag or digest)
    response = _request(registry, "PUT", url, deadline, data=body,
                        headers={"Content-Type": MANIFEST_MEDIA_TYPE})
    _expect(response, (200, 201), f"PUT {url}")
    return Pushed(ref.pinned(digest), blob_digest, size)


def _upload_blob(registry, container, path: str | None, digest: str, size: int, deadline: float,
                 data: bytes | None = None) -> None:
    """A monolithic upload (POST then PUT with the digest), skipped where the registry has it."""
    head = _request(registry, "HEAD", container.get_blob_url(digest), deadline)
    if head.status_code == 200:
        return
    started = _request(registry, "POST", container.upload_blob_url(), deadline)
    _expect(started, (202,), f"POST {container.upload_blob_url()}")
    location = _upload_location(registry, started)
    separator = "&" if "?" in location else "?"
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
    if data is None:
        progress.current().phase(f"sending {os.path.basename(path)}", total=size)
    source = _Counted(open(path, "rb", buffering=0)) if data is None else nullcontext(data)  # streamed, or the bytes
    with source as body:
        done = _request(registry, "PUT", f"{location}{separator}digest={digest}", deadline,
                        data=body, headers=headers)
    _expect(done, (201,), f"PUT blob {digest}")


class _Counted(io.BufferedReader):
    """The bundle file as the upload reads it, its position shown on a terminal (planner.progress);
    a file to requests (fileno, mode, tell and seek: its length, and a retry from the start)."""

    def read(self, size=-1):
        data = super().read(size)
        progress.current().update(self.tell())
        return data


def _upload_location(registry, response) -> str:
    """The upload session's URL without the scheme (as oras' URLs are): relative or absolute."""
    location = response.headers.get("Location") or ""
    if not location:
        raise RegistryError("the registry started an upload without a Location")
    if location.startswith("/"):
        return f"{registry.hostname}{location}"
    return location.split("://", 1)[-1]


# --- pull ---------------------------------------------------------------------------------------

def resolve(ref: Reference, *, timeout_s: float = 30.0, plain_http: bool = False,
            environ=os.environ) -> tuple[Reference, dict]:
    """The reference pinned to the digest of the manifest it names now (for a digest reference, the
    manifest checked against it), and that manifest."""
    deadline = time.monotonic() + timeout_s
    registry, container = _client(ref, plain_http, environ)
    return _manifest(registry, container, ref, deadline)


def _manifest(registry, container, ref: Reference, deadline: float) -> tuple[Reference, dict]:
    url = container.manifest_url(ref.manifest_name)
    accept = ", ".join((MANIFEST_MEDIA_TYPE, *INDEX_MEDIA_TYPES))
    with _request(registry, "GET", url, deadline, headers={"Accept": accept}, stream=True) as response:
        if response.status_code == 404:
            raise RegistryError(f"{ref}: not in the registry (HTTP 404)")
        _expect(response, (200,), f"GET {url}")
        body = _read_manifest(response, url, ref, deadline)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    if ref.digest and digest != ref.digest:
        raise PlanError(f"refused: the registry's manifest has digest {digest}, not the one asked for", file=str(ref))
    try:
        manifest = json.loads(body)
    except ValueError:
        raise PlanError("refused: its manifest is not JSON", file=str(ref)) from None
    return ref.pinned(digest), manifest


def _read_manifest(response, url: str, ref: Reference, deadline: float) -> bytes:
    """The manifest's body, read no further than MANIFEST_LIMIT: one the registry declares larger is
    refused unread, one that runs on (or without end) after one chunk over; never held whole."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > MANIFEST_LIMIT:
        raise PlanError(f"refused: its manifest is {int(declared)} bytes (a bundle's is one layer)", file=str(ref))
    body = bytearray()
    try:
        for chunk in response.iter_content(CHUNK):  # decoded, as a manifest's digest is of its bytes
            body += chunk
            if len(body) > MANIFEST_LIMIT:
                raise PlanError(f"refused: its manifest is over {MANIFEST_LIMIT} bytes (a bundle's is one layer)",
                                file=str(ref))
            _check_deadline(deadline, f"GET {url}")
    except (PlanError, RegistryError):
        raise
    except Exception as e:  # noqa: BLE001 - the connection broke off mid-manifest
        raise RegistryError(f"GET {url}: broken off after {len(body)} bytes: {_why(e)}") from None
    return bytes(body)


def bundle_layer(ref: Reference, manifest: dict) -> dict:
    """The manifest's one bundle layer; one line where it is some other artifact."""
    if manifest.get("mediaType") in INDEX_MEDIA_TYPES or "manifests" in manifest:
        raise PlanError("refused: it names an image index (a manifest per platform), not a warmup bundle artifact "
                        "(a bundle's tag names one manifest)", file=str(ref))
    layers = [layer for layer in manifest.get("layers") or [] if isinstance(layer, dict)
              and layer.get("mediaType") == LAYER_MEDIA_TYPE]
    if len(layers) != 1:
        kinds = sorted({str(layer.get("mediaType")) for layer in manifest.get("layers") or [] if isinstance(layer, dict)})
        raise PlanError(f"refused: not a warmup bundle artifact (layers: {', '.join(kinds) or 'none'}; "
                        f"a bundle has one {LAYER_MEDIA_TYPE})", file=str(ref))
    layer = layers[0]
    if not isinstance(layer.get("size"), int) or not str(layer.get("digest", "")).startswith("sha256:"):
        raise PlanError("refused: its bundle layer has no sha256 digest and size", file=str(ref))
    return layer


def pull(ref: Reference, out: str, *, timeout_s: float = 300.0, plain_http: bool = False,
         environ=os.environ) -> Pulled:
    """The bundle at `ref` into `out`, written whole and only once every byte matched its digest."""
    deadline = time.monotonic() + timeout_s
    registry, container = _client(ref, plain_http, environ)
    pinned, manifest = _manifest(registry, container, ref, deadline)
    layer = bundle_layer(pinned, manifest)
    _download(registry, container, pinned, layer, out, deadline)
    annotations = manifest.get("annotations") if isinstance(manifest.get("annotations"), dict) else {}
    return Pulled(pinned, layer["digest"], layer["size"], annotations)


def _download(registry, container, ref: Reference, layer: dict, out: str, deadline: float) -> None:
    # planner.output's one writer: whole or nothing, a link written through, a device or FIFO
    # never replaced, the mode as `>` gives it, a missing directory refused (WriteError, exit 2)
    with open_output(out, binary=True) as f:
        _stream_blob(registry, container, ref, layer, f, deadline)
        f.flush()
        if (written := read_back(f)) is not None:  # a device or FIFO streams on: nothing to read
            _check_is_bundle(written, ref)


def _check_is_bundle(path: str, ref: Reference) -> None:
    """The layer's bytes matched their digest; they must also be a bundle: an artifact typed as
    ours whose layer is some other file (pushed by hand with `oras push`) is refused, not installed."""
    try:
        archive.read_manifest(path)
    except PlanError as e:
        raise PlanError(f"refused: its bundle layer is not a warmup bundle ({e.message})", file=str(ref)) from None


def _stream_blob(registry, container, ref: Reference, layer: dict, f, deadline: float) -> None:
    url = container.get_blob_url(layer["digest"])
    h, size = hashlib.sha256(), 0
    task = progress.current()  # a line on a terminal: the bytes received
    task.phase(f"receiving {ref.repository}", total=layer["size"])
    with _request(registry, "GET", url, deadline, stream=True) as response:
        _expect(response, (200,), f"GET {url}")
        while chunk := _read_some(response, url, size):
            size += len(chunk)
            task.update(size)
            if size > layer["size"]:
                break
            h.update(chunk)
            f.write(chunk)  # a full disk is its own OSError, not the registry's
            if time.monotonic() > deadline:
                raise RegistryError(f"GET {url}: gave up at the deadline after {size} of {layer['size']} bytes")
    if size < layer["size"]:  # closed early (by the registry or the network): not the blob's fault
        raise RegistryError(f"GET {url}: ended after {size} of {layer['size']} bytes")
    digest = "sha256:" + h.hexdigest()
    if size != layer["size"] or digest != layer["digest"]:
        raise PlanError(f"refused: the registry's blob is {'over ' if size > layer['size'] else ''}{size} bytes "
                        f"with sha256 {digest[7:19]}..., the manifest names {layer['size']} bytes "
                        f"{layer['digest'][7:19]}... (a tampered or corrupted blob)", file=str(ref))
