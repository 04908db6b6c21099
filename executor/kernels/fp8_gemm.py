"""Block-scaled FP8 GEMM (vLLM's Triton ``w8a8_block_fp8_matmul`` path).

``C (M, N) = (A * As) @ (B * Bs).T`` with A e4m3 (M, K) scaled per 1x128 token
group by As (M, K/128) float32, B an e4m3 weight (N, K) ("NT") scaled per 128x128
block by Bs (ceil(N/128), K/128) float32, C bf16 (or the dtype of ``out``).
K must be a multiple of 128 (the scale group, as in vLLM); M and N are free: the
kernel wraps out-of-range rows/columns on load (``% M``, ``% N``, as vLLM does)
and masks them on store.

Specialization (Triton v3.6.0 rules: python/src/specialize.cc `native_specialize_impl`,
python/triton/runtime/jit.py `create_function_from_signature`). A launch's compile key holds:

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

from dataclasses import dataclass, replace

import torch

from kernel_model import triton_kernels as dispatch

from . import configs
from .configs import SCALE_BLOCK, cdiv, clear_table_cache, device_name, lookup_table  # noqa: F401 - re-exported
from .jit import fp8_gemm as jit  # the @triton.jit kernel and its launch (no torch)

KERNEL_NAME = dispatch.FP8_GEMM


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


def fp8_gemm(a, a_scales, b, b_scales, out=None, config=None, table_device: str | None = None) -> torch.Tensor:
    """C = (a * a_scales) @ (b * b_scales).T; config defaults to ``resolve_config(M, N, K, a.device,
    table_device)``."""
    M, N, K = check_gemm_args(a, a_scales, b, b_scales)
    out = check_out(out, (M, N), a.device)
    if M > 0:
        _launch(a, a_scales, b, b_scales, out, config or resolve_config(M, N, K, a.device, table_device))
    return out


_launch = jit.launch  # one argument list for real launches and workers' compile-only calls


# --- config lookup: kernel_model, shared with the planner ---------------------------------------

def resolve_config(M: int, N: int, K: int, device=None, table_device: str | None = None) -> configs.Config:
    return dispatch.fp8_gemm_config(M, N, K, lookup_table(KERNEL_NAME, N, K, device, table_device))


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
    shapes = jit.operands(M, N, K)
    out = torch.empty(shapes["out"][1], dtype=out_dtype, device=device)
    if not random:
        a = torch.zeros(shapes["a"][1], dtype=torch.float8_e4m3fn, device=device)
        b = torch.zeros(shapes["b"][1], dtype=torch.float8_e4m3fn, device=device)
        a_s = torch.ones(shapes["a_scales"][1], dtype=torch.float32, device=device)
        b_s = torch.ones(shapes["b_scales"][1], dtype=torch.float32, device=device)
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
