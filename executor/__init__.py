"""warmup-planner executor: replays an expanded plan on the GPU and proves what compiled.

Importing this package is cheap and never imports torch or triton: backends and
kernels load lazily, and an optional backend that is missing makes its steps
`unavailable` instead of failing at import.

    cli.py             `warmup execute`: plan and execute, or execute an expanded plan exactly as planned
    run.py             a flat loop over the plan's steps, stage by stage, through their handlers
    hooks.py           what the loop tells the rest of a run: a stage starts or ends, a step runs
    context.py         what a run is given and what its handlers see: the options, the backends, the model runner
    registry.py        the explicit registries: step kind -> handler, and backend name -> class
    records.py         what became of one step: its status, the backend that ran it, its calls, time and JIT counts
    report.py          the execution report, written as JSON, atomically, always
    progress.py        progress per stage, with counts and an ETA, on stderr
    handlers/          step handlers: one small module per way a step runs
    backends/          kernel backends: each a module behind one protocol
    kernels/           the executor's own Triton kernels
    runner/            model runners that execute the plan's batch steps (prefill, sample, decode, cleanup)
    autotune.py        autotuning the executor's own kernels: per (kernel, N, K, device), the fastest config per bucket
    precompile/        `warmup execute --jobs N`: the plan's distinct variants compiled in N worker processes first
    worker_preload.py  imported once by the precompile pool's fork server, before it forks every worker
    jit_monitor.py     counting every JIT compile, per step, and catching the ones that happen after the warmup
    verify.py          the hot-path check (`--verify N`): after the seal, N random calls inside the plan's ranges
    triton_generic.py  nothing of Triton's compiles after ready for a value class the warmup did not see
    dynamo_stance.py   after ready, a torch.compile function that would compile runs eagerly instead
    caches/            cache families: one module per cache a warmup or a vLLM start-up fills, and where each lives
    bundle/            warmup bundles: what a warmup put in the caches, packed, verified and installed elsewhere
    environ.py         environment variables set for a block and restored after it
"""
