"""Keyed kernel steps (gemm, grouped_gemm, attention, kernel): the backend's method of the
step's family, called with the step and its call values (planner.plan.steps ``call_values``):
M-values, M_sums, attention batches, or runner-kernel launches."""


def handle(step, ctx) -> dict:
    backend = ctx.backend_for(step)
    calls = getattr(backend, step.family)(step, step.call_values(), ctx.tick)
    return {"backend": backend.name, "kernel_calls": calls}
