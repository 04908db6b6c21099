"""Cache families: one module per cache a warmup or a vLLM start-up fills, and the one resolver of
where each lives (issue 43 item 1).

    roots.py              where the caches live: the one resolver, from an environment (no writes)
    family.py             what a family's module says (the Family record; Monitored: how the JIT monitor watches it)
    watcher.py            what a monitored family's watcher is: its library's hooks into the JIT monitor
    registry.py           the table of families, and CacheRoots (family -> its root on one machine)
    tree.py               packing a root's files, placing staged entries into a root
    targets.py            why a cache cannot take what an install places (a file in the way, read-only, full)
    relocate.py           making the building machine's paths this machine's, at install
    checks.py             what must hold of a placed file for its loader to take it
    torch_artifacts.py    torch's compile artifacts, read and rewritten without torch: the paths a loader follows
    triton_entries.py     Triton's file cache entries, moved between cache directories so that they still hit
    deep_gemm_install.py  DeepGEMM as users have it: where it is installed, which version, and its JIT cache layouts
    deep_gemm_rekey.py    re-keying DeepGEMM 2.5/2.6 cache entries for another install path

The families (those the JIT monitor counts define their watcher: executor/jit_monitor.py builds its
watchers and counters from the table):

    deep_gemm.py             DeepGEMM's JIT cache: one directory per kernel
    triton.py                Triton's file cache: one directory per compile key
    flashinfer_file.py       the FlashInfer autotune file a plan's warmup writes (`--flashinfer-cache`)
    torch_compile.py         vLLM's torch.compile cache
    inductor.py              Inductor's cache, where it is outside vLLM's torch.compile cache
    flashinfer_autotune.py   vLLM's FlashInfer autotune cache: the tactics FlashInfer's autotuner chose
    flashinfer_jit.py        FlashInfer's JIT modules, placed where FlashInfer loads a prebuilt module
    flashinfer_trtllm_dg.py  the kernels of the TensorRT-LLM DeepGEMM inside FlashInfer's block-FP8 GEMM (M < 32)
    vllm_modelinfo.py        what vLLM learnt of a model class, which it reads while it resolves the architecture

Nothing is imported here: deep_gemm_install.py and the precompile pool read roots.py, below the
families that use them.
"""
