"""Batch steps (prefill, decode, cleanup, sample): handed to the model runner as planned.

The runner implements executor.runner.protocol.ModelRunner; `--runner none` skips
these steps, and without a runner module they are `unavailable`.
"""


def handle_execute(step: dict, ctx) -> dict:
    ctx.get_runner().execute_model(step)
    ctx.tick(1)
    return {"backend": "runner", "kernel_calls": 1}


def handle_sample(step: dict, ctx) -> dict:
    ctx.get_runner().sample_tokens(step)
    ctx.tick(1)
    return {"backend": "runner", "kernel_calls": 1}
