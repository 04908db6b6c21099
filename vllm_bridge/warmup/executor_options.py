"""How the executor runs a plan inside one vLLM worker: its options, and the precompile pool's.

The executor's backends there are vLLM's own kernels (vLLM's DeepGEMM, vLLM's Triton kernels)
besides Triton's and FlashInfer's JIT modules. vLLM's carry their settings, and the pool's workers
their environment, in the options: a precompile worker, a fresh process that never saw the plugin,
then reaches the kernels and caches vLLM's process does. Each rank's pool has its share of the
node's cores.
"""

from __future__ import annotations

import os

from ..releases import Release
from ..settings import Settings

DEEP_GEMM_BACKEND = "deep_gemm_vllm"   # vllm_bridge.kernels.deep_gemm: DeepGEMM as vLLM imports it
FLASHINFER_JIT = "flashinfer_jit"      # FlashInfer's JIT modules, built by the pool's compile lane


def options_for(worker, release: Release, jobs: int):
    """The executor's options inside a vLLM worker: vLLM's DeepGEMM and vLLM's own Triton kernels
    (their settings reach the precompile workers through the constructor), the monitor the plugin
    installed, steps failing on their own (the server starts)."""
    from executor.context import Options

    from ..kernels.deep_gemm import release_settings

    device = str(getattr(worker, "device", "cuda"))
    staging = _triton_staging()
    return Options(on_error="continue", jit_monitor="warn", runner="reference", device=device, jobs=jobs,
                   precompile_backends=(DEEP_GEMM_BACKEND, "vllm_triton", "triton", FLASHINFER_JIT),
                   backend_settings={DEEP_GEMM_BACKEND: release_settings(release),
                                     "vllm_triton": {"module": release.sampler_module, "staging": staging}},
                   worker_env=_worker_env(staging))


def _worker_env(staging: str | None) -> dict:
    """The precompile workers' own environment: their Triton cache, and vLLM's logging quiet (each
    worker imports vLLM's DeepGEMM helpers, which log at INFO into the server's log)."""
    env = {"VLLM_LOGGING_LEVEL": "WARNING"}
    if staging:
        env["TRITON_CACHE_DIR"] = staging
    return env


def _triton_staging() -> str | None:
    """Where the pool's workers write vLLM's Triton kernels: the directory the user chose for
    Triton, else one under vLLM's cache root (vllm_bridge.kernels.triton copies them into the directory
    vLLM's process reads once Inductor has chosen it). None outside vLLM (tests)."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return os.environ["TRITON_CACHE_DIR"]
    try:
        import vllm.envs as envs
    except ImportError:
        return None
    return os.path.join(envs.VLLM_CACHE_ROOT, "warmup_planner", "triton")


def pin_triton_cache(environ=os.environ) -> str:
    """TRITON_CACHE_DIR set to the directory Triton reads now, where nobody set it (once per worker,
    at load_model, before vLLM builds the model): every start then compiles and loads this process's
    Triton kernels in one place. Left unset, the first Inductor kernel of a process pins it under
    TORCHINDUCTOR_CACHE_DIR as it is at that moment (torch/_inductor/runtime/triton_heuristics.py,
    CachingAutotuner): vLLM 0.25's cold compile points that inside its torch.compile cache
    (torch_aot_compile/<hash>/inductor_cache/triton/0) while its warm start, loading the compiled graph
    whole, may build no Inductor kernel and leave Triton's default. On an H200 (bench/RESULTS.md
    part AI, Gemma-2-9B) the first warm start after a cold one compiled the plan's 22 Triton kernels and
    25 generic variants again (~20 s) because of it."""
    from executor.caches import roots

    return environ.setdefault("TRITON_CACHE_DIR", roots.triton_root(roots.Env.of(environ)))


def use_vllm_deep_gemm_cache() -> str:
    """DG_JIT_CACHE_DIR as vLLM sets it (vllm/utils/deep_gemm.py: $VLLM_CACHE_ROOT/deep_gemm unless
    set), early: the precompile workers and the JIT monitor read it before vLLM imports DeepGEMM."""
    import vllm.envs as envs

    from executor.caches import roots

    return os.environ.setdefault("DG_JIT_CACHE_DIR", roots.deep_gemm_root(roots.Env.of(vllm_cache_root=envs.VLLM_CACHE_ROOT)))


def precompile_jobs(settings: Settings, local_ranks: int = 1) -> int:
    """Worker processes for this rank's pool: WARMUP_JOBS, else the machine's cores shared by the
    node's ranks (each rank, a daemon process in vLLM's tensor parallelism, starts its own pool:
    executor/precompile/workers/processes.py; the pool takes at most one per job)."""
    from executor.precompile import default_jobs

    if settings.jobs is not None:
        return settings.jobs
    return max(1, default_jobs() // max(1, local_ranks))


def local_ranks(vllm_config) -> int:
    """vLLM's ranks on this node (ParallelConfig.local_world_size; 1 where it cannot tell)."""
    try:
        return max(1, int(vllm_config.parallel_config.local_world_size))
    except Exception:  # noqa: BLE001 - a stand-in config, or a release without it
        return 1
