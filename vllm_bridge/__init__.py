"""The vLLM plugin (entry point group ``vllm.general_plugins``): vLLM warms up from a plan. It patches
vLLM's GPU Worker so that each worker makes the plan for the live VllmConfig and runs it through the
executor, on vLLM's own kernels and caches, in place of what the plan models of vLLM's warmup; a
failure of its own never stops vLLM. `warmup engine --from-vllm` lives here too.

Its folders are its floors, top to bottom (tests/test_layers.py holds them): a module imports its own
floor or one below, never one above, lazy imports included. The entry modules (plugin.py, cli.py,
ahead.py) put the rest together; warmup/ and bundles/ stand side by side, and so do kernels/ and
engine/ (neither of a pair imports the other); the base modules here import no sub-package. Every
``__init__.py`` imports nothing: vLLM imports vllm_bridge.plugin in every process, and importing a
sub-package imports none of its siblings.

    plugin.py            ``register``, called by vLLM in every process: the settings read, the Worker patched
    cli.py               `warmup engine --from-vllm`: vLLM's own EngineArgs -> VllmConfig -> the engine config
    ahead.py             the pool's long poles started from vLLM's first process, before its engine process exists
    warmup/              the plan-driven warmup inside one vLLM worker: its plan, the executor's options, the log
    bundles/             start-up bundles inside vLLM: WARMUP_BUNDLE fetched and installed, WARMUP_BUNDLE_OUT written
    kernels/             the executor's backends on vLLM's own kernels (DeepGEMM as vLLM imports it, vLLM's Triton)
    engine/              the engine config of what vLLM resolved, and stand-ins for a machine without a GPU
    settings.py          the plugin's settings: what the user set in the environment
    releases.py          what the plugin touches in each supported vLLM release: the names, no vLLM import
    fixes.py             start-up fixes vLLM made after a release, applied where the release row says it lacks them
    step_aside.py        the plugin steps aside: a failure of its own never stops vLLM
    engine_core_start.py how vLLM starts its engine core: by fork where measured (one GPU) or asked for
    compile_load.py      vLLM's AOT-compiled model loaded in a thread while the weights load (where asked)
    model_inspection.py  vLLM's model-class inspection in a forked child, not a fresh interpreter (where asked)
    flashinfer_flags.py  FlashInfer's nvcc spreads each compile unit over the cores, where its workspace allows
    mega_aot.py          vLLM's mega AOT artifact asked for where its torch takes it and its default is off
    timeline.py          one start's timeline, process by process: where a `vllm serve` start spends its time
    patches.py           one method of a vLLM class wrapped once per process, vLLM's function kept on the class
"""
