"""What each precompile job cost at the last start, so that the next one runs the longest first.

``warmup-job-costs.json`` beside the manifest (in the Triton cache directory) maps a backend and
compile key to the seconds its job took, the latest run's figure for each key. A key never measured
costs its backend's ``expected_job_s`` (an H100's figures: a FlashInfer module about 100 s, a
DeepGEMM kernel about 4 s, a Triton variant about 1 s). Order is an optimisation: a file that is
missing, unreadable or stale only changes which job starts first. Written atomically; concurrent
writers may lose a figure, never the file.
"""

from __future__ import annotations

import json
import os

from planner.output import write_atomic

from ...registry import backend_attr
from .manifest import manifest_path, read_doc

COSTS_NAME = "warmup-job-costs.json"
COSTS_FORMAT = "warmup-job-costs/v1"


def costs_path() -> str | None:
    """Beside the manifest (none where Triton's cache is remote: nowhere local to keep it)."""
    manifest = manifest_path()
    return os.path.join(os.path.dirname(manifest), COSTS_NAME) if manifest else None


def _read(path: str | None) -> dict:
    costs = read_doc(path, COSTS_FORMAT).get("costs")
    if not isinstance(costs, dict):
        return {}
    return {k: float(v) for k, v in costs.items() if isinstance(v, (int, float)) and v >= 0}


class JobCosts:
    """The measured seconds of each (backend, key), and the order they give."""

    def __init__(self, path: str | None = None):
        self.path = costs_path() if path is None else path
        self.seconds = _read(self.path)
        self._defaults: dict[str, float] = {}

    @staticmethod
    def name(job) -> str:
        return f"{job.backend}:{job.key}"

    def of(self, job) -> tuple[float, bool]:
        """A job's cost in seconds, and whether it was measured (else its backend's guess)."""
        measured = self.seconds.get(self.name(job))
        if measured is not None:
            return measured, True
        if job.backend not in self._defaults:
            self._defaults[job.backend] = float(backend_attr(job.backend, "expected_job_s", 1.0))
        return self._defaults[job.backend], False

    def order(self, slots: list) -> list:
        """The slots longest first; plan order among equals (deterministic)."""
        return sorted(slots, key=lambda s: (-self.of(s.job)[0], s.job.index))

    def record(self, results: list) -> int:
        """Keep the seconds of every job that compiled in a worker; returns how many were written."""
        fresh = {f"{r.backend}:{r.key}": round(r.wall_s, 3) for r in results
                 if r.status == "ok" and r.pid is not None and (r.compiled or r.deep_gemm_jit)}
        if not self.path or not fresh:
            return 0
        merged = {**_read(self.path), **fresh}
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            write_atomic(self.path, json.dumps({"format": COSTS_FORMAT, "costs": dict(sorted(merged.items()))},
                                               indent=1) + "\n")
        except OSError:
            return 0
        self.seconds.update(fresh)
        return len(fresh)
