"""Each DeepGEMM kernel counted once, for the job that compiled it, whichever process ran that job.

DeepGEMM is counted by the entries that appear in its cache directory, which every worker of the
pool, the main process, and the other processes of a node (through the claims) share: a job sees
its neighbours' kernels appear too. barrier.py applies this once every DeepGEMM job is done.
"""

from __future__ import annotations

from ..jobs.job import JobResult


def attribute_deep_gemm(results: list) -> None:
    """One job per DeepGEMM kernel. The workers share one cache, so a job's monitor also sees the
    kernels its neighbours compiled while it ran (16 workers made 58 jobs report 133 kernels of 60);
    each kernel goes to the earliest-ending job that saw it: its compiler, whose job ends right
    after the kernel lands (a neighbour would have to end within that moment to take it)."""
    owner: dict = {}
    for result in sorted(results, key=lambda r: (r.end or 0.0, r.key)):
        for entry in result.deep_gemm_entries:
            owner.setdefault(entry, result)
    for result in results:
        result.deep_gemm_entries = [e for e in result.deep_gemm_entries if owner[e] is result]
        if result.deep_gemm_jit is not None:
            result.deep_gemm_jit = len(result.deep_gemm_entries)


def compiled_elsewhere(results: list) -> list:
    """The jobs of other processes that compiled the keys these waited for or found done, from their
    done marks (claims/on_disk.py): the entries each saw and its end. A kernel is then counted for
    the job, of any process, that ended first after seeing it: another process's kernels are not
    this one's compiles (nor the main process's), and what its jobs saw of ours stays ours."""
    out = []
    for r in results:
        claim = r.claim or {}
        if claim.get("how") in ("waited", "done") and claim.get("entries"):
            out.append(JobResult(key=r.key, keys=[], step=r.step, backend=r.backend, kind=r.kind, whole_step=False,
                                 values=0, end=claim.get("end") or float("inf"),
                                 deep_gemm_entries=list(claim["entries"])))
    return out
