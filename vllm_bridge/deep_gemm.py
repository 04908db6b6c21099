"""The executor's DeepGEMM backend on the DeepGEMM vLLM itself imports, into vLLM's cache.

vLLM's ``_lazy_init`` sets ``DG_JIT_CACHE_DIR`` to ``$VLLM_CACHE_ROOT/deep_gemm`` (unless the
user set it) and ``_import_deep_gemm`` returns site-packages ``deep_gemm``, else the copy vLLM
vendors as ``vllm.third_party.deep_gemm``. Calling them, rather than ``import deep_gemm``,
makes the plan's kernels the very cache entries vLLM's layers look up: same directory, same
DeepGEMM, same include path (part of DeepGEMM's cache key).
"""

from __future__ import annotations

import importlib

from executor.backends.base import torch_cuda_available
from executor.backends.deep_gemm import DENSE_NAMES, GROUPED_NAMES, DeepGemmBackend

from .releases import Release

RELEASE: Release | None = None  # set by the plugin before the plan runs (vllm_bridge.warmup)


def vllm_deep_gemm(release: Release):
    """The deep_gemm module vLLM uses, its JIT cache pointed where vLLM points it (or None)."""
    module = importlib.import_module(release.deep_gemm_module)
    getattr(module, release.deep_gemm_init)()
    return getattr(module, release.deep_gemm_import)()


class VllmDeepGemmBackend(DeepGemmBackend):
    name = "deep_gemm_vllm"

    def available(self) -> tuple[bool, str]:
        if RELEASE is None:
            return False, "deep_gemm_vllm runs inside a vLLM worker (vllm_bridge.plugin) only"
        ok, why = torch_cuda_available(self.device)
        if not ok:
            return ok, why
        try:
            self._dg = vllm_deep_gemm(RELEASE)
        except Exception as e:  # noqa: BLE001 - a broken build must not stop the server's warmup
            return False, f"vLLM's DeepGEMM failed to import ({type(e).__name__}: {e})"
        if self._dg is None:
            return False, "vLLM finds no DeepGEMM (neither deep_gemm nor vllm.third_party.deep_gemm)"
        if self._function(DENSE_NAMES) is None and self._function(GROUPED_NAMES) is None:
            return False, f"vLLM's deep_gemm has none of {DENSE_NAMES + GROUPED_NAMES}"
        return True, ""
