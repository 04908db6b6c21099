"""`gemm` steps: one weight shape, the kernel called once per M-value."""

FAMILY = "gemm"


def handle(step: dict, ctx) -> dict:
    backend = ctx.backend_for(FAMILY, step)
    calls = backend.gemm(step, list(step["m_values"]), ctx.tick)
    return {"backend": backend.name, "kernel_calls": calls}
