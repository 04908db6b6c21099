"""`cudagraph` steps: the model runner captures the plan's graph sizes (largest first)."""


def handle(step, ctx) -> dict:
    runner = ctx.get_runner()
    ctx.capturing = True
    try:
        runner.capture_cudagraphs(step)
    finally:
        ctx.capturing = False
    graphs = step.planned_calls()
    ctx.tick(graphs)
    return {"backend": "runner", "kernel_calls": graphs}
