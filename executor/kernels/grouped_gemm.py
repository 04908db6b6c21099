"""Grouped (MoE) block-FP8 GEMM over a contiguous, expert-sorted layout.

The semantics of DeepGEMM's ``m_grouped_fp8_gemm_nt_contiguous``: A (M_sum, K) e4m3
with (M_sum, K/128) float32 per-token-group scales; B (E, N, K) e4m3 with
(E, ceil(N/128), K/128) float32 block scales; ``expert_ids`` int32 (M_sum,).
Rows come sorted by expert, each expert's rows padded to a multiple of ``block_m``,
so every aligned chunk of ``block_m`` rows belongs to one expert: the expert id of
the chunk's first row. A chunk whose id is -1 is padding and its output rows are
written as zeros. Rows of a valid chunk are all computed with its expert (padding
rows inside it get defined but meaningless values). Out is bf16 (M_sum, N).

The grid is (M_sum / BLOCK_SIZE_M, N / BLOCK_SIZE_N); BLOCK_SIZE_M must divide
``block_m``, so each program lies inside one chunk and reads its expert id once.
GROUP_SIZE_M of the config is unused (the N tile is the slow grid axis, so
consecutive programs share an expert's weight tile).

Specialization (Triton v3.6.0: python/src/specialize.cc `native_specialize_impl`,
python/triton/runtime/jit.py `create_function_from_signature`): ``M`` (M_sum) is in
``do_not_specialize``; ``expert_ids`` is in ``do_not_specialize_on_alignment`` (only
scalar loads read it); N, K and the strides are specialized but fixed per layer;
constexprs are the config plus CHUNK_M (= block_m). As for ``fp8_gemm``, the
variants of one layer are the distinct configs the hot path's M_sum values select.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from kernel_model import triton_kernels as dispatch

from . import configs
from .configs import SCALE_BLOCK, cdiv, lookup_table
from .fp8_gemm import check_fp8_operands, check_out
from .jit import grouped_gemm as jit  # the @triton.jit kernel and its launch (no torch)

KERNEL_NAME = dispatch.GROUPED_FP8_GEMM


def check_grouped_args(a, a_scales, b, b_scales, expert_ids, block_m) -> tuple[int, int, int, int]:
    """Validate shapes and dtypes; returns (M_sum, N, K, E)."""
    if a.dim() != 2 or b.dim() != 3:
        raise ValueError(f"grouped_fp8_gemm: a must be (M_sum, K) and b (E, N, K), "
                         f"got {tuple(a.shape)} and {tuple(b.shape)}")
    (M, K), (E, N, Kb) = a.shape, b.shape
    if K != Kb:
        raise ValueError(f"grouped_fp8_gemm: a is (M_sum={M}, K={K}) but b is (E={E}, N={N}, K={Kb})")
    check_fp8_operands(a, a_scales, b, b_scales, K)
    if tuple(a_scales.shape) != (M, K // SCALE_BLOCK):
        raise ValueError(f"grouped_fp8_gemm: a_scales must be (M_sum, K/128) = {(M, K // SCALE_BLOCK)}, "
                         f"got {tuple(a_scales.shape)}")
    if tuple(b_scales.shape) != (E, cdiv(N, SCALE_BLOCK), K // SCALE_BLOCK):
        raise ValueError(f"grouped_fp8_gemm: b_scales must be (E, ceil(N/128), K/128) = "
                         f"{(E, cdiv(N, SCALE_BLOCK), K // SCALE_BLOCK)}, got {tuple(b_scales.shape)}")
    if expert_ids.dtype != torch.int32 or tuple(expert_ids.shape) != (M,):
        raise ValueError(f"grouped_fp8_gemm: expert_ids must be int32 of shape ({M},), "
                         f"got {expert_ids.dtype} {tuple(expert_ids.shape)}")
    if block_m < 16 or block_m & (block_m - 1):
        raise ValueError(f"grouped_fp8_gemm: block_m={block_m} must be a power of two >= 16")
    return M, N, K, E


def grouped_config(M: int, N: int, K: int, block_m: int, device=None, table_device: str | None = None) -> configs.Config:
    """Tuned (table) or default config, with BLOCK_SIZE_M capped to divide block_m."""
    table = lookup_table(KERNEL_NAME, N, K, device, table_device) if device is not None else None
    return dispatch.grouped_gemm_config(M, N, K, block_m, table)


def grouped_fp8_gemm(a, a_scales, b, b_scales, expert_ids, block_m: int = 128, out=None, config=None,
                     table_device: str | None = None):
    """out[rows of chunk c] = (a * a_scales)[rows] @ (b[e] * b_scales[e]).T, e = expert_ids[c * block_m]."""
    M, N, K, _ = check_grouped_args(a, a_scales, b, b_scales, expert_ids, block_m)
    out = check_out(out, (M, N), a.device)
    if M > 0:
        config = config or grouped_config(M, N, K, block_m, a.device, table_device)
        _launch(a, a_scales, b, b_scales, expert_ids, block_m, out, config)
    return out


_launch = jit.launch


# --- specialization facts for the planner -------------------------------------------------------

def specialization_key(M: int, N: int, K: int, block_m: int = 128, table=None, config=None) -> str:
    """The compile key of the variant a call with M_sum rows uses (contiguous inputs)."""
    return dispatch.grouped_gemm_key(M, N, K, block_m, table, config)


def specialization_classes(Ms, N: int, K: int, block_m: int = 128, table=None) -> dict[str, list[int]]:
    classes: dict[tuple, list[int]] = {}
    for m in sorted(set(Ms)):
        classes.setdefault(specialization_key(m, N, K, block_m, table), []).append(m)
    return classes


# --- inputs and warmup helpers ---------------------------------------------------------------------

@dataclass(frozen=True)
class GroupedInputs:
    a: torch.Tensor
    a_scales: torch.Tensor
    b: torch.Tensor
    b_scales: torch.Tensor
    expert_ids: torch.Tensor
    out: torch.Tensor

    def rows(self, m: int) -> "GroupedInputs":
        """Views of the first m rows; keep m a multiple of block_m for a valid layout."""
        return replace(self, a=self.a[:m], a_scales=self.a_scales[:m], expert_ids=self.expert_ids[:m],
                       out=self.out[:m])

    def args(self) -> tuple:
        return self.a, self.a_scales, self.b, self.b_scales, self.expert_ids


def alloc_grouped_inputs(M_sum: int, N: int, K: int, E: int, device="cuda", block_m: int = 128,
                         random: bool = False, seed: int = 0, out_dtype=torch.bfloat16) -> GroupedInputs:
    """Scratch operands; rows are spread round-robin over experts, one chunk at a time."""
    if K % SCALE_BLOCK:
        raise ValueError(f"K={K} must be a multiple of {SCALE_BLOCK} (the FP8 scale group size)")
    chunk_experts = torch.arange(cdiv(M_sum, block_m), dtype=torch.int32) % E
    expert_ids = chunk_experts.repeat_interleave(block_m)[:M_sum].to(device)
    shapes = jit.operands(M_sum, N, K, E)
    out = torch.empty(shapes["out"][1], dtype=out_dtype, device=device)
    if not random:
        a = torch.zeros(shapes["a"][1], dtype=torch.float8_e4m3fn, device=device)
        b = torch.zeros(shapes["b"][1], dtype=torch.float8_e4m3fn, device=device)
        a_s = torch.ones(shapes["a_scales"][1], dtype=torch.float32, device=device)
        b_s = torch.ones(shapes["b_scales"][1], dtype=torch.float32, device=device)
        return GroupedInputs(a, a_s, b, b_s, expert_ids, out)
    from .reference import quantize_fp8_block, quantize_fp8_per_token_group

    gen = torch.Generator(device=device).manual_seed(seed)
    a, a_s = quantize_fp8_per_token_group(torch.randn(M_sum, K, generator=gen, device=device))
    b, b_s = quantize_fp8_block(torch.randn(E, N, K, generator=gen, device=device) * 0.05)
    return GroupedInputs(a, a_s, b, b_s, expert_ids, out)


def warmup(M_sum: int, N: int, K: int, E: int, device="cuda", block_m: int = 128,
           inputs: GroupedInputs | None = None, config=None):
    """Compile and load the variant a call with M_sum rows uses; returns the config used."""
    inputs = (inputs or alloc_grouped_inputs(M_sum, N, K, E, device, block_m)).rows(M_sum)
    config = config or grouped_config(M_sum, N, K, block_m, inputs.a.device)
    grouped_fp8_gemm(*inputs.args(), block_m=block_m, out=inputs.out, config=config)
    return config


def precompile(M_sum: int, N: int, K: int, E: int, device="cuda", block_m: int = 128,
               inputs: GroupedInputs | None = None, config=None):
    """Compile without launching (see ``fp8_gemm.precompile``); returns the CompiledKernel."""
    inputs = (inputs or alloc_grouped_inputs(M_sum, N, K, E, device, block_m)).rows(M_sum)
    config = config or grouped_config(M_sum, N, K, block_m, inputs.a.device)
    return _launch(*inputs.args(), block_m, inputs.out, config, compile_only=True)
