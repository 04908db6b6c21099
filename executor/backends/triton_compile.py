"""`triton` as a precompile worker runs it: every variant compiled from its sizes, nothing launched.

The main process's ``TritonBackend`` launches each planned call on scratch tensors; a
worker only has to leave the variant in Triton's disk cache for that launch to find. So
here each call becomes the same ``launch`` function of ``executor.kernels.jit`` with
stand-in tensors of the call's dtypes, shapes and alignment (``compile_only``), then its
launcher is built. Nothing here imports torch or creates a CUDA context: with Triton's
driver replaced by ``stand_in.OfflineDriver`` (the worker does that when the main process
could tell it the GPU's compute capability) the worker compiles for that target; without,
Triton's own driver is used (it imports torch and creates a context: slower, same result).

The config each M selects comes from the same tuned tables (``configs.lookup_table``, the
engine's device from Options.table_device) and the same dispatch functions as in the main
process, and an exact step's per-M keys are checked as there (``check_planned_keys``).
"""

from __future__ import annotations

import importlib.util

from kernel_model import triton_kernels as dispatch

from .base import BaseBackend, Unavailable
from .triton import check_kernel, check_planned_keys, compile_runner_kernels, grouped_gemm_shape


class TritonCompileOnly(BaseBackend):
    name = "triton"
    families = ("gemm", "grouped_gemm", "attention", "kernel")
    cuda_free = True  # with the offline driver; Triton's own (no NVML target) makes a context

    def __init__(self, device: str = "cuda", options=None):
        super().__init__(device, options)
        self._launchers: set[int] = set()  # compiled variants whose launcher is built

    def available(self) -> tuple[bool, str]:
        if not str(self.device).startswith("cuda"):
            return False, f"device {self.device!r}: variants compile for a CUDA device only"
        if importlib.util.find_spec("triton") is None:
            return False, "triton is not installed"
        try:
            from ..kernels.jit import fp8_gemm, grouped_gemm, prefill_attention  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return False, f"executor.kernels.jit is not importable ({type(e).__name__}: {e})"
        return True, ""

    def synchronize(self) -> None:
        pass  # nothing is launched

    def _built(self, compiled, tick) -> None:
        """Build the launcher of each new variant once (a repeated M finds it in memory)."""
        from ..kernels.jit import stand_in

        if compiled is not None and id(compiled) not in self._launchers:
            self._launchers.add(id(compiled))
            stand_in.build_launcher(compiled)
        tick(1)

    def gemm(self, step, m_values, tick):
        from ..kernels import configs
        from ..kernels.jit import fp8_gemm

        check_kernel(step)
        n, k = step.n, step.k
        table = configs.lookup_table(dispatch.FP8_GEMM, n, k, table_device=self.table_device)
        check_planned_keys(step, m_values, lambda m: dispatch.fp8_gemm_key(m, n, k, table))
        for m in m_values:
            self._built(fp8_gemm.compile_variant(m, n, k, dispatch.fp8_gemm_config(m, n, k, table)), tick)
        return len(m_values)

    def grouped_gemm(self, step, m_values, tick):
        from ..kernels import configs
        from ..kernels.jit import grouped_gemm

        n, k, e, block_m = grouped_gemm_shape(step, m_values)
        table = configs.lookup_table(dispatch.GROUPED_FP8_GEMM, n, k, table_device=self.table_device)
        check_planned_keys(step, m_values, lambda m: dispatch.grouped_gemm_key(m, n, k, block_m, table))
        for m in m_values:
            config = dispatch.grouped_gemm_config(m, n, k, block_m, table)
            self._built(grouped_gemm.compile_variant(m, n, k, e, block_m, config), tick)
        return len(m_values)

    def attention(self, step, batches, tick):
        from ..kernels.jit import prefill_attention

        check_kernel(step)
        for seq_lens in batches:
            compiled = prefill_attention.compile_variant(
                sum(seq_lens), step.num_heads, step.num_kv_heads, step.head_size,
                dtype=str(step.dtype).removeprefix("torch."), is_causal=step.is_causal, softmax_scale=step.scale,
                softcap=float(step.logits_soft_cap or 0.0), sliding_window=tuple(step.sliding_window))
            self._built(compiled, tick)
        return len(batches)

    def kernel(self, step, launches, tick):
        return compile_runner_kernels(step, launches, tick, load=False)

    def autotune(self, step, tick, ctx):
        raise Unavailable("autotuning times launches: it runs in the main process only")
