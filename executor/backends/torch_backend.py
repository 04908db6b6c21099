"""`torch`: the cuBLAS paths where a plan names them.

Kernels: ``scaled_mm`` (``torch._scaled_mm``, per-tensor FP8 e4m3 with float32 scalar
scales, bf16 out) and ``bf16_matmul`` (``torch.matmul`` in bf16). cuBLAS compiles
nothing, but its first call per shape picks a heuristic and allocates a workspace,
and cuBLASLt's first FP8 call loads its kernels: a warm call keeps that out of serving.
The module is named torch_backend so that it never shadows ``torch`` itself.
"""

from __future__ import annotations

from .base import BaseBackend, Unavailable, torch_cuda_available

SCALED_MM = ("scaled_mm", "torch._scaled_mm", "_scaled_mm", "fp8_scaled_mm")
MATMUL = ("bf16_matmul", "matmul", "mm", "torch.matmul")


class TorchBackend(BaseBackend):
    name = "torch"
    families = ("gemm",)

    def __init__(self, device: str = "cuda", options=None):
        super().__init__(device, options)
        self._buffers: dict = {}

    def available(self) -> tuple[bool, str]:
        return torch_cuda_available(self.device)

    def synchronize(self) -> None:
        import torch
        if str(self.device).startswith("cuda"):
            torch.cuda.synchronize(self.device)

    def gemm(self, step, m_values, tick):
        import torch

        kernel = step.kernel
        n, k, dev = step.n, step.k, self.device
        top = max(m_values)
        if kernel in SCALED_MM:
            if not hasattr(torch, "_scaled_mm"):
                raise Unavailable("this torch has no torch._scaled_mm")
            key = ("scaled_mm", n, k)
            if key not in self._buffers or self._buffers[key][0] < top:
                self._buffers[key] = (top, (torch.zeros(top, k, device=dev, dtype=torch.float8_e4m3fn),
                                            torch.zeros(n, k, device=dev, dtype=torch.float8_e4m3fn),
                                            torch.ones((), device=dev, dtype=torch.float32)))
            a, w, one = self._buffers[key][1]

            def launch(m):
                torch._scaled_mm(a[:m], w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        elif kernel in MATMUL:
            key = ("matmul", n, k)
            if key not in self._buffers or self._buffers[key][0] < top:
                self._buffers[key] = (top, (torch.zeros(top, k, device=dev, dtype=torch.bfloat16),
                                            torch.zeros(n, k, device=dev, dtype=torch.bfloat16)))
            a, w = self._buffers[key][1]

            def launch(m):
                torch.matmul(a[:m], w.t())
        else:
            raise Unavailable(f"torch backend has no kernel {kernel!r} (it has {SCALED_MM[0]}, {MATMUL[0]}); "
                              "block-FP8 GEMMs run on the triton or deep_gemm backend")
        for m in m_values:
            launch(m)
        self.synchronize()
        tick(len(m_values))
        return len(m_values)

    def release(self, step) -> None:
        if step.family in self.families:
            for key in [k for k in self._buffers if k[1:] == (step.n, step.k)]:
                del self._buffers[key]

    def close(self) -> None:
        self._buffers.clear()
