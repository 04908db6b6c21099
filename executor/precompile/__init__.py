"""`warmup execute --jobs N`: compile the plan's distinct variants in N worker processes first.

Threads do not help (the GIL serializes Triton's compiles); processes do. Each distinct
compile key of the plan becomes one *job* (jobs.py): the first step and value that reach
the key, run in a worker through the backend's family method. For Triton that is its
compile-only twin (executor/backends/triton_compile.py): the same ``launch`` functions as
the main process's calls, on stand-in tensors of the same dtypes, shapes and alignment,
compiled for the GPU's target without torch or a CUDA context (worker.py); DeepGEMM jobs
run the library itself. Workers share the on-disk caches with the main process (Triton's
``TRITON_CACHE_DIR``, DeepGEMM's ``DG_JIT_CACHE_DIR``), which write every entry to a
temporary directory and rename it into place, so concurrent workers leave complete entries.
The main process then runs every planned step as before, and its launches are disk loads.
Processes that share those caches (a tensor-parallel server's ranks) compile each key once
between them: a worker claims a key before compiling it, the others wait for it (claims.py).

    jobs.py         the jobs of a plan, and what became of each (JobResult)
    manifest.py     the keys known to be cached (fingerprint.py: what must match for that)
    worker_start.py how a worker starts: settings, GPU target, Triton's per-process costs
    worker.py       a worker's backends, and one job
    worker_device.py  a worker's current device, and its memory freed after each job
    claims.py       a key's claims on disk: who holds it, whether it is done (owner.py: a worker's side)
    node.py         where a run's claims live (the caches it shares with other processes), its counts
    waits.py        the main process waiting for keys other processes compile, and the takeovers
    lanes.py        the workers in two lanes: with a CUDA context (device) and without (compile)
    costs.py        each job's seconds at the last start: the longest run first
    pool.py         the pool of one run (Precompiler), made of one piece per job:
      decide.py       whether the run gets a pool, for which jobs, or why not (and --jobs' default)
      book.py         the jobs by key and by step, and their results (no processes)
      processes.py    one lane's worker processes: started early, ended, joined or killed with what they started
      hook.py         the executor loop's hook: a step waits for its own jobs only
      barrier.py      DeepGEMM's cache, shared by the workers and the main JIT monitor
      timings.py      when the pool's phases happened
      summary.py      what the report and the manifest get from the book
"""

from .barrier import attribute_deep_gemm
from .decide import default_jobs
from .hook import PrecompileHook
from .jobs import PRECOMPILE_BACKENDS, Job, JobResult, compile_jobs, step_content_key
from .manifest import MANIFEST_NAME, fingerprint, manifest_path, read_manifest, update_manifest
from .pool import Precompiler
from .worker_start import prime_triton

__all__ = ["MANIFEST_NAME", "attribute_deep_gemm", "PRECOMPILE_BACKENDS", "Job", "JobResult", "PrecompileHook",
           "Precompiler", "compile_jobs", "default_jobs", "fingerprint", "manifest_path", "prime_triton",
           "read_manifest", "step_content_key", "update_manifest"]
