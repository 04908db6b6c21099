"""The block-FP8 GEMM kernel, its operands and its launch (docs: executor.kernels.fp8_gemm).

Importable without torch: ``launch`` takes real tensors or ``StandIn``s alike (it reads
shapes, strides and data pointers only), so a precompile worker compiles the variant a
real call launches from its sizes alone.
"""

from __future__ import annotations

from .. import configs
from .._triton import LazyKernel, tl
from ..configs import SCALE_BLOCK, cdiv
from .stand_in import StandIn


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


def operands(M: int, N: int, K: int) -> dict[str, tuple[str, tuple]]:
    """Name -> (dtype, shape) of a call's operands, in ``GemmInputs`` order: a e4m3 (M, K)
    with fp32 per-token-group scales (M, K/128), b e4m3 (N, K) with fp32 block scales
    (ceil(N/128), K/128), out bf16 (M, N)."""
    ks = K // SCALE_BLOCK
    return {"a": ("float8_e4m3fn", (M, K)), "a_scales": ("float32", (M, ks)),
            "b": ("float8_e4m3fn", (N, K)), "b_scales": ("float32", (cdiv(N, SCALE_BLOCK), ks)),
            "out": ("bfloat16", (M, N))}


def stand_ins(M: int, N: int, K: int) -> dict[str, StandIn]:
    return {name: StandIn(dtype, shape) for name, (dtype, shape) in operands(M, N, K).items()}


def launch(a, a_scales, b, b_scales, out, config, compile_only=False):
    """Launch (or, ``compile_only``, compile without launching: returns the CompiledKernel)."""
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


def compile_variant(M: int, N: int, K: int, config):
    """Compile the variant a contiguous call with M rows and this config launches."""
    s = stand_ins(M, N, K)
    return launch(s["a"], s["a_scales"], s["b"], s["b_scales"], s["out"], config, compile_only=True)
