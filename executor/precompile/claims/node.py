"""Where a run's claims live (on_disk.py), and what they say of the node.

A key's claims live inside the cache its compile writes into: DeepGEMM's writable root (the first
of DG_JIT_CACHE_DIR; in the vLLM plugin $VLLM_CACHE_ROOT/deep_gemm) for the backends whose kernels
land there, else the Triton cache directory the workers write (the plugin's staging directory under
$VLLM_CACHE_ROOT, else TRITON_CACHE_DIR or Triton's default: the precompile manifest's directory).
Every process of a node that shares a cache reaches the same claims through it, whatever its rank
(vLLM's per-rank Inductor directories are chosen later, and the pool does not write there); a
process with another cache must compile for itself, and does; wiping a cache wipes its claims.
Under the cache, ``warmup-claims/<namespace>``: a digest of the manifest's fingerprint (versions,
sources, GPUs, settings), so that a process of another triton or DeepGEMM does not skip a key.
A file system shared by several hosts shares the claims too (the heartbeat bound then stands in
for the pid check). Without a known Triton directory (TRITON_CACHE_MANAGER) those keys get no claim.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os

from ... import registry
from ...caches import roots
from ...caches.roots import Env
from ..jobs.manifest import manifest_path, triton_cache_dir
from .on_disk import CLAIMS_DIR, DONE, STALE_S, WAIT_S, KeyClaim, bound, read_doc
from .waits import Waits

log = logging.getLogger("warmup_planner.precompile")  # a takeover's line, unless the caller takes them


def cache_dir(backend: str, worker_env: dict | None, env: Env | None = None) -> str | None:
    """The cache directory a backend's workers compile into (None: unknown), in `env`, the run's
    resolved environment (default: this process's now)."""
    env = env or Env.of()
    if registry.writes_deep_gemm(backend):
        return roots.deep_gemm_root(env)
    override = (worker_env or {}).get("TRITON_CACHE_DIR")
    if override:
        return str(override)
    return triton_cache_dir(env) if manifest_path(env=env) is not None else None


def namespace(fingerprint: dict) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()[:16]


def key_dir(root: str, backend: str, key: str) -> str:
    return os.path.join(root, hashlib.sha256(f"{backend}\0{key}".encode()).hexdigest()[:32])


class NodeClaims:
    """The claim directories of one run, by backend, the keys found done when it started, and the
    waits for the keys other processes hold (waits.py) with their takeovers' lines."""

    def __init__(self, worker_env: dict | None = None, note=None, env: Env | None = None):
        self.worker_env, self.on_note, self.env = worker_env, note, env  # env: the run's roots' (cache_dir)
        self.notes: list[str] = []   # one line per takeover, for the report
        self.waits: Waits | None = None
        self.roots: dict = {}      # backend -> its claims directory (none: its keys get no claim)
        self.stale_s = bound("WARMUP_CLAIM_STALE_S", STALE_S)
        self.wait_s = bound("WARMUP_CLAIM_WAIT_S", WAIT_S)
        self.loaded: set = set()   # (backend, key) done by another process (or run) before this one

    def open(self, fingerprint: dict, backends) -> None:
        """The directories of `backends` under this fingerprint (jobs/decide.py, once a pool may run)."""
        ns = namespace(fingerprint)
        for backend in backends:
            cache = cache_dir(backend, self.worker_env, self.env)
            if cache:
                self.roots[backend] = os.path.join(cache, CLAIMS_DIR, ns)

    def claim(self, backend: str, key: str) -> KeyClaim | None:
        root = self.roots.get(backend)
        return KeyClaim(key_dir(root, backend, key), os.getpid(), self.stale_s) if root else None

    def done(self, pairs) -> set:
        """The (backend, key) pairs already done: skipped, as the manifest's keys are."""
        self.loaded = {p for p in pairs if self._mark(*p) is not None}
        return self.loaded

    def start(self, pool, slots) -> None:
        """Each job its claim, which the worker takes before it compiles (owner.py); the waits
        submit a key taken over to `pool`."""
        for slot in slots:
            slot.job.claim = self.claim(slot.job.backend, slot.job.key)
        self.waits = Waits(pool.submit, self.note, self.wait_s)

    def follow(self, job, inner):
        """The future a step waits for: the job's, or the wait for the process that compiles its key."""
        return self.waits.follow(job, inner) if self.waits is not None and job.claim is not None else inner

    def close(self) -> None:
        if self.waits is not None:
            self.waits.close()

    def note(self, line: str) -> None:
        self.notes.append(line)
        (self.on_note or log.warning)(line)

    def node(self, pairs) -> dict:
        """Of these keys, how many are done on the node, and by how many processes."""
        marks = [m for m in (self._mark(*p) for p in pairs) if m is not None]
        return {"node_keys": len(marks), "node_processes": len({(m.get("host"), m.get("process")) for m in marks})}

    def _mark(self, backend: str, key: str) -> dict | None:
        claim = self.claim(backend, key)
        return read_doc(os.path.join(claim.path, DONE)) if claim is not None else None
