"""`null`: walks the plan and counts the calls it would make, with no GPU and no kernels.

For dry runs (``warmup execute --dry-run``) and the CPU tests of the executor: every
family is implemented, nothing is imported, nothing compiles.
"""

from __future__ import annotations

from .base import BaseBackend


class NullBackend(BaseBackend):
    name = "null"
    families = ("gemm", "grouped_gemm", "attention", "autotune", "kernel")

    def gemm(self, step, m_values, tick):
        tick(len(m_values))
        return len(m_values)

    def grouped_gemm(self, step, m_values, tick):
        align = step.alignment
        bad = [m for m in m_values if m % align]
        if bad:
            raise ValueError(f"grouped GEMM M_sum values must be multiples of the alignment {align}: {bad[:5]}")
        tick(len(m_values))
        return len(m_values)

    def attention(self, step, batches, tick):
        tick(len(batches))
        return len(batches)

    def kernel(self, step, launches, tick):
        tick(len(launches))
        return len(launches)

    def autotune(self, step, tick, ctx):
        tick(1)
        return {"library": step.library, "dry_run": True,
                "buckets": None if step.buckets is None else list(step.buckets),
                "shapes": len(step.shapes or ()), "note": "null backend: nothing tuned"}
