"""Whether a run gets a precompile pool, and for which jobs; or why not, in one line.

No pool with --jobs 0 or 1 (the variants compile in the main process), when nothing the plan
warms can compile in workers here (no CUDA device for the GPU backends, a library missing), or
when the manifest lists every key (skipped: the disk caches hold them). It is decided before a
process starts, so that a run that needs no pool pays nothing for one, and it is tested without
processes (tests/executor/test_precompile_pieces.py).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

from ...caches import deep_gemm_install
from ...registry import backend_attr
from .from_plan import PRECOMPILE_BACKENDS

MAX_DEFAULT_JOBS = 32


def default_jobs() -> int:
    """--jobs when not given: the CPU cores this process may use, at most MAX_DEFAULT_JOBS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_JOBS))


@dataclass
class Decision:
    """What start() knows, filled as it goes (a start that fails midway keeps what it found)."""

    requested: int                # --jobs
    backends: tuple               # the backends whose variants workers compile (narrowed to those usable here)
    device: str
    keys_planned: int = 0         # distinct (backend, key) pairs the plan reaches through them
    keys_in_manifest: int = 0
    keys_done_elsewhere: int = 0  # of the others, those another process (or run) compiled (claims/node.py)
    workers: int = 0              # worker processes: --jobs, at most one per job
    status: str = "ran"           # ran | off | skipped
    reason: str | None = None

    @classmethod
    def of(cls, options) -> "Decision":
        return cls(options.jobs, tuple(options.precompile_backends or PRECOMPILE_BACKENDS), str(options.device))

    def no(self, status: str, reason: str) -> "Decision":
        self.status, self.reason = status, reason
        return self


def decide(d: Decision, book, manifest, claims=None) -> Decision:
    """Fill `d`, and open a job in `book` for every planned key the run's manifest (a RunManifest)
    does not list and, with `claims` (claims/node.py), no other process has compiled: both are skipped."""
    d.backends, why_not = usable_backends(d.backends, d.device)
    planned = book.plan(d.backends)
    d.keys_planned = len(planned)
    if d.requested <= 1:
        return d.no("off", f"--jobs {d.requested}: variants compile in the main process")
    if not planned:
        return d.no("off", "; ".join(why_not) or "nothing to precompile (no gemm, grouped_gemm, kernel or "
                                                 f"attention step of {', '.join(d.backends)})")
    have = manifest.listed()
    d.keys_in_manifest = len(planned & have)
    if claims is not None:
        claims.open(manifest.fingerprint(), d.backends)
        have = have | claims.done(planned - have)
        d.keys_done_elsewhere = len(claims.loaded)
    if not book.open(have):
        others = f"; {d.keys_done_elsewhere} compiled by other processes" if d.keys_done_elsewhere else ""
        return d.no("skipped", f"all {d.keys_planned} compile keys are in the disk cache (manifest "
                               f"{manifest.path}{others})")
    d.workers = min(d.requested, len(book.slots))
    return d


def usable_backends(backends: tuple, device: str) -> tuple[tuple, list[str]]:
    """The backends that can compile here (a CUDA device, their library installed), and why the
    others cannot."""
    why = []
    if not device.startswith("cuda"):
        gpu = [b for b in backends if backend_attr(b, "compiles_for_cuda", False)]
        if gpu:
            why.append(f"device {device}: {', '.join(gpu)} compile nothing off a CUDA device")
        backends = tuple(b for b in backends if b not in gpu)
    for backend in list(backends):
        missing = _missing_library(backend)
        if missing:
            why.append(f"{backend}: {missing} is not installed")
            backends = tuple(b for b in backends if b != backend)
    return backends, why


def _missing_library(backend: str) -> str | None:
    """The first library a backend's workers need that is not installed (None: all there)."""
    if backend == "triton" and importlib.util.find_spec("triton") is None:
        return "triton"
    if backend == "deep_gemm":
        if importlib.util.find_spec("torch") is None:
            return "torch"
        if deep_gemm_install.find_install() is None:
            return "deep_gemm"
    return None
