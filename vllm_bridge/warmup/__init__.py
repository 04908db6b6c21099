"""The plan-driven warmup inside one vLLM worker: the patched Worker methods (vllm_bridge/plugin.py)
call worker.py's WorkerWarmup, which makes the worker's plan, runs it through the executor on vLLM's
own kernels and caches, and says what vLLM's start-up compiled in vLLM's log and the report.

A floor of vllm_bridge's (tests/test_layers.py): it imports kernels/, engine/ and the base modules
(settings, releases, step_aside, timeline), never bundles/ beside it or the entry modules above.

    worker.py            WorkerWarmup: the plan-driven warmup inside one vLLM worker (the patched methods call it);
                         the coordinator of the concerns below, and its one way to give way (step_aside)
    worker_plan.py       the plan one worker runs: its engine config, the plan made for it, the plan as run
    pool_lane.py         the precompile pool in one worker: started at load_model, its device lane finished after
                         vLLM's profile run, ended when the worker fails; a failure is a cause, never a step aside
    swaps.py             vLLM's names swapped for the length of its call (profile run, kernel_warmup, batches, capture)
    worker_report.py     one worker's report and summary line: checked at load_model, written at ready, amended after
    executor_options.py  how the executor runs a plan inside one worker: its options, and the precompile pool's
    runner.py            VllmWorkerRunner: the executor's ModelRunner protocol on vLLM's worker
    generic_variants.py  the generic Triton variants in one worker, built in the background and loaded before ready
    flashinfer_waits.py  vLLM's own first calls to FlashInfer JIT modules the pool was building: what each waited
    after_ready.py       what the plugin sets in a worker once its warmup is sealed (ready): Dynamo's stance
    phases.py            what vLLM's start-up compiled, phase by phase and stage by stage, in its log and the report
    log_lines.py         the plugin's lines in vLLM's log: the device lane's barrier, the pool, each stage, the summary
"""
