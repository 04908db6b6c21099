"""DeepGEMM's SM90 kernel selection: which JIT kernel a call compiles, in pure Python.

Models deepseek-ai/DeepGEMM at commit 54e2261 (v2.6.1) on SM90 (H100/H200), for the two
calls vLLM's warmup makes, exactly as it makes them:

- ``fp8_gemm_nt((a, sfa), (b, sfb), d)``: A e4m3 [M, K] K-major with float32 1x128 scales,
  B e4m3 [N, K] K-major with float32 128x128 scales, D bf16 [M, N], no C. The default
  recipe on SM90 is (1, 128, 128) and the B scales are not per-channel, so this is the
  1D2D kernel ``sm90_fp8_gemm_1d2d`` (csrc/apis/gemm.hpp), GemmType::Normal.
- ``m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices)``: the same with
  B [G, N, K] and ``use_psum_layout=False``: ``sm90_m_grouped_fp8_gemm_contiguous_1d2d``,
  GemmType::MGroupedContiguous, 1D2D.

What makes a new kernel. ``Compiler::build`` (csrc/jit/compiler.hpp) hashes kernel name,
compiler signature, flags and the generated source; each distinct hash is one directory
``$DG_JIT_CACHE_DIR/cache/kernel.<name>.<hash>/`` (kernel.cu, kernel.cubin). The source
(csrc/jit_kernels/impls/sm90_fp8_gemm_1d2d.hpp) instantiates ``sm90_fp8_gemm_1d2d_impl``
with: the SFB major (K here), SHAPE_M/N/K through ``get_compiled_dim`` (the default
``compiled_dims="nk"`` compiles N and K in and passes M at run time as 0; with
``set_ignore_compile_dims(True)`` none is compiled in), num_groups (1 for the dense GEMM,
G for the grouped one), block_m/n/k, the A/B/D swizzles, num_stages, TMA and math thread
counts, the cluster size and whether the multicast is on A (cluster_n > 1), num_sms, the
GEMM type, the D dtype and the epilogue (identity). For fixed dtypes and majors all of these
follow from (block_m, block_n, cluster_m, cluster_n) plus N, K, G and the SM count: the
swizzles from block_k and block_n, the stage count from the shared-memory budget, the math
threads from block_m. So M matters only through the layout the heuristic picks for it.

The heuristic (csrc/jit_kernels/heuristics/sm90.hpp, common.hpp): enumerate layouts in the
order cluster (1,1), (1,2), (2,1) [cluster_m, cluster_n; size <= 2, SM count divisible by
it], block_m in {64, 128} + {16 if M <= 16} + {32 if M <= 32} + {256} (bf16 D) for the dense
GEMM or {mk alignment} (128 unless set_mk_alignment_for_contiguous_layout changed it) for the
grouped one, block_n in 16..192 step 16; drop the ones the 1D2D unroll rule refuses (176),
block_m and block_n both > 128, or too few pipeline stages (< 3, or < 4 when
block_m * block_n < 128 * 192). Each survivor gets a modelled cycle count (L1/L2 bytes per
block x blocks / bandwidth, divided by the last-wave efficiency in float32; a cluster with at
most one wave is disabled) and the first strictly smallest count wins. The grouped GEMM's
count uses M_sum as M and one group. Because the only M-dependence is ceil(M / block_m) and
the two small-M thresholds, the key is a function of ceil(M / 16) for M <= 32 and of
ceil(M / 64) above: that is what this module memoizes.

Also compiled on a call, not by M: the activation scales arrive row-major, so on SM90
``get_mn_major_tma_aligned_tensor`` builds ``transpose_fp32<512, 64, K / 128>`` to make them
MN-major and TMA-aligned (csrc/jit_kernels/impls/smxx_layout.hpp); one kernel per distinct K,
shared by the dense and the grouped GEMM. It is not in ``compile_keys``: the first call of
any M compiles it. The weight scales need no transform.

Not modelled: SM100 (a different heuristic and kernels), FP32 output, C accumulation,
1D1D (per-channel B scales), masked / psum / K-grouped layouts, ``set_block_size_multiple_of``
(default 1 assumed), ``set_num_sms`` (pass the SM count you set), a
``set_mk_alignment_for_contiguous_layout`` other than the ``mk_alignment`` argument, and
``set_ignore_compile_dims`` other than through ``compiled_dims``. Nothing here depends on
the data, the GPU clock or the tc_util setting (unused on SM90). Static facts the model
cannot see: the NVCC/NVRTC version and flags (part of the hash: a new toolkit recompiles
everything, with the same number of kernels) and the float32 arithmetic of the host
compiler (emulated here exactly, assuming IEEE single precision without fast-math, which
DeepGEMM's setup.py does not enable). Only the scale tensors' row-major layout is assumed
for the transpose kernel: scales already MN-major and TMA-aligned skip it.

Checked on the GPU by bench/deep_gemm_gpu.py against DeepGEMM built from 54e2261: every
kernel compiled where and as predicted (its kernel.cu template arguments equal the key), and
DeepGEMM's printed configuration, cycle count included, equal to ``dense_layout`` /
``grouped_contiguous_layout`` for every call (bench/RESULTS.md, part D).

Over 400 lines: DeepGEMM's selection is one chain of heuristics (block sizes, then multicast, then pipeline
stages, each reading the last), modelled in the order the library runs it and compared call by call with it
(tests/kernel_model/test_deep_gemm_dispatch.py); split, the chain would be read across files.
"""

from __future__ import annotations

import re
import struct
from functools import lru_cache
from itertools import chain
from typing import Collection, Iterable, NamedTuple

from .arith import cdiv

VERSION = "54e2261"                      # deepseek-ai/DeepGEMM v2.6.1
# DeepGEMM versions whose kernel choice was checked against this model on the GPU, every M of
# every shape (bench/deep_gemm_gpu.py, bench/RESULTS.md part D). The executor warns when the
# installed version is not one of them: its keys may then name other kernels than it compiles.
CHECKED_VERSIONS = ("2.6.1",)
DENSE_KERNEL = "sm90_fp8_gemm_1d2d"
GROUPED_KERNEL = "sm90_m_grouped_fp8_gemm_contiguous_1d2d"

SMEM_CAPACITY = 232448                   # SM90ArchSpec::smem_capacity
MAX_STAGES = 16
BLOCK_K = 128                            # 128 / element size of FP8
BLOCK_NS = tuple(bn for bn in range(16, 193, 16)  # 1D2D: up to 192, and the unroll rule drops 176
                 if bn <= BLOCK_K or bn % (bn - BLOCK_K) == 0 or BLOCK_K % (bn - BLOCK_K) == 0)
CLUSTERS = ((1, 1), (1, 2), (2, 1))      # (cluster_m, cluster_n), in enumeration order
WGMMA_M = 64
AB_BYTES, CD_BYTES, SF_BYTES = 1, 2, 4   # e4m3 A/B, bf16 D, float32 scales
L2_BYTES_PER_CYCLE_CAP = 8e6 / 1.3e3
DISABLED = 2 ** 63 - 1                   # the count of a cluster with at most one wave

_F32 = struct.Struct("f")


def _f32(x: float) -> float:
    """Round to IEEE single precision, as a C++ float."""
    return _F32.unpack(_F32.pack(x))[0]


def _align(a: int, b: int) -> int:
    return cdiv(a, b) * b


class Layout(NamedTuple):
    """What the heuristic picks; with N, K, the group count and the SM count it is the kernel."""
    block_m: int
    block_n: int
    cluster_m: int
    cluster_n: int
    num_stages: int
    num_cycles: int      # the modelled count that won

    @property
    def multicast(self) -> str:
        return _multicast(self.cluster_m, self.cluster_n)


def _multicast(cluster_m: int, cluster_n: int) -> str:
    """'1', '2(a)' (cluster_n 2: A is multicast) or '2(b)' (cluster_m 2): the kernel's
    kNumTMAMulticast and kIsTMAMulticastOnA template arguments."""
    if cluster_m * cluster_n == 1:
        return "1"
    return "2(a)" if cluster_n > 1 else "2(b)"


@lru_cache(maxsize=None)
def num_stages(block_m: int, block_n: int, k: int) -> int:
    """Pipeline stages of the 1D2D kernel: what fits in shared memory, at most 16."""
    smem_cd = _align(block_m * block_n * CD_BYTES, 1024)
    smem_barriers = MAX_STAGES * 8 * 2
    uniform_sfb = 1 if BLOCK_K % block_n == 0 else 2
    smem_extra_sfb = _align(cdiv(k, BLOCK_K) * SF_BYTES * uniform_sfb, 8)
    per_stage = block_m * BLOCK_K * AB_BYTES + block_n * BLOCK_K * AB_BYTES + _align(block_m * SF_BYTES, 128)
    free = SMEM_CAPACITY - (smem_cd + smem_barriers + smem_extra_sfb)
    return min(int(free / per_stage), MAX_STAGES)  # C++ int division truncates


def block_m_candidates(m: int, grouped: bool, mk_alignment: int = 128) -> tuple[int, ...]:
    """In DeepGEMM's order; the grouped GEMM's block_m is the contiguous-layout alignment."""
    if grouped:
        return (mk_alignment,)
    return (64, 128) + ((16,) if m <= 16 else ()) + ((32,) if m <= 32 else ()) + (256,)


class _Candidate(NamedTuple):
    order: int           # position in DeepGEMM's enumeration: the first of equal counts wins
    block_m: int
    block_n: int
    cluster_m: int
    cluster_n: int
    stages: int
    n_blocks: int        # ceil(N / block_n)
    l1_bytes: int        # per block: A/B loads, tensor-core reads, D
    l2_bytes: int        # per block: A/B loads shared by the cluster, D
    rate: float          # cycles per row of M, a lower bound used for pruning
    clustered: bool


class _Space(NamedTuple):
    """The layouts the heuristic weighs for one (block_m set, N, K, SM count)."""
    candidates: tuple    # in DeepGEMM's enumeration order
    by_rate: tuple       # the same, cheapest per row first
    num_sms: int
    l1_bw: int           # bytes per cycle
    l2_bw: int
    dense: bool          # block_m 16 and 32 are weighed for small M only


@lru_cache(maxsize=None)
def _space(dense: bool, n: int, k: int, num_sms: int, mk_alignment: int = 128) -> _Space:
    """Every layout either GEMM may weigh; _select_each drops block_m 16 and 32 where M is too large."""
    block_ms = block_m_candidates(1, not dense, mk_alignment)
    l1_bw, l2_bw = 128 * num_sms, int(min(64.0 * num_sms, L2_BYTES_PER_CYCLE_CAP))
    out = []
    for cluster_m, cluster_n in CLUSTERS:
        if num_sms % (cluster_m * cluster_n):
            continue
        for block_m in block_ms:
            for block_n in BLOCK_NS:
                if block_m > 128 and block_n > 128:
                    continue
                # The A and B swizzles (block_k * 1 byte = 128) always pass the >= 64 rule.
                stages = num_stages(block_m, block_n, k)
                if stages < 3 or (block_m * block_n < 128 * 192 and stages < 4):
                    continue
                d = block_m * block_n * CD_BYTES  # written once: no accumulation
                l1 = k * (block_m + block_n) * AB_BYTES + k * (max(WGMMA_M, block_m) + block_n) * AB_BYTES + d + d
                l2 = k * (block_m // cluster_n + block_n // cluster_m) * AB_BYTES + d
                n_blocks = cdiv(n, block_n)
                rate = max(l1 / l1_bw, l2 / l2_bw) * n_blocks / block_m
                out.append(_Candidate(len(out), block_m, block_n, cluster_m, cluster_n, stages,
                                      n_blocks, l1, l2, rate, cluster_m * cluster_n > 1))
    # Every M needs a layout: block_m 16 and 32 serve small M only, clustered ones more than one
    # wave only. Past the K where shared memory holds none of the rest, DeepGEMM has no kernel.
    if not any(c.block_m >= 64 and not c.clustered for c in out):
        raise ValueError(f"DeepGEMM has no SM90 layout for n={n} k={k}")
    by_rate = tuple(sorted(out, key=lambda c: (c.rate, c.order)))
    return _Space(tuple(out), by_rate, num_sms, l1_bw, l2_bw, dense)


def _cycles(space: _Space, c: _Candidate, m: int) -> int:
    """SM90ArchSpec::get_layout_info's num_cycles for M rows, its float32 steps included."""
    num_sms = space.num_sms
    num_blocks = cdiv(m, c.block_m) * c.n_blocks
    num_waves = cdiv(num_blocks, num_sms)
    if c.clustered and num_waves <= 1:
        return DISABLED
    cycles = max(c.l1_bytes * num_blocks // space.l1_bw, c.l2_bytes * num_blocks // space.l2_bw)
    efficiency = _f32(num_blocks / (num_waves * num_sms))
    return int(_f32(_f32(cycles) / efficiency))


def _select_each(space: _Space, ms: Iterable[int], hint: _Candidate | None = None) -> list[_Candidate]:
    """get_best_config for each M of `ms`, in one loop: a plan asks for hundreds of classes per shape.

    Exact, and pruned for speed. With E the count in double precision (floors included), the
    float32 steps put the true count in E * (1 +- 4e-7) - [0, 1). A count is at least
    rate * M - num_sms (every block costs its bytes; rounding up to whole waves costs less
    than num_sms), so candidates are visited cheapest rate first until that lower bound
    passes the smallest E seen so far (seeded with the hint, then with the previous M's
    winner: neighbouring classes mostly share one); among the survivors, those within the
    float32 margin of the smallest E are counted exactly, in enumeration order.
    """
    sms, l1_bw, l2_bw, dense, by_rate, candidates = (
        space.num_sms, space.l1_bw, space.l2_bw, space.dense, space.by_rate, space.candidates)
    winners = []
    for m in ms:
        small_m = dense and m <= 32  # the dense GEMM weighs block_m 16 and 32 for M <= 16 and <= 32
        smallest = limit = float("inf")  # limit: the largest rate that can still win
        survivors = []  # (estimate, order)
        seen = -1 if hint is None else hint.order  # the hint comes first, then again in rate order
        for order, block_m, _, _, _, _, n_blocks, l1_bytes, l2_bytes, rate, clustered in (
                by_rate if hint is None else chain((hint,), by_rate)):
            if rate > limit:
                break
            if block_m < 64 and (not small_m or m > block_m) or order == seen and survivors:
                continue
            num_blocks = cdiv(m, block_m) * n_blocks
            num_waves = cdiv(num_blocks, sms)
            if clustered and num_waves <= 1:
                continue
            l1, l2 = l1_bytes * num_blocks // l1_bw, l2_bytes * num_blocks // l2_bw
            estimate = (l1 if l1 > l2 else l2) * num_waves * sms / num_blocks
            survivors.append((estimate, order))
            if estimate < smallest:
                smallest = estimate
                limit = ((estimate * (1 + 1e-6) + 2) / (1 - 1e-6) + sms) / m
        if len(survivors) == 1:  # the usual case for large M: the previous winner, unchallenged
            hint = candidates[survivors[0][1]]
        else:
            bound = smallest * (1 + 1e-6) + 2
            shortlist = [candidates[order] for estimate, order in survivors if estimate <= bound]
            hint = shortlist[0] if len(shortlist) == 1 else min(
                shortlist, key=lambda c: (_cycles(space, c, m), c.order))
        winners.append(hint)
    return winners


def _check(m: int, n: int, k: int, num_sms: int) -> None:
    if m < 1 or n < 1 or k < 1:
        raise ValueError(f"DeepGEMM shapes must be positive, got m={m} n={n} k={k}")
    if num_sms < 2 or num_sms % 2:
        raise ValueError(f"DeepGEMM needs an even SM count (GemmDesc::check_validity), got {num_sms}")


class _Model:
    """The layouts of one GEMM (dense, or grouped with an alignment) for one N, K and SM count.

    M enters the heuristic only through ceil(M / block_m) and the extra block_m candidates for
    M <= 16 and M <= 32, so M falls into classes of one layout each: ceil(M / 16) up to 32 and
    2 + ceil(M / 64) above for the dense GEMM, ceil(M_sum / alignment) for the grouped one.
    """

    def __init__(self, grouped: bool, n: int, k: int, num_sms: int, mk_alignment: int):
        self.grouped, self.n, self.k, self.num_sms, self.mk_alignment = grouped, n, k, num_sms, mk_alignment
        self._winners: dict[int, _Candidate] = {}

    def m_class(self, m: int) -> int:
        if self.grouped:
            return cdiv(m, self.mk_alignment)
        return cdiv(m, 16) if m <= 32 else 2 + cdiv(m, 64)

    def largest_m(self, m_class: int) -> int:
        if self.grouped:
            return m_class * self.mk_alignment
        return 16 * m_class if m_class <= 2 else 64 * (m_class - 2)

    @property
    def space(self) -> _Space:
        return _space(not self.grouped, self.n, self.k, self.num_sms, self.mk_alignment)

    def winner(self, m_class: int) -> _Candidate:
        return self.winners((m_class,))[0]

    def winners(self, m_classes: Collection[int]) -> list[_Candidate]:
        """The winner of each class; the ones not yet known are computed in one _select_each pass."""
        known = self._winners
        missing = [c for c in m_classes if c not in known]
        if missing:
            # The previous class's winner gives a good first bound; the result does not depend on it.
            found = _select_each(self.space, [self.largest_m(c) for c in missing], known.get(missing[0] - 1))
            known.update(zip(missing, found))
        return [known[c] for c in m_classes]

    def layout(self, m_class: int) -> Layout:
        c, m = self.winner(m_class), self.largest_m(m_class)
        return Layout(c.block_m, c.block_n, c.cluster_m, c.cluster_n, c.stages, _cycles(self.space, c, m))

    def first_m_by_class(self, ms: Iterable[int]) -> dict[int, int]:
        """class -> the first M of `ms` in it, classes in order of that M."""
        if isinstance(ms, range) and ms.step == 1 and not self.grouped:
            return self._first_m_by_class_in_range(ms)
        ms = list(ms)
        if self.grouped:
            a = self.mk_alignment
            classes = [cdiv(m, a) for m in ms]
        else:
            classes = [(m + 15) >> 4 if m <= 32 else 2 + ((m + 63) >> 6) for m in ms]
        first = dict(zip(reversed(classes), reversed(ms)))  # earlier M-values overwrite later ones
        return {c: first[c] for c in dict.fromkeys(classes)}

    def _first_m_by_class_in_range(self, ms: range) -> dict[int, int]:
        out: dict[int, int] = {}
        for m in range(ms.start, min(ms.stop, 33)):
            out.setdefault(self.m_class(m), m)
        lo = max(ms.start, 33)
        if lo < ms.stop:
            for m_class in range(self.m_class(lo), self.m_class(ms.stop - 1) + 1):
                out[m_class] = max(lo, self.largest_m(m_class - 1) + 1)
        return out


@lru_cache(maxsize=None)
def _model(grouped: bool, n: int, k: int, num_sms: int, mk_alignment: int = 128) -> _Model:
    _check(1, n, k, num_sms)
    if grouped and (mk_alignment < 16 or mk_alignment % 16):
        raise ValueError(f"the contiguous-layout alignment must be a positive multiple of 16, got {mk_alignment}")
    return _Model(grouped, n, k, num_sms, mk_alignment)


def max_k(n: int, num_sms: int, grouped: bool = False, mk_alignment: int = 128) -> int:
    """The largest K the SM90 kernels take for this N: past it no layout's pipeline fits in shared
    memory (the K-long scale factors of B grow with K) and the library refuses the shape, as
    the model does ("no SM90 layout"). Fewer stages never fit a longer K, so a bisection finds it."""
    lo, hi = 0, 1 << 40  # the engine schema's largest K
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            _space(not grouped, n, mid, num_sms, mk_alignment)
            lo = mid
        except ValueError:
            hi = mid - 1
    return lo


def dense_layout(m: int, n: int, k: int, num_sms: int) -> Layout:
    """The layout ``fp8_gemm_nt`` picks for an [m, k] x [n, k] GEMM on SM90."""
    _check(m, n, k, num_sms)
    model = _model(False, n, k, num_sms)
    return model.layout(model.m_class(m))


def grouped_contiguous_layout(m_sum: int, n: int, k: int, num_sms: int, mk_alignment: int = 128) -> Layout:
    """The layout ``m_grouped_fp8_gemm_nt_contiguous`` picks for M_sum rows (any group count)."""
    _check(m_sum, n, k, num_sms)
    model = _model(True, n, k, num_sms, mk_alignment)
    return model.layout(model.m_class(m_sum))


def _compiled(m: int, n: int, k: int, compiled_dims: str) -> str:
    return "".join(f"{name}={value}," for name, value in (("m", m), ("n", n), ("k", k)) if name in compiled_dims)


def _key(kernel: str, dims: str, c: _Candidate, num_sms: int) -> str:
    return (f"{kernel}:{dims}block_m={c.block_m},block_n={c.block_n},block_k={BLOCK_K},"
            f"stages={c.stages},multicast={_multicast(c.cluster_m, c.cluster_n)},sms={num_sms}")


def _keys(model: _Model, ms: Iterable[int], kernel: str, prefix: str, compiled_dims: str) -> dict[str, int]:
    first = model.first_m_by_class(ms)
    if first and min(first) < 1:
        raise ValueError(f"M-values must be positive, got {min(first.values())}")
    if "m" in compiled_dims:  # M compiled in: every M its own kernel
        return {_key(kernel, prefix + _compiled(m, model.n, model.k, compiled_dims),
                     model.winner(model.m_class(m)), model.num_sms): m for m in dict.fromkeys(ms)}
    dims = prefix + _compiled(0, model.n, model.k, compiled_dims)
    by_winner: dict[_Candidate, int] = {}
    for c, m in zip(model.winners(first), first.values()):
        by_winner.setdefault(c, m)
    return {_key(kernel, dims, c, model.num_sms): m for c, m in by_winner.items()}


def dense_keys(ms: Iterable[int], n: int, k: int, num_sms: int, compiled_dims: str = "nk") -> dict[str, int]:
    """The distinct kernel keys of `ms`: key -> its first M, keys in order of that M.

    A key names the JIT kernel ``fp8_gemm_nt`` compiles, e.g.
    ``sm90_fp8_gemm_1d2d:n=7168,k=2048,block_m=64,block_n=112,block_k=128,stages=9,multicast=1,sms=132``.
    Computed once per class of M; a ``range`` is not even expanded.
    """
    return _keys(_model(False, n, k, num_sms), ms, DENSE_KERNEL, "", compiled_dims)


def grouped_contiguous_keys(m_sums: Iterable[int], n: int, k: int, num_groups: int, num_sms: int,
                            mk_alignment: int = 128, compiled_dims: str = "nk") -> dict[str, int]:
    """The distinct kernel keys of `m_sums`: key -> its first M_sum."""
    if num_groups < 1:
        raise ValueError(f"num_groups must be positive, got {num_groups}")
    model = _model(True, n, k, num_sms, mk_alignment)
    return _keys(model, m_sums, GROUPED_KERNEL, f"groups={num_groups},", compiled_dims)


_IMPL_ARGS = re.compile(r"sm90_fp8_gemm_1d2d_impl<(.*?)>\s*\)", re.S)


def key_from_source(code: str) -> str | None:
    """The key of the kernel a generated ``kernel.cu`` instantiates (None: not a 1D2D GEMM).

    Its template arguments begin, in 2.5, 2.6 and 2.8 alike: major_sfb, M, N, K (0 when not
    compiled in), num_groups, block m/n/k, swizzles a/b/cd, stages, TMA and math threads, the
    multicast and whether it is on A, num_sms, the GEMM type."""
    match = _IMPL_ARGS.search(code)
    if not match:
        return None
    args = [a.strip() for a in match.group(1).split(",")]
    if len(args) < 18:
        return None
    (_, m, n, k, groups, bm, bn, bk, _, _, _, stages, _, _, multicast, on_a, sms, gemm_type) = args[:18]
    name = GROUPED_KERNEL if "MGroupedContiguous" in gemm_type else DENSE_KERNEL
    dims = (f"groups={groups}," if name == GROUPED_KERNEL else "") + "".join(
        f"{d}={v}," for d, v in (("m", m), ("n", n), ("k", k)) if v != "0")
    mc = "1" if multicast == "1" else f"{multicast}({'a' if on_a == 'true' else 'b'})"
    return f"{name}:{dims}block_m={bm},block_n={bn},block_k={bk},stages={stages},multicast={mc},sms={sms}"
