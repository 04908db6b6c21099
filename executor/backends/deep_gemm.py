"""`deep_gemm`: DeepGEMM's JIT warmup, as vLLM does it.

vLLM @ 017e9f4448b7, vllm/model_executor/warmup/deep_gemm_warmup.py:
`_deepgemm_fp8_gemm_nt_warmup` and `_deepgemm_grouped_fp8_gemm_nt_contiguous_warmup`.

Dense: ``fp8_gemm_nt((a[:m], a_scales[:m]), (w, w_scales), out[:m])`` per M-value;
grouped: ``m_grouped_fp8_gemm_nt_contiguous((a[:m], s[:m]), (w, ws), out[:m], m_indices[:m])``
per M_sum. DeepGEMM 1.x names them ``gemm_fp8_fp8_bf16_nt`` and
``m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`` with the same arguments. Tensors are
allocated once at the largest M and sliced per M-value. The activations are empty
and the scales zeros (vLLM 017e9f4448b7; torch.empty at 0d21b9b51); the weights zeros with
unit scales.

DeepGEMM is imported the way vLLM imports it: a top-level ``deep_gemm`` (PyPI's
``sgl-deep-gemm``, or deepseek-ai/DeepGEMM built into the environment), else the copy vLLM
vendors, ``vllm.third_party.deep_gemm`` (executor.caches.deep_gemm_install); DG_JIT_CACHE_DIR is
vLLM's when unset (executor.run sets it). When neither imports the backend is unavailable and its
steps say why; nothing here imports it before ``available()``. A version the dispatch model was not
checked against (kernel_model.deep_gemm.CHECKED_VERSIONS) is run, with a warning.
"""

from __future__ import annotations

import importlib
import sys

from kernel_model.arith import cdiv
from kernel_model.deep_gemm import CHECKED_VERSIONS

from ..caches import deep_gemm_install
from .base import BaseBackend, Unavailable, torch_cuda_available

DENSE_NAMES = ("fp8_gemm_nt", "gemm_fp8_fp8_bf16_nt")
GROUPED_NAMES = ("m_grouped_fp8_gemm_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous")
SYNC_EVERY = 256


class DeepGemmBackend(BaseBackend):
    name = "deep_gemm"
    families = ("gemm", "grouped_gemm")
    jit_cache = "deep_gemm"
    compiles_for_cuda = True
    worker_preload = ("torch",)  # a precompile worker runs DeepGEMM itself (torch, a CUDA context)
    expected_job_s = 4.0  # one kernel: nvcc over DeepGEMM's headers (median 4.4-7.0 s on the H100, RESULTS part X)

    def __init__(self, device: str = "cuda", options=None):
        super().__init__(device, options)
        self._dg = None
        self._buffers: dict = {}

    def available(self) -> tuple[bool, str]:
        install = deep_gemm_install.find_install()
        if install is None:
            return False, ("deep_gemm is not installed (neither deep_gemm nor vllm.third_party.deep_gemm: "
                           "install vLLM, sgl-deep-gemm built for this torch, or deepseek-ai/DeepGEMM)")
        ok, why = torch_cuda_available(self.device)
        if not ok:
            return ok, why
        try:
            self._dg = importlib.import_module(install.module)
        except Exception as e:  # noqa: BLE001 - a broken build must not crash the run
            return False, f"{install.module} failed to import ({type(e).__name__}: {e})"
        warn_unchecked(install)
        import torch
        major, _ = torch.cuda.get_device_capability(self.device)
        if major < 9:
            return False, f"DeepGEMM needs SM90 or newer, this GPU is SM{major}x"
        if self._function(DENSE_NAMES) is None and self._function(GROUPED_NAMES) is None:
            return False, f"deep_gemm {getattr(self._dg, '__version__', '?')} has none of {DENSE_NAMES + GROUPED_NAMES}"
        return True, ""

    def _function(self, names):
        for name in names:
            fn = getattr(self._dg, name, None)
            if fn is not None:
                return fn
        return None

    def synchronize(self) -> None:
        import torch
        torch.cuda.synchronize(self.device)

    def _loop(self, values, launch, tick) -> int:
        for i, value in enumerate(values, 1):
            launch(value)
            if i % SYNC_EVERY == 0:
                self.synchronize()
                tick(SYNC_EVERY)
        self.synchronize()
        tick(len(values) % SYNC_EVERY)
        return len(values)

    def _buffer(self, key, size, make):
        have = self._buffers.get(key)
        if have is None or have[0] < size:
            self._buffers.pop(key, None)
            self._buffers[key] = (size, make(size))
        return self._buffers[key][1]

    def gemm(self, step, m_values, tick):
        import torch

        fn = self._function(DENSE_NAMES)
        if fn is None:
            raise Unavailable(f"deep_gemm has none of {DENSE_NAMES}")
        n, k = step.n, step.k
        block = (step.block_size or (128, 128))[0]
        dev = self.device

        def make(m):
            return (torch.empty(m, k, device=dev, dtype=torch.float8_e4m3fn),
                    torch.zeros(m, k // block, device=dev, dtype=torch.float32),
                    torch.zeros(n, k, device=dev, dtype=torch.float8_e4m3fn),
                    torch.ones(cdiv(n, block), k // block, device=dev, dtype=torch.float32),
                    torch.empty(m, n, device=dev, dtype=torch.bfloat16))

        a, a_s, w, w_s, out = self._buffer(step.shape_key(), max(m_values), make)
        return self._loop(m_values, lambda m: fn((a[:m], a_s[:m]), (w, w_s), out[:m]), tick)

    def grouped_gemm(self, step, m_values, tick):
        import torch

        fn = self._function(GROUPED_NAMES)
        if fn is None:
            raise Unavailable(f"deep_gemm has none of {GROUPED_NAMES}")
        n, k, e = step.n, step.k, step.num_groups
        align = step.alignment
        block = 128
        dev = self.device

        def make(m):
            experts = torch.arange(cdiv(m, align), dtype=torch.int32) % e
            return (torch.empty(m, k, device=dev, dtype=torch.float8_e4m3fn),
                    torch.zeros(m, k // block, device=dev, dtype=torch.float32),
                    torch.zeros(e, n, k, device=dev, dtype=torch.float8_e4m3fn),
                    torch.ones(e, cdiv(n, block), k // block, device=dev, dtype=torch.float32),
                    torch.empty(m, n, device=dev, dtype=torch.bfloat16),
                    experts.repeat_interleave(align)[:m].to(dev))

        a, a_s, w, w_s, out, ids = self._buffer(step.shape_key(), max(m_values), make)
        return self._loop(m_values, lambda m: fn((a[:m], a_s[:m]), (w, w_s), out[:m], ids[:m]), tick)

    def release(self, step) -> None:
        if step.family in self.families:
            self._buffers.pop(step.shape_key(), None)

    def close(self) -> None:
        self._buffers.clear()


_warned: set = set()


def unchecked_warning(install) -> str | None:
    """The warning for a version the dispatch model was not checked against (None: checked)."""
    if install.version in CHECKED_VERSIONS:
        return None
    return (f"warmup: warning: DeepGEMM {install.version or '(version unknown)'} ({install.module} at "
            f"{install.root}) is not a version the dispatch model was checked against "
            f"({', '.join(CHECKED_VERSIONS)}): an exact plan's keys may not be the kernels it compiles; "
            "the JIT monitor counts what it does compile")


def warn_unchecked(install) -> None:
    """Say it once per process and install, on stderr."""
    line = unchecked_warning(install)
    if line and install.root not in _warned:
        _warned.add(install.root)
        print(line, file=sys.stderr)
