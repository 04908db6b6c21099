"""`attention` steps: one prefill attention call for one layer key at num_tokens (one sequence)."""

FAMILY = "attention"


def handle(step: dict, ctx) -> dict:
    backend = ctx.backend_for(FAMILY, step)
    calls = backend.attention(step, [[int(step["num_tokens"])]], ctx.tick)
    return {"backend": backend.name, "kernel_calls": calls}
