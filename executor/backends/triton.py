"""`triton`: the project's own Triton kernels (executor.kernels): block-FP8 GEMM, grouped
MoE GEMM, prefill attention, and their autotuning.

Each call is a real launch on scratch tensors (zeros, unit scales, as vLLM's warmup
does), so the compile, the launcher build and the module load all happen here and not
in serving. Tensors are allocated once per shape at the largest size of the step and
sliced per M: slices keep dtype, strides and 16-byte alignment, hence the variant.
On CPU the kernels run under the Triton interpreter (tests); nothing compiles there.
"""

from __future__ import annotations

import math
import time

from planner.plan.steps import GemmLike

from .base import BaseBackend, Unavailable, torch_cuda_available

SYNC_EVERY = 256  # launches between synchronizations: keeps the queue short and the ETA honest
LAUNCH_CYCLES = 120_000  # GPU clock cycles (about 60 us) to cover the host-side cost of one launch


def check_planned_keys(step, values: list[int], launched_key) -> None:
    """An exact step pairs each M with the compile key it was planned for: refuse to launch
    a different one (the tables changed since planning, or the kernel's dispatch did), so
    that planned and launched variants cannot drift apart silently."""
    if not step.exact or list(values) != list(step.m_values):
        return  # not an exact step, or a hot-path check at other M: nothing was planned per value
    for variant in step.variants:
        now = launched_key(variant.first)
        if now != variant.key:
            raise RuntimeError(f"step {step.id}: M={variant.first} was planned as {variant.key} but would launch "
                               f"{now}; the tuned tables or the kernels changed since planning: re-run `warmup plan`")


# The kernel names a step may give for each family (vLLM's and DeepGEMM's names included).
KERNELS = {"gemm": ("fp8_gemm", "fp8_gemm_nt", "gemm_fp8_fp8_bf16_nt", "w8a8_block_fp8_matmul"),
           "grouped_gemm": ("grouped_fp8_gemm", "m_grouped_fp8_gemm_nt_contiguous",
                            "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"),
           "attention": ("context_attention_fwd", "prefill_attention")}


def check_kernel(step) -> None:
    """Refuse a step whose kernel or weight blocks these kernels do not implement."""
    if step.kernel not in KERNELS[step.family]:
        raise Unavailable(f"triton backend has no kernel {step.kernel!r} for {step.family} "
                          f"(it has {', '.join(KERNELS[step.family])})")
    block = step.block_size if isinstance(step, GemmLike) else None  # attention has no weight blocks
    if block is not None and list(block) != [128, 128]:
        raise Unavailable(f"triton block-FP8 kernels take 128x128 weight blocks, the step has {list(block)}")


def grouped_gemm_shape(step, m_values: list[int]) -> tuple[int, int, int, int]:
    """(N, K, number of experts, block_m) of a grouped GEMM step whose M_sum values fit its layout."""
    check_kernel(step)
    block_m = step.alignment
    bad = [m for m in m_values if m % block_m]
    if bad:
        raise ValueError(f"grouped GEMM M_sum values must be multiples of the alignment {block_m}: {bad[:5]}")
    return step.n, step.k, step.num_groups, block_m


def compile_runner_kernels(step, launches: list, tick, load: bool) -> int:
    """Compile each planned variant of one of the runner's kernels (each checked against its
    planned key), launching nothing; with `load`, also load it into this process."""
    from ..runner import kernels as rk

    if step.kernel not in rk.LAUNCHABLE:
        raise Unavailable(f"triton backend has no runner kernel {step.kernel!r}")
    for variant in step.variants:
        if variant.first.key() != variant.key:
            raise RuntimeError(f"step {step.id}: a variant was planned as {variant.key} but its arguments "
                               f"give {variant.first.key()}; re-run `warmup plan`")
    for launch in launches:
        rk.compile_launch(launch, load=load)
        tick(1)
    return len(launches)


class TritonBackend(BaseBackend):
    name = "triton"
    families = ("gemm", "grouped_gemm", "attention", "autotune", "kernel")
    compiles_for_cuda = True  # its workers run the compile-only twin (triton_compile.py): no torch

    def __init__(self, device: str = "cuda", options=None):
        super().__init__(device, options)
        self._buffers: dict = {}

    def available(self) -> tuple[bool, str]:
        ok, why = torch_cuda_available(self.device)
        if not ok:
            return ok, why
        try:
            import triton  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return False, f"triton is not importable ({type(e).__name__}: {e})"
        try:
            from ..kernels import fp8_gemm, grouped_gemm, prefill_attention  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return False, f"executor.kernels is not importable ({type(e).__name__}: {e})"
        if not str(self.device).startswith("cuda"):
            from ..kernels._triton import interpreting
            if not interpreting():
                return False, f"device {self.device!r} needs TRITON_INTERPRET=1 (set before triton is imported)"
        return True, ""

    # --- helpers -----------------------------------------------------------------------------

    def _buffer(self, key, size: int, make):
        have = self._buffers.get(key)
        if have is None or have[0] < size:
            self._buffers.pop(key, None)
            self._buffers[key] = (size, make(size))
        return self._buffers[key][1]

    def synchronize(self) -> None:
        import torch
        if str(self.device).startswith("cuda"):
            torch.cuda.synchronize(self.device)

    def _launch_loop(self, values, launch, tick) -> int:
        n = 0
        for value in values:
            launch(value)
            n += 1
            if n % SYNC_EVERY == 0:
                self.synchronize()
                tick(SYNC_EVERY)
        self.synchronize()
        tick(n % SYNC_EVERY)
        return n

    # --- families ------------------------------------------------------------------------------

    def gemm(self, step, m_values, tick):
        from ..kernels import fp8_gemm as g

        check_kernel(step)
        n, k = step.n, step.k
        inputs = self._buffer(step.shape_key(), max(m_values),
                              lambda m: g.alloc_gemm_inputs(m, n, k, device=self.device))

        check_planned_keys(step, m_values, lambda m: g.specialization_key(
            m, n, k, table=g.lookup_table(g.KERNEL_NAME, n, k, self.device, self.table_device)))

        def launch(m):
            rows = inputs.rows(m)
            g.fp8_gemm(*rows.args(), out=rows.out, table_device=self.table_device)

        return self._launch_loop(m_values, launch, tick)

    def grouped_gemm(self, step, m_values, tick):
        from ..kernels import fp8_gemm as g
        from ..kernels import grouped_gemm as gg

        n, k, e, block_m = grouped_gemm_shape(step, m_values)
        inputs = self._buffer(step.shape_key(), max(m_values),
                              lambda m: gg.alloc_grouped_inputs(m, n, k, e, device=self.device, block_m=block_m))

        check_planned_keys(step, m_values, lambda m: gg.specialization_key(
            m, n, k, block_m, table=g.lookup_table(gg.KERNEL_NAME, n, k, self.device, self.table_device)))

        def launch(m):
            rows = inputs.rows(m)
            gg.grouped_fp8_gemm(*rows.args(), block_m=block_m, out=rows.out, table_device=self.table_device)

        return self._launch_loop(m_values, launch, tick)

    def attention(self, step, batches, tick):
        import torch

        from ..kernels import prefill_attention as pa

        check_kernel(step)
        h, kvh, d = step.num_heads, step.num_kv_heads, step.head_size
        dtype = getattr(torch, str(step.dtype).removeprefix("torch."))
        window = tuple(step.sliding_window)
        # vLLM: sliding_window [left, right] with -1 unbounded; the kernel takes (q, k) windows alike.
        total = max(sum(b) for b in batches)
        inputs = self._buffer(("attention", h, kvh, d, str(dtype)), total,
                              lambda t: pa.alloc_attention_inputs(t, h, kvh, d, dtype=dtype, device=self.device))

        def launch(seq_lens):
            t = sum(seq_lens)
            pa.warmup(t, h, kvh, d, dtype=dtype, device=self.device, inputs=inputs, seq_lens=seq_lens,
                      is_causal=step.is_causal, softmax_scale=step.scale,
                      softcap=float(step.logits_soft_cap or 0.0), sliding_window=window)

        return self._launch_loop(batches, launch, tick)

    def kernel(self, step, launches, tick):
        """Compile and load each planned variant of one of the runner's kernels, launching nothing."""
        if not str(self.device).startswith("cuda"):
            raise Unavailable("runner kernels compile only on a CUDA device (the interpreter compiles nothing)")
        return compile_runner_kernels(step, launches, tick, load=True)

    def autotune(self, step, tick, ctx):
        import torch

        from .. import autotune as at
        from ..kernels import configs
        from ..kernels import fp8_gemm as g

        capturing = str(self.device).startswith("cuda") and torch.cuda.is_current_stream_capturing()
        at.ensure_not_capturing(capturing or getattr(ctx, "capturing", False))
        unsupported = sorted({s.kernel for s in step.shapes or () if s.kernel != "fp8_gemm"})
        if unsupported:
            raise Unavailable(f"triton autotune has no tuner for {', '.join(unsupported)} (only fp8_gemm)")
        retune = bool(getattr(self.options, "retune", False))
        try:
            details = at.tune_step(step, device_name=g.device_name(self.device, self.table_device), root=configs.config_root(),
                                   retune=retune, candidates=lambda kernel: [dict(c) for c in configs.CANDIDATE_CONFIGS],
                                   bench_for=self._bench_for, tick=tick, configs_module=configs)
        finally:
            g.clear_table_cache()  # the GEMM steps after this one must see the new tables
            self._buffers.pop("autotune", None)
            if str(self.device).startswith("cuda"):
                torch.cuda.empty_cache()
        return details

    def _bench_for(self, kernel: str, n: int, k: int, max_m: int):
        """Benchmark of fp8_gemm on random quantized data (never zeros) at (n, k)."""
        import torch

        from ..kernels import fp8_gemm as g
        from ..kernels.reference import quantize_fp8_block, quantize_fp8_per_token_group

        self._buffers.pop("autotune", None)
        gen = torch.Generator(device=self.device).manual_seed(n * 131 + k)
        a, a_s = quantize_fp8_per_token_group(torch.randn(max_m, k, device=self.device, generator=gen))
        b, b_s = quantize_fp8_block(torch.randn(n, k, device=self.device, generator=gen) * 0.05)
        out = torch.empty(max_m, n, dtype=torch.bfloat16, device=self.device)
        self._buffers["autotune"] = (max_m, (a, a_s, b, b_s, out))
        cuda = str(self.device).startswith("cuda")
        sleep = getattr(torch.cuda, "_sleep", None) if cuda else None

        def bench(m: int, config: dict) -> float:
            args = (a[:m], a_s[:m], b, b_s)
            run = lambda: g.fp8_gemm(*args, out=out[:m], config=config)  # noqa: E731
            try:
                run()  # compile, launcher build and module load stay out of the timing
                self.synchronize()
            except Exception as e:  # noqa: BLE001 - e.g. OutOfResources: this candidate cannot run
                if type(e).__name__ == "OutOfMemoryError":
                    raise
                return math.inf
            if not cuda:
                t0 = time.perf_counter()
                run()
                return (time.perf_counter() - t0) * 1e3
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            once = max(start.elapsed_time(end), 1e-3)
            reps = int(min(100, max(5, 2.0 / once)))  # about 2 ms of launches, 5 to 100 of them
            if sleep is not None:
                # Hold the GPU while the launches queue up behind it, so that small-M kernels
                # are timed back to back on the GPU rather than at Python's launch rate.
                sleep(int(reps * LAUNCH_CYCLES))
            start.record()
            for _ in range(reps):
                run()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / reps

        return bench

    # --- memory ------------------------------------------------------------------------------------

    def release(self, step) -> None:
        # GEMM buffers are keyed by the step's shape; attention buffers are small and shared by
        # every step of one layer key, and kept.
        if step.family in ("gemm", "grouped_gemm"):
            self._buffers.pop(step.shape_key(), None)

    def close(self) -> None:
        self._buffers.clear()
        try:
            import torch
            if str(self.device).startswith("cuda") and torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass
