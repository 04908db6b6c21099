"""`cudagraph` steps: the model runner captures the plan's graph sizes (largest first)."""


def handle(step: dict, ctx) -> dict:
    runner = ctx.get_runner()
    ctx.capturing = True
    try:
        runner.capture_cudagraphs(step)
    finally:
        ctx.capturing = False
    graphs = len(step.get("sizes") or []) + len(step.get("uniform_decode_sizes") or [])
    ctx.tick(graphs)
    return {"backend": "runner", "kernel_calls": graphs}
