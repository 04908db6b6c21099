"""Scheduler and sample steps (prefill, decode, cleanup, sample): handed to the model runner
as planned, through the runner method the step names (``execute_model``, ``sample_tokens``).

The runner implements executor.runner.protocol.ModelRunner; `--runner none` skips
these steps, and without a runner module they are `unavailable`.
"""


def handle(step, ctx) -> dict:
    getattr(ctx.get_runner(), step.runner_method)(step)
    ctx.tick(1)
    return {"backend": "runner", "kernel_calls": 1}
