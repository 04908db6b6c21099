"""The vLLM plugin (entry point group ``vllm.general_plugins``): vLLM warms up from a plan. It patches
vLLM's GPU Worker so that each worker makes the plan for the live VllmConfig and runs it through the
executor, on vLLM's own kernels and caches, in place of what the plan models of vLLM's warmup; a
failure of its own never stops vLLM. `warmup engine --from-vllm` lives here too.

    plugin.py            ``register``, called by vLLM in every process: the settings read, the Worker patched
    settings.py          the plugin's settings: what the user set in the environment
    releases.py          what the plugin touches in each supported vLLM release: the names, no vLLM import
    fixes.py             start-up fixes vLLM made after a release, applied where the release row says it lacks them
    step_aside.py        the plugin steps aside: a failure of its own never stops vLLM
    engine_core_start.py how vLLM starts its engine core: by fork where measured (one GPU) or asked for
    ahead.py             the pool's long poles started from vLLM's first process, before its engine process exists
    timeline.py          one start's timeline, process by process: where a `vllm serve` start spends its time
    warmup.py            the plan-driven warmup inside one vLLM worker (the patched methods call it)
    worker_plan.py       the plan one worker runs: its engine config, the plan made for it, the plan as run
    engine.py            the engine config of what vLLM resolved (`engine_from_vllm_config`)
    executor_options.py  how the executor runs a plan inside one worker: its options, and the precompile pool's
    runner.py            VllmWorkerRunner: the executor's ModelRunner protocol on vLLM's worker
    deep_gemm.py         the executor's DeepGEMM backend on the DeepGEMM vLLM itself imports, into vLLM's cache
    triton.py            `vllm_triton`: vLLM's own Triton kernels that vLLM 0.25 leaves cold, warmed through vLLM's code
    generic_variants.py  the generic Triton variants in one worker, built in the background and loaded before ready
    flashinfer_waits.py  vLLM's own first calls to FlashInfer JIT modules the pool was building: what each waited
    after_ready.py       what the plugin sets in a worker once its warmup is sealed (ready): Dynamo's stance
    phases.py            what vLLM's start-up compiled, phase by phase and stage by stage, in its log and the report
    log_lines.py         the plugin's lines in vLLM's log: the device lane's barrier, the pool, each stage, the summary
    bundle.py            start-up bundles inside vLLM: WARMUP_BUNDLE installed, WARMUP_BUNDLE_OUT written after ready
    bundle_source.py     WARMUP_BUNDLE as a file this process can install (a file, a directory, an `oci://` reference)
    bundle_writer.py     a start-up bundle written after ready, beside vLLM, by a daemon thread
    cli.py               `warmup engine --from-vllm`: vLLM's own EngineArgs -> VllmConfig -> the engine config
    patches.py           one method of a vLLM class wrapped once per process, vLLM's function kept on the class
    standins.py          stand-ins that let vLLM's own Python run on a machine without a GPU
"""
