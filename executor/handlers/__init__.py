"""Step handlers: one small module per way a step runs.

A handler is ``handle(step, ctx) -> dict`` with at least ``kernel_calls`` and
``backend``; it raises ``Unavailable`` / ``Skipped`` (executor.backends.base) for
those statuses and anything else for `failed`. executor.registry maps step classes to them.

    family.py     gemm, grouped_gemm, attention, kernel: the backend method of the step's family
    autotune.py   autotune: the backend tunes (never during CUDA-graph capture)
    runner.py     prefill, decode, cleanup, sample: the model runner's method for the step
    cudagraph.py  cudagraph: the model runner captures the plan's sizes
"""
