"""The precompile pool of one run, in the main process.

    precompiler.py    the Precompiler: its pieces put together, and the package's interface
    book.py           the jobs by key and by step, and their results (no processes)
    hook.py           the executor loop's hook: a step waits for its own jobs only
    barrier.py        DeepGEMM's cache, shared by the workers and the main JIT monitor
    deep_gemm_counts.py  each DeepGEMM kernel counted once, for the job that compiled it
    timings.py        when the pool's phases happened
    summary.py        what the report and the manifest get from the book
"""
