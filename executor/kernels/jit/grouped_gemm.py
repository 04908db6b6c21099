"""The grouped (MoE) block-FP8 GEMM kernel, its operands and its launch (docs:
executor.kernels.grouped_gemm). Importable without torch, as ``jit.fp8_gemm``."""

from __future__ import annotations

from .. import configs
from .._triton import LazyKernel, tl
from ..configs import SCALE_BLOCK, cdiv
from .stand_in import StandIn


def _grouped_fp8_gemm_kernel(
    A, B, C, As, Bs, expert_ids,
    M, N, K,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
    stride_asm, stride_ask, stride_bse, stride_bsn, stride_bsk,
    CHUNK_M: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr, SCALE_BLOCK_N: tl.constexpr, SCALE_BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    first_row = pid_m * BLOCK_SIZE_M
    expert = tl.load(expert_ids + (first_row // CHUNK_M) * CHUNK_M)

    offs_m = first_row + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = C + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if expert < 0:
        tl.store(c_ptrs, tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=C.dtype.element_ty), mask=c_mask)
        return

    offs_k = tl.arange(0, BLOCK_SIZE_K)
    rows = (offs_m % M).to(tl.int64)
    cols = (offs_n % N).to(tl.int64)
    expert = expert.to(tl.int64)
    a_ptrs = A + rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = B + expert * stride_be + cols[None, :] * stride_bn + offs_k[:, None] * stride_bk
    as_ptrs = As + rows * stride_asm
    bs_ptrs = Bs + expert * stride_bse + (cols // SCALE_BLOCK_N) * stride_bsn

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

    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=c_mask)


KERNEL = LazyKernel(_grouped_fp8_gemm_kernel, do_not_specialize=["M"],
                    do_not_specialize_on_alignment=["expert_ids"])


def operands(M_sum: int, N: int, K: int, E: int) -> dict[str, tuple[str, tuple]]:
    """Name -> (dtype, shape), in ``GroupedInputs`` order."""
    ks = K // SCALE_BLOCK
    return {"a": ("float8_e4m3fn", (M_sum, K)), "a_scales": ("float32", (M_sum, ks)),
            "b": ("float8_e4m3fn", (E, N, K)), "b_scales": ("float32", (E, cdiv(N, SCALE_BLOCK), ks)),
            "expert_ids": ("int32", (M_sum,)), "out": ("bfloat16", (M_sum, N))}


def launch(a, a_scales, b, b_scales, expert_ids, block_m, out, config, compile_only=False):
    """Launch (or, ``compile_only``, compile without launching: returns the CompiledKernel)."""
    configs.validate_config(config)
    if block_m % config["BLOCK_SIZE_M"]:
        raise ValueError(f"grouped_fp8_gemm: BLOCK_SIZE_M={config['BLOCK_SIZE_M']} must divide block_m={block_m}")
    (M, K), N = a.shape, b.shape[1]
    grid = (cdiv(M, config["BLOCK_SIZE_M"]), cdiv(N, config["BLOCK_SIZE_N"]))
    args = (
        a, b, out, a_scales, b_scales, expert_ids,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), out.stride(0), out.stride(1),
        a_scales.stride(0), a_scales.stride(1), b_scales.stride(0), b_scales.stride(1), b_scales.stride(2),
    )
    options = dict(
        CHUNK_M=block_m, BLOCK_SIZE_M=config["BLOCK_SIZE_M"], BLOCK_SIZE_N=config["BLOCK_SIZE_N"],
        BLOCK_SIZE_K=config["BLOCK_SIZE_K"], SCALE_BLOCK_N=SCALE_BLOCK, SCALE_BLOCK_K=SCALE_BLOCK,
        num_warps=config["num_warps"], num_stages=config["num_stages"],
    )
    if compile_only:
        return KERNEL.get().warmup(*args, grid=grid, **options)
    KERNEL[grid](*args, **options)


def compile_variant(M_sum: int, N: int, K: int, E: int, block_m: int, config):
    """Compile the variant a contiguous call with M_sum rows and this config launches."""
    s = {name: StandIn(dtype, shape) for name, (dtype, shape) in operands(M_sum, N, K, E).items()}
    return launch(s["a"], s["a_scales"], s["b"], s["b_scales"], s["expert_ids"], block_m, s["out"], config,
                  compile_only=True)
