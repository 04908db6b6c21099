"""What the pool's book tells the report and the manifest.

The summary's keys are read by executor/report.py (render_precompile), by the bench trace
(bench/vllm_plugin_trace.py: ``created``, ``records`` with start_s/end_s/pid/backend/key) and
by the README: they stay as they are. A DeepGEMM kernel counts with Triton's variants (compiled
is every variant compiled, loaded every one read from a disk cache; DeepGEMM loads only where
its layout records them: 2.8), and once, for the job it was attributed to (deep_gemm_counts.py).
"""

from __future__ import annotations


def pool_summary(pre) -> dict:
    """The pool's summary for the report (a Precompiler's)."""
    d = pre.decision
    out = {"status": pre.status, "reason": pre.reason, "jobs_option": d.requested, "workers": d.workers,
           "jobs": len(pre.book.slots), "keys_planned": d.keys_planned, "keys_in_manifest": d.keys_in_manifest,
           "manifest": pre.manifest.path, "manifest_keys_written": pre.manifest.written}
    if pre.book.slots:
        results = pre.book.results()
        out.update(pre.timings.report(results),
                   **pool_counts(results, pre.barrier.entries(), pre.barrier.writes, pre.timings.created))
    if pre.lane_workers:
        out["lanes"] = dict(pre.lane_workers)  # lane -> its workers (workers/lanes.py)
    if pre.lane_waits:
        out["lane_waits"] = dict(pre.lane_waits)  # lane -> what its barrier waited, and what ran on
    if pre.claims.roots:
        out["claims"] = claim_counts(pre.claims, pre.book)
    return out


def claim_counts(claims, book) -> dict:
    """This process's share of the keys it did not find in the manifest (claims/node.py): those it
    compiled, those another process compiled (waited for, or found done: loaded), its takeovers'
    lines, and the node's count of those keys done (once each: the distinct keys) and by how many
    processes."""
    how = [(r.claim or {}).get("how") for r in book.results() if r.status == "ok"]
    pairs = claims.loaded | {(s.job.backend, s.job.key) for s in book.slots}
    return {"compiled": len(how) - how.count("waited") - how.count("done"), "waited": how.count("waited"),
            "loaded": len(claims.loaded) + how.count("done"), "taken_over": list(claims.notes),
            **claims.node(pairs), "dirs": sorted(set(claims.roots.values()))}


def failure_line(results: list) -> str | None:
    """Why a pool whose jobs all ran did not help, in one line (None: a job succeeded, or none ran)."""
    if results and not any(r.status == "ok" for r in results):
        first = next((r for r in results if r.error), results[0])
        return f"no job succeeded ({first.status}: {first.error})"
    return None


def pool_counts(results: list, deep_gemm: set, writes_deep_gemm, created: float | None) -> dict:
    """What the jobs compiled and loaded, their statuses, and each job's record."""
    dg_loads = _sum(r.deep_gemm_loads for r in results)
    out = {"compiled": _sum([r.compiled for r in results] + ([len(deep_gemm)] if deep_gemm else [])),
           "disk_loads": _sum([r.disk_loads for r in results] + [dg_loads]),
           "deep_gemm_jit": len(deep_gemm) if any(writes_deep_gemm(r.backend) for r in results) else None,
           "deep_gemm_loads": dg_loads}
    for status in ("ok", "failed", "unavailable", "cancelled"):
        out[status] = sum(r.status == status for r in results)
    out["records"] = [r.public(created) for r in results]
    return out


def step_share(step_jobs, waited: float) -> dict:
    """A step's own jobs (those of the keys it reaches first), for its record in the report."""
    results = [s.result for s in step_jobs.jobs if s.result is not None]
    dg = {e for r in results for e in r.deep_gemm_entries}
    return {
        "keys": len(step_jobs.keys), "jobs": len(step_jobs.jobs),
        "compiled": _sum([r.compiled for r in results] + ([len(dg)] if dg else [])),
        "deep_gemm_compiled": len(dg),
        "disk_loads": _sum(r.disk_loads for r in results),
        "compile_s": round(sum(r.wall_s for r in results), 4),
        "failed": sum(r.status != "ok" for r in results),
        "wait_s": round(waited, 4),
    }


def cached_keys(book, records: list) -> dict:
    """{backend: keys} now in the disk cache: the ok jobs' keys, and those of the steps that ran
    ok on their planned backend (with --jobs 1 these are the only ones: the manifest still learns)."""
    add: dict = {}
    for result in book.results():
        if result.status == "ok":
            add.setdefault(result.backend, set()).update(result.keys)
    steps = {s.id: s for s in book.steps}
    for record in records:
        info, step = book.info.get(record.id), steps.get(record.id)
        if info is None or step is None or record.status != "ok":
            continue
        if record.backend != getattr(step, "backend", None) or record.backend not in book.backends:
            continue
        for backend, key in info.keys:
            add.setdefault(backend, set()).add(key)
    return add


def _sum(values, empty=None):
    values = [v for v in values if v is not None]
    return sum(values) if values else empty
