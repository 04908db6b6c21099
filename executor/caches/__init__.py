"""Cache families: one module per cache a warmup or a vLLM start-up fills, and the one resolver of
where each lives (issue 43 item 1).

    roots.py        where the caches live: the one resolver, from an environment (no writes)
    family.py       what a family's module says (the Family record)
    registry.py     the table of families, and CacheRoots (family -> its root on one machine)
    tree.py         packing a root's files, placing staged entries into a root
    targets.py      why a cache cannot take what an install places (a file in the way, read-only, full)
    relocate.py     making the building machine's paths this machine's, at install
    checks.py       what must hold of a placed file for its loader to take it
    deep_gemm.py, triton.py, flashinfer_file.py, torch_compile.py, inductor.py, flashinfer_autotune.py,
    flashinfer_jit.py, flashinfer_trtllm_dg.py, vllm_modelinfo.py: the families

Nothing is imported here: executor/dg_install.py and the precompile pool read roots.py, below the
families that use them.
"""
