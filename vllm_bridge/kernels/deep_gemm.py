"""The executor's DeepGEMM backend on the DeepGEMM vLLM itself imports, into vLLM's cache.

vLLM's ``_lazy_init`` sets ``DG_JIT_CACHE_DIR`` to ``$VLLM_CACHE_ROOT/deep_gemm`` (unless the
user set it), turns on DeepGEMM's PDL where the GPU supports it, and ``_import_deep_gemm``
returns site-packages ``deep_gemm``, else the copy vLLM vendors as ``vllm.third_party.deep_gemm``.
Calling them, rather than ``import deep_gemm``, makes the plan's kernels the very cache entries
vLLM's layers look up: same directory, same DeepGEMM, same include path and settings (parts of
DeepGEMM's cache key), in vLLM's process and in every precompile worker alike.

Which functions to call comes with the backend's settings (``Options.backend_settings``, built
from the release table by vllm_bridge.warmup.executor_options), so a precompile worker, a fresh process that
never saw the plugin, resolves the same DeepGEMM as vLLM's worker.
"""

from __future__ import annotations

import importlib

from executor.backends.base import torch_cuda_available
from executor.backends.deep_gemm import DENSE_NAMES, GROUPED_NAMES, DeepGemmBackend


def release_settings(release) -> dict:
    """The settings this backend needs, from a vllm_bridge.releases.Release (picklable)."""
    return {"module": release.deep_gemm_module, "init": release.deep_gemm_init,
            "import": release.deep_gemm_import}


def vllm_deep_gemm(settings: dict):
    """The deep_gemm module vLLM uses, initialised as vLLM initialises it (or None)."""
    module = importlib.import_module(settings["module"])
    getattr(module, settings["init"])()
    return getattr(module, settings["import"])()


class VllmDeepGemmBackend(DeepGemmBackend):
    name = "deep_gemm_vllm"

    def available(self) -> tuple[bool, str]:
        if not self.settings.get("module"):
            return False, ("deep_gemm_vllm needs vLLM's release settings (Options.backend_settings); "
                           "the vLLM plugin gives them")
        ok, why = torch_cuda_available(self.device)
        if not ok:
            return ok, why
        try:
            self._dg = vllm_deep_gemm(self.settings)
        except Exception as e:  # noqa: BLE001 - a broken build must not stop the server's warmup
            return False, f"vLLM's DeepGEMM failed to import ({type(e).__name__}: {e})"
        if self._dg is None:
            return False, "vLLM finds no DeepGEMM (neither deep_gemm nor vllm.third_party.deep_gemm)"
        if self._function(DENSE_NAMES) is None and self._function(GROUPED_NAMES) is None:
            return False, f"vLLM's deep_gemm has none of {DENSE_NAMES + GROUPED_NAMES}"
        return True, ""
