"""The CNCF distribution registry (Debian's `docker-registry`, /usr/bin/docker-registry) on a
loopback port, with its storage in a directory of the test's: the real registry the OCI tests
push to and pull from. .ci/run installs the package and sets WARMUP_REGISTRY_REQUIRED=1, so that
CI fails, rather than skips, where the registry is missing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
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
    def __init__(self, workdir: str, port: int | None = None):
        self.binary = require_binary()
        self.root = os.path.join(workdir, "storage")
        self.config = os.path.join(workdir, "config.yml")
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "RegistryServer":
        os.makedirs(self.root, exist_ok=True)
        with open(self.config, "w") as f:
            f.write(CONFIG.format(root=self.root, port=self.port))
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
