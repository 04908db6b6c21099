"""Per-M oracles for the DeepGEMM SM90 model (kernel_model/deep_gemm.py), for tests only.

The planner asks the model for the distinct keys of many M-values at once (``dense_keys``,
``grouped_contiguous_keys``), computed once per class of M with a pruned search. These
functions answer one M at a time, and ``select_all`` weighs every candidate without pruning,
so the tests can check the fast paths against the plain definition. They reach into the
model's private helpers on purpose: they must compute the same thing another way.
"""

from __future__ import annotations

from typing import Callable, Iterable

from kernel_model.arith import cdiv
from kernel_model.deep_gemm import (
    BLOCK_K,
    DENSE_KERNEL,
    GROUPED_KERNEL,
    _Candidate,
    _Space,
    _check,
    _compiled,
    _cycles,
    _key,
    _model,
    block_m_candidates,
)


def select_all(space: _Space, m: int) -> _Candidate:
    """get_best_config without pruning: every allowed candidate counted exactly, the first of
    the strictly smallest counts (enumeration order) winning, as DeepGEMM does."""
    allowed = block_m_candidates(m, not space.dense, space.candidates[0].block_m)
    return min((c for c in space.candidates if c.block_m in allowed), key=lambda c: (_cycles(space, c, m), c.order))


def dense_kernel_key(m: int, n: int, k: int, num_sms: int, compiled_dims: str = "nk") -> str:
    """The JIT kernel ``fp8_gemm_nt`` compiles for M rows, e.g.
    ``sm90_fp8_gemm_1d2d:n=7168,k=2048,block_m=64,block_n=112,block_k=128,stages=9,multicast=1,sms=132``."""
    _check(m, n, k, num_sms)
    model = _model(False, n, k, num_sms)
    return _key(DENSE_KERNEL, _compiled(m, n, k, compiled_dims), model.winner(model.m_class(m)), num_sms)


def grouped_contiguous_kernel_key(m_sum: int, n: int, k: int, num_groups: int, num_sms: int,
                                  mk_alignment: int = 128, compiled_dims: str = "nk") -> str:
    """The JIT kernel ``m_grouped_fp8_gemm_nt_contiguous`` compiles for M_sum rows over G groups."""
    if num_groups < 1:
        raise ValueError(f"num_groups must be positive, got {num_groups}")
    _check(m_sum, n, k, num_sms)
    model = _model(True, n, k, num_sms, mk_alignment)
    dims = f"groups={num_groups}," + _compiled(m_sum, n, k, compiled_dims)
    return _key(GROUPED_KERNEL, dims, model.winner(model.m_class(m_sum)), num_sms)


def sf_transpose_key(k: int) -> str:
    """The helper kernel that makes row-major 1x128 activation scales MN-major (one per K):
    ``transpose_fp32<512, 64, K / 128>`` (DeepGEMM csrc/jit_kernels/impls/smxx_layout.hpp)."""
    return f"transpose_fp32:num_threads=512,block_mn=64,sf_k={cdiv(k, BLOCK_K)}"


def enumerate_keys(ms: Iterable[int], key_fn: Callable[[int], str]) -> dict[str, list[int]]:
    """key -> the M-values that reach it, keys in order of their first M (one call per M)."""
    out: dict[str, list[int]] = {}
    for m in ms:
        out.setdefault(key_fn(m), []).append(m)
    return out
