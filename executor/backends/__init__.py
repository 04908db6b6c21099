"""Kernel backends: each a module behind one protocol (executor.backends.base.Backend).

Importing a backend module never imports torch, triton or the library it wraps;
``available()`` says whether it can run here, and why not.

    base.py            the protocol every backend implements, and the exceptions handlers turn into step statuses
    triton.py          `triton`: the project's own Triton kernels (executor.kernels) and their autotuning
    triton_compile.py  `triton` as a precompile worker runs it: every variant compiled from its sizes, nothing launched
    deep_gemm.py       `deep_gemm`: DeepGEMM's JIT warmup, as vLLM does it
    flashinfer.py      `flashinfer`: FlashInfer's autotuner around one tuning run
    flashinfer_jit.py  `flashinfer_jit`: FlashInfer's JIT modules built ahead of their first call
    torch_backend.py   `torch`: the cuBLAS paths where a plan names them
    null.py            `null`: the plan walked and its calls counted, with no GPU and no kernels
"""
