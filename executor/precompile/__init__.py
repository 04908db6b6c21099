"""`warmup execute --jobs N`: compile the plan's distinct variants in N worker processes first.

Threads do not help (the GIL serializes Triton's compiles); processes do. Each distinct
compile key of the plan becomes one *job*: the first step and value that reach the key, run in
a worker through the backend's family method. For Triton that is its compile-only twin
(executor/backends/triton_compile.py): the same ``launch`` functions as the main process's
calls, on stand-in tensors of the same dtypes, shapes and alignment, compiled for the GPU's
target without torch or a CUDA context; DeepGEMM jobs run the library itself. Workers share
the on-disk caches with the main process (Triton's ``TRITON_CACHE_DIR``, DeepGEMM's
``DG_JIT_CACHE_DIR``), which write every entry to a temporary directory and rename it into
place, so concurrent workers leave complete entries. The main process then runs every planned
step as before, and its launches are disk loads. Processes that share those caches (a
tensor-parallel server's ranks) compile each key once between them: a worker claims a key
before compiling it, the others wait for it.

The interface, which is all the rest of the project uses (tests/executor/test_precompile_interface.py):

    Precompiler            the pool of one run: start(), hook() for the executor's loop, the
                           caller's barriers (finish, finish_lane, finish_device_lane, bound),
                           cancel(), end_run(); its state (status, reason, running, holds_workers,
                           pending(), results(), device_lane_wait, finish_s) and summary()
    compile_jobs           the jobs a plan's steps give: one per distinct (backend, compile key)
    default_jobs           --jobs when not given: the usable cores, at most 32
    PRECOMPILE_BACKENDS    the backends whose variants workers compile by default
    prime_triton           Triton's fixed per-process costs, paid now (the main process's start-up)
    gpu_capability, gpu_name   the GPUs as NVML names them, without a CUDA context
    build_ahead_command    the command line of a process that builds FlashInfer's modules ahead
    MANIFEST_NAME, manifest_path, read_manifest, update_manifest, triton_cache_dir, fingerprint,
    deep_gemm_fingerprint  the manifest: the compile keys known to be in the disk caches, beside
                           Triton's, valid while the fingerprint matches (bundles read and write it)
    CLAIMS_DIR             the claims' directory in a cache (a bundle leaves it behind)

The package, by topic (each sub-package's docstring maps its modules):

    jobs/       what to compile: the jobs of a plan (job.py, from_plan.py), which of them the disk
                caches already hold (manifest.py, fingerprint.py), the order they run in (costs.py),
                whether the run gets a pool at all (decide.py)
    workers/    the worker processes: how one starts (setup.py, gpu.py, backend_classes.py,
                triton_costs.py), runs a job (worker.py, device.py), in which lane (lanes.py), and
                how they start and end (processes.py, process_tree.py); FlashInfer's modules built
                ahead in a process of their own (build_ahead.py, build_ahead_command.py)
    claims/     each key compiled once by the processes that share a cache: a key's claims on disk
                (on_disk.py), a worker's side (owner.py), the main process's wait (waits.py,
                key_future.py), where a run's claims live (node.py)
    pool/       the pool of one run put together (precompiler.py: Precompiler), its book of jobs
                (book.py), the executor loop's hook (hook.py), DeepGEMM's shared cache (barrier.py,
                deep_gemm_counts.py), and what the report gets (timings.py, summary.py)

Inside, imports go one way (tests/executor/test_precompile_interface.py): jobs/ imports none of the others,
claims/ imports jobs/, workers/ imports both, pool/ all three.
"""

from .claims.on_disk import CLAIMS_DIR
from .jobs.decide import default_jobs
from .jobs.fingerprint import deep_gemm_fingerprint, fingerprint
from .jobs.from_plan import PRECOMPILE_BACKENDS, compile_jobs
from .jobs.manifest import MANIFEST_NAME, manifest_path, read_manifest, triton_cache_dir, update_manifest
from .pool.precompiler import Precompiler
from .workers.build_ahead_command import build_ahead_command
from .workers.gpu import gpu_capability, gpu_name
from .workers.triton_costs import prime_triton

__all__ = ["CLAIMS_DIR", "MANIFEST_NAME", "PRECOMPILE_BACKENDS", "Precompiler", "build_ahead_command",
           "compile_jobs", "deep_gemm_fingerprint", "default_jobs", "fingerprint", "gpu_capability", "gpu_name",
           "manifest_path", "prime_triton", "read_manifest", "triton_cache_dir", "update_manifest"]
