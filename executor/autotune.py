"""Autotune the executor's own kernels: per (kernel, N, K, device), the fastest config per bucket.

The `autotune` step lists the token buckets and the GEMM shapes. For each shape this
benchmarks a small candidate set at every bucket, keeps the fastest, and writes the
table (``<root>/<kernel>,N=..,K=..,device=...json``, the format of vLLM's tuned block-FP8
configs) atomically: a crash leaves the old file or the new one, never half of one.
A table that already covers every bucket is loaded instead, so a later run skips
tuning (``retune=True`` forces it). The kernels pick from the table by nearest M.

This module is pure Python: the benchmark is a callable handed in by the backend
(executor.backends.triton times real launches with CUDA events), so the logic is
tested on CPU with a fake clock.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Iterable

Bench = Callable[[int, dict], float]  # (M, config) -> milliseconds (math.inf: cannot run)


class CaptureError(RuntimeError):
    """Tuning was asked for while a CUDA graph is being captured."""


def ensure_not_capturing(capturing: bool) -> None:
    if capturing:
        raise CaptureError("refusing to autotune during CUDA-graph capture: benchmarking launches "
                           "and synchronizes, which capture forbids")


def table_covers(table: dict, buckets: Iterable[int]) -> bool:
    return set(int(b) for b in buckets) <= set(int(k) for k in table)


def tune_shape(buckets: list[int], candidates: list[dict], bench: Bench,
               tick: Callable[[int], None] = lambda n: None) -> tuple[dict, dict]:
    """The fastest candidate per bucket -> (table {M: config}, timings {M: {index: ms}})."""
    table, timings = {}, {}
    for m in sorted(set(buckets)):
        row = {}
        for i, config in enumerate(candidates):
            try:
                row[i] = float(bench(m, config))
            except Exception as e:  # noqa: BLE001 - a candidate that cannot run is never chosen
                if type(e).__name__ == "OutOfMemoryError":
                    raise
                row[i] = math.inf
            tick(1)
        finite = {i: t for i, t in row.items() if math.isfinite(t)}
        if not finite:
            raise RuntimeError(f"autotune: no candidate config runs at M={m}")
        best = min(finite, key=lambda i: (finite[i], i))
        table[m] = dict(candidates[best])
        timings[m] = {str(i): (round(t, 5) if math.isfinite(t) else None) for i, t in row.items()}
    return table, timings


def tune_step(step, *, device_name: str, root, retune: bool, candidates: Callable[[str], list[dict]],
              bench_for: Callable[[str, int, int, int], Bench], tick: Callable[[int], None] = lambda n: None,
              configs_module=None) -> dict:
    """Tune (or load) the table of every shape of one autotune step; returns report details.

    ``bench_for(kernel, n, k, max_m)`` returns the shape's benchmark (allocating its
    scratch once); ``candidates(kernel)`` the configs to try. ``configs_module`` is
    executor.kernels.configs (table paths, load, atomic save).
    """
    if configs_module is None:
        from .kernels import configs as configs_module
    cfg = configs_module
    buckets = sorted(set(step.buckets or [step.num_tokens]))
    candidate_sets: dict = {}
    tables = []
    for shape in step.shapes or ():
        kernel, n, k = shape.kernel, shape.n, shape.k
        path = cfg.table_path(kernel, n, k, device_name, root)
        entry = {"kernel": kernel, "n": n, "k": k, "path": str(path), "buckets": buckets}
        start = time.perf_counter()
        previous = None
        if path.is_file():
            try:
                previous = cfg.load_table(path)
            except (OSError, ValueError) as e:
                entry["note"] = f"existing table unreadable, retuned: {e}"
        if previous is not None and not retune and table_covers(previous, buckets):
            entry.update(status="loaded", table={str(m): c for m, c in previous.items()})
            tables.append(entry)
            continue
        bench = bench_for(kernel, n, k, max(buckets))
        tried = candidate_sets.setdefault(kernel, candidates(kernel))
        table, timings = tune_shape(buckets, tried, bench, tick)
        cfg.save_table_atomic(path, table)
        entry.update(status="retuned" if previous is not None else "tuned",
                     table={str(m): c for m, c in table.items()}, timings_ms=timings,
                     wall_s=round(time.perf_counter() - start, 3))
        tables.append(entry)
    return {"buckets": buckets, "root": str(root), "device_name": device_name, "tables": tables,
            "candidates": candidate_sets,  # timings_ms are keyed by index into these
            "tuned": sum(t["status"] != "loaded" for t in tables),
            "loaded": sum(t["status"] == "loaded" for t in tables)}
