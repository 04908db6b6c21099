"""Warmup bundles: what a plan's warmup put in the caches, packed, verified and installed elsewhere.

    archive.py      the tar and its typed manifest; extraction that checks every file
    environment.py  the environment fingerprint (GPU, driver, CUDA/NVCC, torch, triton, DeepGEMM, FlashInfer)
    ops.py          build, install (re-keying DeepGEMM 2.5/2.6 for another path), verify
    startup.py      a whole vLLM start-up's caches (torch.compile, AOT, Triton, FlashInfer autotune)
    cli.py          `warmup bundle build|verify|install|inspect`
"""
