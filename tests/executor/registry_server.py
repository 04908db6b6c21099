"""The CNCF distribution registry (Debian's `docker-registry`, /usr/bin/docker-registry) on a
loopback port, with its storage in a directory of the test's: the real registry the OCI tests
push to and pull from. .ci/run installs the package and sets WARMUP_REGISTRY_REQUIRED=1, so that
CI fails, rather than skips, where the registry is missing.

Three ways of asking for credentials, as fleets run registries: none; HTTP Basic (the registry's
own htpasswd auth, `auth="basic"`); Bearer tokens (`TokenProxy`: a loopback token service and
proxy in front of the registry, issuing the distribution spec's challenges, since the registry's
own token auth needs a signing service of its own)."""

from __future__ import annotations

import base64
import http.client
import http.server
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

BINARY = os.environ.get("WARMUP_REGISTRY_BINARY") or shutil.which("docker-registry") or "/usr/bin/docker-registry"
MISSING = "the CNCF registry (Debian's docker-registry) is not installed"

CONFIG = """version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""
BASIC = """auth:
  htpasswd:
    realm: basic-realm
    path: {htpasswd}
"""
USER, PASSWORD = "alice", "warmup-test-password"
# USER's bcrypt hash (cost 5), written out: docker-registry accepts only bcrypt, and a fixed hash
# needs no bcrypt wheel, no libcrypt with bcrypt (Python's crypt is gone in 3.13) and no
# apache2-utils on a clean CI machine. Made with crypt.crypt(PASSWORD, "$2b$05$WarmupPlannerTestSalt.");
# `htpasswd -vb FILE alice warmup-test-password` checks it.
HTPASSWD = f"{USER}:$2b$05$WarmupPlannerTestSalt.WKHtO8M5DMryO9poE5MqJm.ahLBEEwq\n"


def require_binary() -> str:
    if os.path.isfile(BINARY) and os.access(BINARY, os.X_OK):
        return BINARY
    if os.environ.get("WARMUP_REGISTRY_REQUIRED") == "1":
        pytest.fail(f"{MISSING} ({BINARY}) and WARMUP_REGISTRY_REQUIRED=1")
    pytest.skip(MISSING)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RegistryServer:
    def __init__(self, workdir: str, port: int | None = None, auth: str | None = None):
        self.binary = require_binary()
        self.workdir = workdir
        self.root = os.path.join(workdir, "storage")
        self.config = os.path.join(workdir, "config.yml")
        self.port = port or free_port()
        self.auth = auth   # None or "basic" (USER, PASSWORD)
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "RegistryServer":
        os.makedirs(self.root, exist_ok=True)
        with open(self.config, "w") as f:
            f.write(CONFIG.format(root=self.root, port=self.port))
            if self.auth == "basic":
                htpasswd = os.path.join(self.workdir, "htpasswd")
                with open(htpasswd, "w") as h:
                    h.write(HTPASSWD)
                f.write(BASIC.format(htpasswd=htpasswd))
        self.proc = subprocess.Popen([self.binary, "serve", self.config], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited {self.proc.returncode} at start")
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=1) as r:
                    if r.status == 200:
                        return self
            except urllib.error.HTTPError as e:
                if e.code == 401 and self.auth:  # up, and asking for credentials
                    return self
                time.sleep(0.05)
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("docker-registry did not answer /v2/ within 20 s")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def blob_file(self, digest: str) -> str:
        """Where the filesystem driver keeps a blob (manifests are blobs too)."""
        hexdigest = digest.split(":", 1)[1]
        return os.path.join(self.root, "docker", "registry", "v2", "blobs", "sha256", hexdigest[:2], hexdigest, "data")


class TokenProxy:
    """A registry that asks for Bearer tokens, as GHCR, Harbor, ECR and Docker Hub do: every /v2/
    request without a valid token is answered 401 with `WWW-Authenticate: Bearer realm=...,
    service=..., scope=repository:NAME:pull[,push]`; GET /token with USER's Basic credentials gives
    a token for that scope (no credentials: 401, as a private registry's service answers); a
    request with a valid token is passed to the registry behind it. `tokens_issued` counts the
    token requests, `unauthorized` the 401s given."""

    SERVICE = "warmup-test-registry"

    def __init__(self, upstream: RegistryServer):
        self.upstream = upstream
        self.granted: dict[str, str] = {}   # token -> scope
        self.tokens_issued = self.unauthorized = 0
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "TokenProxy":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def scope_of(self, method: str, path: str) -> str:
        name = re.match(r"/v2/(.+?)/(?:manifests|blobs|tags)/", path)
        action = "pull" if method in ("GET", "HEAD") else "pull,push"
        return f"repository:{name.group(1)}:{action}" if name else ""

    def grants(self, header: str | None, scope: str) -> bool:
        token = (header or "").removeprefix("Bearer ")
        granted = self.granted.get(token, "")
        return bool(header and header.startswith("Bearer ")) and (
            granted == scope or (granted.endswith(":pull,push") and scope == granted[:-len(",push")]))

    def _handler(self):
        proxy = self
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_token(self, query: str) -> None:
                scope = dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("scope", "")
                if self.headers.get("Authorization") != expected:
                    self.reply(401, b'{"details":"invalid username or password"}')
                    return
                token = secrets.token_hex(16)
                proxy.granted[token] = urllib.request.unquote(scope)
                proxy.tokens_issued += 1
                self.reply(200, ('{"token":"%s","expires_in":300}' % token).encode())

            def handle_any(self) -> None:
                path, _, query = self.path.partition("?")
                if path == "/token":
                    self.do_token(query)
                    return
                scope = proxy.scope_of(self.command, path)
                if not proxy.grants(self.headers.get("Authorization"), scope):
                    proxy.unauthorized += 1
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))  # the connection stays usable
                    challenge = f'Bearer realm="http://{proxy.address}/token",service="{proxy.SERVICE}"'
                    self.reply(401, b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}',
                               {"WWW-Authenticate": challenge + (f',scope="{scope}"' if scope else "")})
                    return
                self.forward()

            def forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("authorization", "connection")}
                conn = http.client.HTTPConnection(proxy.upstream.address, timeout=30)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)  # Host kept: its Locations name the proxy
                    answer = conn.getresponse()
                    data = answer.read()
                    self.send_response(answer.status)
                    for k, v in answer.getheaders():
                        if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)) if self.command != "HEAD"
                                     else answer.getheader("Content-Length", "0"))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            def reply(self, status: int, body: bytes, headers: dict | None = None) -> None:
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", **(headers or {})}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

            def log_message(self, *args):
                pass

        return Handler


def serve(mode: str, workdir: str, monkeypatch) -> RegistryServer:
    """The registry the OCI tests run against, per mode: "open" (no credentials asked) or "basic"
    (htpasswd). The process's environment is cleared of credentials from this machine (its docker
    config, REGISTRY_AUTH_FILE) and, for "basic", holds USER's (ORAS_USER/ORAS_PASS), which the
    CLI's subprocesses inherit; `server.environ` is the same credentials for an explicit environ."""
    empty = os.path.join(workdir, "registry", "no-docker-config")
    os.makedirs(empty, exist_ok=True)
    monkeypatch.setenv("DOCKER_CONFIG", empty)
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    server = RegistryServer(os.path.join(workdir, "registry"), auth=None if mode == "open" else mode)
    server.environ = {"DOCKER_CONFIG": empty}
    if mode == "basic":
        server.environ.update(ORAS_USER=USER, ORAS_PASS=PASSWORD)
    else:
        monkeypatch.delenv("ORAS_USER", raising=False)
        monkeypatch.delenv("ORAS_PASS", raising=False)
    for k, v in server.environ.items():
        monkeypatch.setenv(k, v)
    return server.start()
