"""What the plugin touches in each supported vLLM release: the names, keyed by the release row's
version, no vLLM import.

The releases themselves are the planner's one table (planner/engine/releases.py, VLLM_RELEASES): a row
there is a release the plugin accepts, with the plan of that row. Every name here was read in
that release's source (vllm/v1/worker/gpu_worker.py, vllm/model_executor/warmup/kernel_warmup.py,
vllm/utils/deep_gemm.py); a release with no row is refused, since a renamed method would
silently skip the warmup the user asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from planner.engine.releases import VLLM_RELEASES, supported


class Release(NamedTuple):
    """The names the plugin patches or calls in one vLLM release."""

    plan: str                               # the built-in plan that models this release's warmup
    worker_module: str = "vllm.v1.worker.gpu_worker"
    worker_class: str = "Worker"
    load_method: str = "load_model"         # wrapped: the precompile pool starts before the weights load
    memory_method: str = "determine_available_memory"  # wrapped: the pool's device lane gone before it measures
    profile_method: str = "profile_run"     # on the model runner, inside memory_method before its measurement
    warmup_method: str = "compile_or_warm_up_model"  # wrapped: the plan replaces what it models
    # Names in worker_module that compile_or_warm_up_model calls, and what the plan does instead:
    plan_hook: str = "kernel_warmup"        # the plan runs here, then vLLM's own kernel_warmup
    batches_hook: str = "warmup_kernels"    # Model Runner V2's synthetic batches: the plan ran them
    capture_method: str = "capture_model"   # on the model runner: the plan captured its sizes
    # Names in kernel_warmup's module the plan runs itself (turned off inside vLLM's kernel_warmup):
    kernel_warmup_module: str = "vllm.model_executor.warmup.kernel_warmup"
    modelled_in_kernel_warmup: tuple = ("deep_gemm_warmup",)
    # DeepGEMM as vLLM imports it: _lazy_init points DG_JIT_CACHE_DIR at $VLLM_CACHE_ROOT/deep_gemm,
    # _import_deep_gemm returns site-packages deep_gemm, else vllm.third_party.deep_gemm.
    deep_gemm_module: str = "vllm.utils.deep_gemm"
    deep_gemm_init: str = "_lazy_init"
    deep_gemm_import: str = "_import_deep_gemm"
    # vLLM's Triton top-k/top-p sampler (vllm_bridge.kernels.triton warms it where the plan asks)
    sampler_module: str = "vllm.v1.sample.ops.topk_topp_triton"
    # vLLM's JIT monitor, started at the end of compile_or_warm_up_model: the generic Triton variants
    # (executor.triton_generic) are built and sealed right before it starts watching
    jit_monitor_module: str = "vllm.utils.jit_monitor"
    jit_monitor_activate: str = "activate"
    # Start-up fixes later vLLM releases made that this one lacks (the row's missing_start_up_fixes)
    missing_fixes: tuple = ()


# 0.25.0: kernel_warmup, capture_model, then warmup_kernels (MRV2); 0.33.0: kernel_warmup,
# warmup_kernels, capture_model (inside _compile_or_warm_up_model). The names are the same, so no
# release renames any: a release whose names differ gets {field: name} here, under its version.
RENAMED: dict = {}


class PatchTable(Mapping):
    """version -> Release for every row of the planner's table, read at each lookup (the table is
    the one list: a row it gains is a release the plugin accepts, with no edit here)."""

    def __getitem__(self, version: str) -> Release:
        row = VLLM_RELEASES[version]
        return Release(plan=row.plan, missing_fixes=row.missing_start_up_fixes, **RENAMED.get(version, {}))

    def __iter__(self):
        return iter(supported())

    def __len__(self) -> int:
        return len(VLLM_RELEASES)


RELEASES = PatchTable()


class UnsupportedVllm(RuntimeError):
    """The installed vLLM is not one the plugin knows how to patch."""


def release_for(version: str) -> Release:
    """The table row of an installed vLLM version, or UnsupportedVllm in one line."""
    if version in RELEASES:
        return RELEASES[version]
    raise UnsupportedVllm(f"warmup-planner: WARMUP_PLAN is set but vLLM {version} is installed; the plugin "
                          f"supports vLLM {', '.join(RELEASES)} (unset WARMUP_PLAN to start without it)")
