"""`autotune` steps: the backend named by the step's `library` tunes (or loads its tuned results).

Never inside CUDA-graph capture: the context says when a capture is running, and the
backends also ask torch. Kernel calls are the benchmarks run (0 when every table loaded).
"""

from ..autotune import ensure_not_capturing


def handle(step, ctx) -> dict:
    ensure_not_capturing(ctx.capturing)
    backend = ctx.backend_for(step)
    before = ctx.step_ticks
    details = backend.autotune(step, ctx.tick, ctx) or {}
    return {"backend": backend.name, "kernel_calls": ctx.step_ticks - before, "details": details}
