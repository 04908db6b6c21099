"""Block-scaled FP8 GEMM (vLLM's Triton ``w8a8_block_fp8_matmul`` path).

``C (M, N) = (A * As) @ (B * Bs).T`` with A e4m3 (M, K) scaled per 1x128 token
group by As (M, K/128) float32, B an e4m3 weight (N, K) ("NT") scaled per 128x128
block by Bs (ceil(N/128), K/128) float32, C bf16 (or the dtype of ``out``).
K must be a multiple of 128 (the scale group, as in vLLM); M and N are free: the
kernel wraps out-of-range rows/columns on load (``% M``, ``% N``, as vLLM does)
and masks them on store.

Specialization (Triton 3.6 rules, triton-and-peers.md §3.3). A launch's compile key holds:

* pointers a, b (fp8), out (bf16), a_scales, b_scales (fp32): dtype and 16-byte
  alignment. Row slices ``x[:m]`` of a buffer allocated at max M keep both.
* ``M``: in ``do_not_specialize``, so M == 1, M % 16 == 0 and other M share one
  compile (vLLM's kernel specializes M and gets up to 3 variants per config).
* ``N``, ``K`` and the strides: specialized (==1 / %16 / other), but fixed per layer.
  For contiguous inputs the strides are K, 1, K, 1, N, 1, K/128, 1, K/128, 1; the
  unit strides become ``constexpr 1``.
* constexprs BLOCK_SIZE_M/N/K, GROUP_SIZE_M and launch options num_warps/num_stages:
  the config, chosen by M from the (N, K, device) table or ``default_config``.

So for one layer shape the compiled variants are exactly the distinct configs the
hot path's M values select: ``specialization_classes(Ms, N, K, table)`` groups M values
by variant, and warming one M of each group covers them all (checked with Triton's
own binder, without a GPU, by tests/executor/test_kernels_compile.py).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from planner.dispatch import gemm_tables
from planner.dispatch import triton_kernels as dispatch

from . import configs
from ._triton import LazyKernel, tl
from .configs import SCALE_BLOCK, cdiv

KERNEL_NAME = dispatch.FP8_GEMM


def _fp8_gemm_kernel(
    A, B, C, As, Bs,
    M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
    stride_asm, stride_ask, stride_bsn, stride_bsk,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr, SCALE_BLOCK_N: tl.constexpr, SCALE_BLOCK_K: tl.constexpr,
):
    # Grouped ordering of the 1-D grid: GROUP_SIZE_M row tiles share each column tile in L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    rows = (offs_m % M).to(tl.int64)
    cols = (offs_n % N).to(tl.int64)
    a_ptrs = A + rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = B + cols[None, :] * stride_bn + offs_k[:, None] * stride_bk
    as_ptrs = As + rows * stride_asm
    bs_ptrs = Bs + (cols // SCALE_BLOCK_N) * stride_bsn

    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, K // BLOCK_SIZE_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        k_group = (k * BLOCK_SIZE_K) // SCALE_BLOCK_K
        a_s = tl.load(as_ptrs + k_group * stride_ask)
        b_s = tl.load(bs_ptrs + k_group * stride_bsk)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk

    c_ptrs = C + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=c_mask)


KERNEL = LazyKernel(_fp8_gemm_kernel, do_not_specialize=["M"])


def check_gemm_args(a, a_scales, b, b_scales) -> tuple[int, int, int]:
    """Validate shapes and dtypes; returns (M, N, K)."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"fp8_gemm: a and b must be 2-D, got {tuple(a.shape)} and {tuple(b.shape)}")
    (M, K), (N, Kb) = a.shape, b.shape
    if K != Kb:
        raise ValueError(f"fp8_gemm: a is (M={M}, K={K}) but b is (N={N}, K={Kb})")
    check_fp8_operands(a, a_scales, b, b_scales, K)
    if tuple(a_scales.shape) != (M, K // SCALE_BLOCK):
        raise ValueError(f"fp8_gemm: a_scales must be (M, K/128) = {(M, K // SCALE_BLOCK)}, "
                         f"got {tuple(a_scales.shape)}")
    if tuple(b_scales.shape) != (cdiv(N, SCALE_BLOCK), K // SCALE_BLOCK):
        raise ValueError(f"fp8_gemm: b_scales must be (ceil(N/128), K/128) = "
                         f"{(cdiv(N, SCALE_BLOCK), K // SCALE_BLOCK)}, got {tuple(b_scales.shape)}")
    return M, N, K


def check_fp8_operands(a, a_scales, b, b_scales, K: int) -> None:
    if K % SCALE_BLOCK:
        raise ValueError(f"K={K} must be a multiple of {SCALE_BLOCK} (the FP8 scale group size)")
    for name, t in (("a", a), ("b", b)):
        if t.dtype != torch.float8_e4m3fn:
            raise ValueError(f"{name} must be torch.float8_e4m3fn, got {t.dtype}")
    for name, t in (("a_scales", a_scales), ("b_scales", b_scales)):
        if t.dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {t.dtype}")


def check_out(out, shape, device, name="out") -> torch.Tensor:
    if out is None:
        return torch.empty(shape, dtype=torch.bfloat16, device=device)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(out.shape)}")
    return out


def fp8_gemm(a, a_scales, b, b_scales, out=None, config=None) -> torch.Tensor:
    """C = (a * a_scales) @ (b * b_scales).T; config defaults to ``resolve_config(M, N, K, a.device)``."""
    M, N, K = check_gemm_args(a, a_scales, b, b_scales)
    out = check_out(out, (M, N), a.device)
    if M > 0:
        _launch(a, a_scales, b, b_scales, out, config or resolve_config(M, N, K, a.device))
    return out


def _launch(a, a_scales, b, b_scales, out, config, compile_only=False):
    configs.validate_config(config)
    (M, K), N = a.shape, b.shape[0]
    grid = (cdiv(M, config["BLOCK_SIZE_M"]) * cdiv(N, config["BLOCK_SIZE_N"]),)
    args = (
        a, b, out, a_scales, b_scales,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        a_scales.stride(0), a_scales.stride(1), b_scales.stride(0), b_scales.stride(1),
    )
    options = dict(
        BLOCK_SIZE_M=config["BLOCK_SIZE_M"], BLOCK_SIZE_N=config["BLOCK_SIZE_N"],
        BLOCK_SIZE_K=config["BLOCK_SIZE_K"], GROUP_SIZE_M=config["GROUP_SIZE_M"],
        SCALE_BLOCK_N=SCALE_BLOCK, SCALE_BLOCK_K=SCALE_BLOCK,
        num_warps=config["num_warps"], num_stages=config["num_stages"],
    )
    if compile_only:
        return KERNEL.get().warmup(*args, grid=grid, **options)
    KERNEL[grid](*args, **options)


# --- config lookup: planner.dispatch, shared with the planner ---------------------------------------

def device_name(device=None) -> str:
    """The device whose tuned tables the kernels read: $WARMUP_TABLE_DEVICE when set (the
    executor sets it to the engine config's device, so that the kernels launch the configs
    of the tables its plan was made with, in every process and also on a GPU of another
    name), else the GPU's own name."""
    override = os.environ.get(gemm_tables.TABLE_DEVICE_ENV)
    if override:
        return override
    device = torch.device(device if device is not None else "cuda")
    if device.type != "cuda":
        return device.type
    return _cuda_device_name(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


@functools.lru_cache(maxsize=None)
def _cached_table(path: str):
    return gemm_tables.load_table(path) if Path(path).is_file() else None


def lookup_table(kernel: str, N: int, K: int, device=None):
    """The tuned table for (kernel, N, K, device) under ``configs.config_root()``, or None.

    Tables are read once per process (``clear_table_cache()`` forgets them).
    """
    return _cached_table(str(gemm_tables.table_path(kernel, N, K, device_name(device))))


def clear_table_cache() -> None:
    _cached_table.cache_clear()


def resolve_config(M: int, N: int, K: int, device=None) -> configs.Config:
    return dispatch.fp8_gemm_config(M, N, K, lookup_table(KERNEL_NAME, N, K, device))


# --- specialization facts for the planner -------------------------------------------------------

def specialization_key(M: int, N: int, K: int, table=None, config=None) -> str:
    """The compile key of the variant a call with M rows uses (contiguous inputs)."""
    return dispatch.fp8_gemm_key(M, N, K, table, config)


def specialization_classes(Ms, N: int, K: int, table=None) -> dict[str, list[int]]:
    """Group M values by compiled variant; one M per group warms the group."""
    classes: dict[str, list[int]] = {}
    for m in sorted(set(Ms)):
        classes.setdefault(specialization_key(m, N, K, table), []).append(m)
    return classes


# --- warmup helpers ------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmInputs:
    a: torch.Tensor
    a_scales: torch.Tensor
    b: torch.Tensor
    b_scales: torch.Tensor
    out: torch.Tensor

    def rows(self, m: int) -> "GemmInputs":
        """Views of the first m rows (same strides and alignment as the full buffers)."""
        return replace(self, a=self.a[:m], a_scales=self.a_scales[:m], out=self.out[:m])

    def args(self) -> tuple:
        return self.a, self.a_scales, self.b, self.b_scales


def alloc_gemm_inputs(M: int, N: int, K: int, device="cuda", random: bool = False, seed: int = 0,
                      out_dtype=torch.bfloat16) -> GemmInputs:
    """Scratch operands for M rows: zeros and unit scales, or seeded random quantized data."""
    if K % SCALE_BLOCK:
        raise ValueError(f"K={K} must be a multiple of {SCALE_BLOCK} (the FP8 scale group size)")
    out = torch.empty(M, N, dtype=out_dtype, device=device)
    if not random:
        a = torch.zeros(M, K, dtype=torch.float8_e4m3fn, device=device)
        b = torch.zeros(N, K, dtype=torch.float8_e4m3fn, device=device)
        a_s = torch.ones(M, K // SCALE_BLOCK, dtype=torch.float32, device=device)
        b_s = torch.ones(cdiv(N, SCALE_BLOCK), K // SCALE_BLOCK, dtype=torch.float32, device=device)
        return GemmInputs(a, a_s, b, b_s, out)
    from .reference import quantize_fp8_block, quantize_fp8_per_token_group

    gen = torch.Generator(device=device).manual_seed(seed)
    a, a_s = quantize_fp8_per_token_group(torch.randn(M, K, generator=gen, device=device))
    b, b_s = quantize_fp8_block(torch.randn(N, K, generator=gen, device=device) * 0.05)
    return GemmInputs(a, a_s, b, b_s, out)


def warmup(M: int, N: int, K: int, device="cuda", inputs: GemmInputs | None = None, config=None):
    """Compile and load the variant a call with M rows uses: one real launch on scratch tensors.

    Pass ``inputs`` allocated once at the largest M to avoid an allocation per M.
    Returns the config used.
    """
    inputs = (inputs or alloc_gemm_inputs(M, N, K, device)).rows(M)
    config = config or resolve_config(M, N, K, inputs.a.device)
    fp8_gemm(*inputs.args(), out=inputs.out, config=config)
    return config


def precompile(M: int, N: int, K: int, device="cuda", inputs: GemmInputs | None = None, config=None):
    """Compile, without launching or loading, the variant a call with M rows uses
    (``JITFunction.warmup``; the module still loads at the first launch). Returns the
    CompiledKernel (None under the interpreter)."""
    inputs = (inputs or alloc_gemm_inputs(M, N, K, device)).rows(M)
    config = config or resolve_config(M, N, K, inputs.a.device)
    return _launch(*inputs.args(), inputs.out, config, compile_only=True)
