"""`kernel` steps: compile-only launches of one runner kernel, one per planned compile key."""

FAMILY = "kernel"


def handle(step: dict, ctx) -> dict:
    backend = ctx.backend_for(FAMILY, step)
    calls = backend.kernel(step, list(step["variants"]), ctx.tick)
    return {"backend": backend.name, "kernel_calls": calls}
