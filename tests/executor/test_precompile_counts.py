"""One count per fact (issue 25): a DeepGEMM kernel the precompile pool compiled is counted once,
the same in the pool's line, the stage table and the JSON report.

Workers share DeepGEMM's cache directory, and each job's JIT monitor counts the entries that appear
in it while the job runs: its own kernel and its neighbours'. A stand-in DeepGEMM backend writes one
complete legacy-layout entry per job, slowly enough that the jobs of 4 workers overlap; the pool's
summary, the per-step records, the stage table and the rendered lines must all say the number of
distinct entries (before attribution the steps summed to several times that)."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sys
import time
import types

import pytest

from executor import registry
from executor.backends.base import BaseBackend
from executor.report import render_precompile
from planner.plan import steps as st
from planner.plan.expanded import ExpandedPlan

KEYS = [f"dg{i}" for i in range(8)]


class StandInDeepGemm(BaseBackend):
    """Writes one complete DeepGEMM 2.5-layout entry per value into $DG_JIT_CACHE_DIR (once)."""

    name = "stand_in_dg"
    families = ("gemm",)
    jit_cache = "deep_gemm"

    def available(self):
        # The JIT monitor watches DeepGEMM's cache once a module named deep_gemm is imported. A pool's
        # worker is a process of its own: the stand-in module goes there. The main process gets it from
        # the test's fixture (or the script the test starts), so none is left behind in pytest's.
        if multiprocessing.parent_process() is not None:
            sys.modules.setdefault("deep_gemm", types.ModuleType("deep_gemm"))
        elif "deep_gemm" not in sys.modules:
            return False, "the stand-in deep_gemm module is the test's to install (fixture stand_in_deep_gemm)"
        return True, ""

    def gemm(self, step, m_values, tick):
        cache = os.path.join(os.environ["DG_JIT_CACHE_DIR"], "cache")
        os.makedirs(cache, exist_ok=True)
        for m in m_values:
            digest = hashlib.sha256(f"{step.id}:{m}".encode()).hexdigest()[:32]
            entry = os.path.join(cache, f"kernel.sm90_fp8_gemm_1d2d.{digest}")
            if not os.path.isdir(entry):
                time.sleep(0.4)  # "nvcc": long enough for the neighbours' jobs to see this one land
                temp = f"{entry}.tmp{os.getpid()}"
                os.makedirs(temp)
                for name in ("kernel.cu", "kernel.cubin"):
                    with open(os.path.join(temp, name), "w") as f:
                        f.write(digest)
                os.rename(temp, entry)
        tick(len(m_values))
        return len(m_values)


@pytest.fixture
def stand_in_deep_gemm(monkeypatch):
    """A module named deep_gemm in this process for the test's length (monkeypatch takes it out)."""
    monkeypatch.setitem(sys.modules, "deep_gemm", types.ModuleType("deep_gemm"))


def test_each_deep_gemm_kernel_of_the_pool_is_counted_once_everywhere(tmp_path, monkeypatch, stand_in_deep_gemm):
    from executor.run import Options, execute

    monkeypatch.setitem(registry.BACKENDS, "stand_in_dg", ("test_precompile_counts", "StandInDeepGemm"))
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "dg"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    gemm = st.Gemm("s/a", "s", kernel="fp8_gemm_nt", backend="stand_in_dg", n=256, k=128, block_size=(128, 128),
                   m_values=tuple(range(1, len(KEYS) + 1)),
                   variants=tuple(st.Variant(k, m) for m, k in enumerate(KEYS, 1)), exact=True)
    plan = ExpandedPlan(plan="p", engine="e", planner_version="0", digest="", inputs={}, steps=(gemm,))
    report = execute(plan, None, Options(jobs=4, precompile_backends=("stand_in_dg",), device="cpu",
                                          runner="none", jit_monitor="warn"))
    pre = report.precompile
    if pre["status"] != "ran":
        pytest.skip(f"no pool here: {pre['reason']}")
    entries = os.listdir(tmp_path / "dg" / "cache")
    assert len(entries) == len(KEYS)
    assert pre["deep_gemm_jit"] == pre["compiled"] == len(KEYS)
    assert sum(r.get("deep_gemm_jit") or 0 for r in pre["records"]) == len(KEYS)
    assert report.steps[0].precompile["compiled"] == len(KEYS)
    stage = report.stage_summary("s")
    assert stage["compiled"] == stage["compiled_pool"] == len(KEYS) and stage["compiled_main"] == 0
    assert f"{len(KEYS)} compiled" in render_precompile(pre)


def test_precompile_line_counts_deep_gemm_kernels_once():
    from executor.precompile.jobs.job import JobResult
    from executor.precompile.pool.barrier import DeepGemmBarrier
    from executor.precompile.pool.book import JobBook, Slot
    from executor.precompile.pool.summary import pool_counts

    book = JobBook([], lambda step: step.backend)
    results = [JobResult(key=f"k{i}", keys=[f"k{i}"], step="s", backend="deep_gemm", kind="gemm", whole_step=False,
                         values=1, pid=1, compiled=0, disk_loads=0, deep_gemm_jit=2,
                         deep_gemm_entries=[f"kernel.a.{i}", "kernel.transpose_fp32.0"]) for i in range(3)]
    book.slots = [Slot(job=None, result=r) for r in results]
    barrier = DeepGemmBarrier(book)
    counts = pool_counts(book.results(), barrier.entries(), barrier.writes, None)
    assert (counts["compiled"], counts["deep_gemm_jit"]) == (4, 4)  # 3 GEMMs + the shared transpose
    assert "4 compiled" in render_precompile({"status": "ran", "jobs": 3, "workers": 3, **counts})
