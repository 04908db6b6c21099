"""`grouped_gemm` steps: a MoE weight (w13 or w2) in the contiguous layout, once per M_sum."""

FAMILY = "grouped_gemm"


def handle(step: dict, ctx) -> dict:
    backend = ctx.backend_for(FAMILY, step)
    calls = backend.grouped_gemm(step, list(step["m_values"]), ctx.tick)
    return {"backend": backend.name, "kernel_calls": calls}
