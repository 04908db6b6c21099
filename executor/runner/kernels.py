"""The reference runner's own Triton kernels: inputs, KV cache, attention, sampling.

Each kernel has a torch reference in tests/executor/runner/ and runs under
TRITON_INTERPRET=1 on CPU at small shapes (fp16 there: the interpreter cannot do a
bf16 ``tl.dot``). The GEMMs come from executor.kernels.

Which variant a launch compiles (its constexprs, launch options, and which pointers
are exempt from alignment specialization) is kernel_model.runner_kernels: every
launch below goes through ``_launch`` with the ``Meta`` that module computes, and the
planner enumerates from the engine config every key these launches can reach (the
``runner_kernels`` stage of plans/reference.yaml), so precompile workers build them
before the runner runs. Pointers are fresh or sliced-from-0 tensors (16-byte aligned),
except the V view of the QKV output, and the strides and sizes are fixed by the
engine, so each kernel has one variant per engine except ``prepare_inputs`` (its token
counts are plain ints, as in vLLM's ``_compute_slot_mappings_kernel``: one variant
per pair of int classes) and the prefill attention (two query tiles).
``record_launches`` collects the keys of real launches: tests check each is planned.

Batch rows (``idx_mapping``) index the runner's persistent per-request tables
(block table, penalty counts), as in vLLM's model runner V2.

Importing this module does not import torch (the wrappers take tensors; one imports torch
when called): precompile workers compile these kernels from their plans without it.

Over 400 lines: the runner's Triton kernels, each small, each with its launcher beside it; their tests mirror
this file.
"""

from __future__ import annotations

import contextlib
import inspect

from executor.kernels._triton import LazyKernel, tl
from executor.kernels.configs import cdiv
from executor.kernels.jit import stand_in
from kernel_model import runner_kernels as dispatch

PAD_SLOT = dispatch.PAD_SLOT


def _runner_kernel(fn) -> LazyKernel:
    """The kernel, checked against its one declaration (kernel_model.runner_kernels.KERNELS:
    the planner computes its keys from it) and exempt from alignment specialization where
    that declaration says so."""
    spec = dispatch.KERNELS[fn.__name__]
    check_signature(fn, spec)
    no_align = spec.no_align
    return LazyKernel(fn, do_not_specialize_on_alignment=list(no_align)) if no_align else LazyKernel(fn)


def check_signature(fn, spec: dispatch.Kernel) -> None:
    """Refuse a kernel definition whose parameters differ from its declaration: names and
    order, and exactly the declared constexprs annotated ``tl.constexpr``."""
    params = inspect.signature(fn).parameters
    constexprs = [name for name, p in params.items() if "constexpr" in str(p.annotation)]
    if list(params) != spec.parameter_names() or constexprs != list(spec.constexprs):
        raise TypeError(f"{fn.__name__}{tuple(params)} does not match its declaration in "
                        f"kernel_model.runner_kernels {tuple(spec.parameter_names())} "
                        f"(constexprs {spec.constexprs})")


# --- inputs: positions, slot mapping, sequence lengths -----------------------------------------

def _prepare_inputs_kernel(
    idx_mapping, query_start_loc, num_computed, block_table, positions, slot_mapping, seq_lens,
    num_tokens, num_tokens_padded, stride_bt,
    PAGE: tl.constexpr, BLOCK: tl.constexpr,
):
    req = tl.program_id(0)
    if req == tl.num_programs(0) - 1:
        # The last program pads [num_tokens, num_tokens_padded): no KV write, position 0.
        for start in range(num_tokens, num_tokens_padded, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < num_tokens_padded
            tl.store(slot_mapping + offs, tl.full((BLOCK,), -1, tl.int64), mask=mask)
            tl.store(positions + offs, tl.zeros((BLOCK,), tl.int64), mask=mask)
        return
    q_start = tl.load(query_start_loc + req)
    q_end = tl.load(query_start_loc + req + 1)
    computed = tl.load(num_computed + req)
    row = tl.load(idx_mapping + req).to(tl.int64)
    tl.store(seq_lens + req, computed + q_end - q_start)
    for start in range(q_start, q_end, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < q_end
        pos = computed + offs - q_start
        block = tl.load(block_table + row * stride_bt + pos // PAGE, mask=mask, other=0).to(tl.int64)
        tl.store(positions + offs, pos.to(tl.int64), mask=mask)
        tl.store(slot_mapping + offs, block * PAGE + pos % PAGE, mask=mask)


PREPARE_INPUTS = _runner_kernel(_prepare_inputs_kernel)


def prepare_inputs(idx_mapping, query_start_loc, num_computed, block_table, positions, slot_mapping,
                   seq_lens, num_tokens: int, num_tokens_padded: int, page: int) -> None:
    """positions, slot_mapping (int64, [:num_tokens_padded]) and seq_lens (int32, [:num_reqs]).

    Request r's tokens are query_start_loc[r]:query_start_loc[r+1], at positions
    num_computed[r] onwards; row idx_mapping[r] of block_table holds its block ids.
    """
    num_reqs = idx_mapping.shape[0]
    _launch(PREPARE_INPUTS, (num_reqs + 1,),
            (idx_mapping, query_start_loc, num_computed, block_table, positions, slot_mapping, seq_lens,
             num_tokens, num_tokens_padded, block_table.stride(0)), dispatch.prepare_inputs_meta(page))


# --- KV cache write ----------------------------------------------------------------------------

def _write_kv_kernel(
    K, V, KCache, VCache, slot_mapping, stride_kt, stride_vt,
    ROW: tl.constexpr, BLOCK: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_mapping + token)
    if slot < 0:
        return
    offs = tl.arange(0, BLOCK)
    mask = offs < ROW
    k = tl.load(K + token.to(tl.int64) * stride_kt + offs, mask=mask)
    v = tl.load(V + token.to(tl.int64) * stride_vt + offs, mask=mask)
    tl.store(KCache + slot * ROW + offs, k, mask=mask)
    tl.store(VCache + slot * ROW + offs, v, mask=mask)


WRITE_KV = _runner_kernel(_write_kv_kernel)


def write_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    """k, v (T, KVH, D), rows may be strided; caches (num_blocks, page, KVH, D); slot -1 skips."""
    T, kvh, d = k.shape
    if T == 0:
        return
    _launch(WRITE_KV, (T,), (k, v, k_cache, v_cache, slot_mapping, k.stride(0), v.stride(0)),
            dispatch.write_kv_meta(kvh, d))


# --- attention over the paged cache ------------------------------------------------------------

def _paged_prefill_attention_kernel(
    Q, KCache, VCache, O, query_start_loc, seq_lens, idx_mapping, block_table,
    sm_scale, stride_qt, stride_qh, stride_ot, stride_oh, stride_bt,
    HEAD_SIZE: tl.constexpr, BLOCK_D: tl.constexpr, QUERIES_PER_KV: tl.constexpr, KV_ROW: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Varlen causal attention of each request's new tokens over its whole context,
    # read through the block table (the new tokens' K/V are already in the cache).
    tile = tl.program_id(0)
    head = tl.program_id(1)
    req = tl.program_id(2)
    q_start = tl.load(query_start_loc + req)
    q_len = tl.load(query_start_loc + req + 1) - q_start
    if tile * BLOCK_M >= q_len:
        return
    seq_len = tl.load(seq_lens + req)
    context = seq_len - q_len
    row = tl.load(idx_mapping + req).to(tl.int64)
    kv_head = head // QUERIES_PER_KV

    offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_SIZE
    q_mask = (offs_m < q_len)[:, None] & d_mask[None, :]
    q_rows = (q_start + offs_m).to(tl.int64)
    q = tl.load(Q + q_rows[:, None] * stride_qt + head * stride_qh + offs_d[None, :], mask=q_mask, other=0.0)

    m_i = tl.full((BLOCK_M,), -1.0e30, dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    hi = tl.minimum(seq_len, context + (tile + 1) * BLOCK_M)
    for start in range(0, hi, BLOCK_N):
        cols = start + offs_n
        col_ok = cols < hi
        block = tl.load(block_table + row * stride_bt + cols // PAGE, mask=col_ok, other=0).to(tl.int64)
        slots = block * PAGE + cols % PAGE
        kv_off = slots[:, None] * KV_ROW + kv_head * HEAD_SIZE + offs_d[None, :]
        kv_mask = col_ok[:, None] & d_mask[None, :]
        k = tl.load(KCache + kv_off, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * (sm_scale * 1.4426950408889634)  # log2 domain
        allowed = col_ok[None, :] & (cols[None, :] <= context + offs_m[:, None])
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(VCache + kv_off, mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    acc = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    o_ptrs = O + q_rows[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=q_mask)


PREFILL_ATTENTION = _runner_kernel(_paged_prefill_attention_kernel)


def prefill_attention(q, k_cache, v_cache, out, query_start_loc, seq_lens, idx_mapping, block_table,
                      max_query_len: int, scale: float) -> None:
    """out[t] = causal attention of query t over its request's cached context and new tokens."""
    T, H, D = q.shape
    kvh = k_cache.shape[2]
    num_reqs = seq_lens.shape[0]
    if T == 0 or num_reqs == 0:
        return
    meta = dispatch.prefill_attention_meta(H, kvh, D, k_cache.shape[1], max_query_len)
    grid = (cdiv(max_query_len, meta.constexprs["BLOCK_M"]), H, num_reqs)
    _launch(PREFILL_ATTENTION, grid,
            (q, k_cache, v_cache, out, query_start_loc, seq_lens, idx_mapping, block_table,
             scale, q.stride(0), q.stride(1), out.stride(0), out.stride(1), block_table.stride(0)), meta)


def _paged_decode_attention_kernel(
    Q, KCache, VCache, O, seq_lens, idx_mapping, block_table,
    sm_scale, stride_qt, stride_qh, stride_ot, stride_oh, stride_bt,
    HEAD_SIZE: tl.constexpr, BLOCK_D: tl.constexpr, QUERIES_PER_KV: tl.constexpr, KV_ROW: tl.constexpr,
    PAGE: tl.constexpr, Q_LEN: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # One program per (request, KV head): its QUERIES_PER_KV heads x Q_LEN query tokens
    # (1 + draft tokens) as the rows of one tile. Padded requests have seq_len 0.
    req = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens + req)
    context = seq_len - Q_LEN
    row = tl.load(idx_mapping + req).to(tl.int64)

    offs_r = tl.arange(0, BLOCK_R)
    r_ok = offs_r < QUERIES_PER_KV * Q_LEN
    q_pos = offs_r // QUERIES_PER_KV
    head = kv_head * QUERIES_PER_KV + offs_r % QUERIES_PER_KV
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_SIZE
    q_rows = (req * Q_LEN + q_pos).to(tl.int64)
    q_mask = r_ok[:, None] & d_mask[None, :]
    q = tl.load(Q + q_rows[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
                mask=q_mask, other=0.0)

    m_i = tl.full((BLOCK_R,), -1.0e30, dtype=tl.float32)
    l_i = tl.zeros((BLOCK_R,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_R, BLOCK_D), dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        cols = start + offs_n
        col_ok = cols < seq_len
        block = tl.load(block_table + row * stride_bt + cols // PAGE, mask=col_ok, other=0).to(tl.int64)
        slots = block * PAGE + cols % PAGE
        kv_off = slots[:, None] * KV_ROW + kv_head * HEAD_SIZE + offs_d[None, :]
        kv_mask = col_ok[:, None] & d_mask[None, :]
        k = tl.load(KCache + kv_off, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * (sm_scale * 1.4426950408889634)
        allowed = col_ok[None, :] & (cols[None, :] <= context + q_pos[:, None])
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(VCache + kv_off, mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    acc = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    o_ptrs = O + q_rows[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=q_mask)


DECODE_ATTENTION = _runner_kernel(_paged_decode_attention_kernel)


def decode_attention(q, k_cache, v_cache, out, seq_lens, idx_mapping, block_table, q_len: int,
                     scale: float) -> None:
    """Uniform decode: request r owns query rows r*q_len .. r*q_len + q_len - 1."""
    T, H, D = q.shape
    kvh = k_cache.shape[2]
    num_reqs = seq_lens.shape[0]
    if num_reqs == 0:
        return
    _launch(DECODE_ATTENTION, (num_reqs, kvh),
            (q, k_cache, v_cache, out, seq_lens, idx_mapping, block_table,
             scale, q.stride(0), q.stride(1), out.stride(0), out.stride(1), block_table.stride(0)),
            dispatch.decode_attention_meta(H, kvh, D, k_cache.shape[1], q_len))


# --- sampling ------------------------------------------------------------------------------------

def _apply_bitmask_kernel(logits, bitmask, bitmask_row, vocab_size, stride_l, stride_b,
                          BLOCK: tl.constexpr):
    row = tl.program_id(0)
    src = tl.load(bitmask_row + row)
    if src < 0:
        return
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_vocab = offs < vocab_size
    words = tl.load(bitmask + src.to(tl.int64) * stride_b + offs // 32, mask=in_vocab, other=-1)
    allowed = ((words >> (offs % 32)) & 1) != 0
    tl.store(logits + row.to(tl.int64) * stride_l + offs, float("-inf"), mask=in_vocab & ~allowed)


APPLY_BITMASK = _runner_kernel(_apply_bitmask_kernel)


def apply_bitmask(logits, bitmask, bitmask_row) -> None:
    """Structured output: logits[r, v] = -inf where bit v of bitmask[bitmask_row[r]] is 0 (row -1: none)."""
    R, V = logits.shape
    if R == 0:
        return
    meta = dispatch.vocab_meta(V)
    _launch(APPLY_BITMASK, (R, cdiv(V, meta.constexprs["BLOCK"])),
            (logits, bitmask, bitmask_row, V, logits.stride(0), bitmask.stride(0)), meta)


def _penalties_kernel(logits, slot, temperature, repetition, frequency, presence, output_counts, prompt_mask,
                      vocab_size, stride_l, stride_c, stride_p, BLOCK: tl.constexpr):
    # vLLM's order: repetition penalty over prompt and output tokens, frequency and
    # presence over output tokens, then temperature (greedy rows, temperature 0, keep theirs).
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_vocab = offs < vocab_size
    s = tl.load(slot + row).to(tl.int64)
    rep = tl.load(repetition + row)
    freq = tl.load(frequency + row)
    pres = tl.load(presence + row)
    temp = tl.load(temperature + row)
    ptr = logits + row.to(tl.int64) * stride_l + offs
    x = tl.load(ptr, mask=in_vocab, other=0.0)
    counts = tl.load(output_counts + s * stride_c + offs, mask=in_vocab, other=0)
    in_prompt = tl.load(prompt_mask + s * stride_p + offs, mask=in_vocab, other=0) != 0
    seen = (counts > 0) | in_prompt
    x = tl.where(seen, tl.where(x > 0, x / rep, x * rep), x)
    x = x - freq * counts.to(tl.float32) - pres * (counts > 0).to(tl.float32)
    x = x / tl.where(temp > 0, temp, 1.0)
    tl.store(ptr, x, mask=in_vocab)


PENALTIES = _runner_kernel(_penalties_kernel)


def apply_penalties_and_temperature(logits, slot, temperature, repetition, frequency, presence,
                                    output_counts, prompt_mask) -> None:
    R, V = logits.shape
    if R == 0:
        return
    meta = dispatch.vocab_meta(V)
    _launch(PENALTIES, (R, cdiv(V, meta.constexprs["BLOCK"])),
            (logits, slot, temperature, repetition, frequency, presence, output_counts, prompt_mask,
             V, logits.stride(0), output_counts.stride(0), prompt_mask.stride(0)), meta)


def _gumbel_sample_kernel(logits, temperature, seeds, excluded, out, vocab_size, stride_l,
                          BLOCK: tl.constexpr):
    # argmax(logits + Gumbel noise) samples softmax(logits) (logits are already divided by
    # the temperature); temperature 0 rows take the plain argmax. `excluded` (-1: none)
    # removes one token: the rejection sampler's recovered token avoids the draft.
    row = tl.program_id(0)
    temp = tl.load(temperature + row)
    seed = tl.load(seeds + row)
    skip = tl.load(excluded + row)
    base = logits + row.to(tl.int64) * stride_l
    best_val = tl.full((BLOCK,), float("-inf"), tl.float32)
    best_idx = tl.zeros((BLOCK,), tl.int32)
    for start in range(0, vocab_size, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ok = (offs < vocab_size) & (offs != skip)
        x = tl.load(base + offs, mask=ok, other=float("-inf"))
        if temp > 0:
            u = tl.rand(seed, offs)
            x = x - tl.log(-tl.log(tl.maximum(u, 1.0e-20)))
        better = x > best_val
        best_idx = tl.where(better, offs, best_idx)
        best_val = tl.where(better, x, best_val)
    top = tl.max(best_val, 0)
    token = tl.min(tl.where(best_val == top, best_idx, vocab_size), 0)
    tl.store(out + row, token)


GUMBEL_SAMPLE = _runner_kernel(_gumbel_sample_kernel)


def gumbel_sample(logits, temperature, seeds, excluded, out) -> None:
    """out[r] ~ softmax(logits[r]) (argmax where temperature[r] == 0), never excluded[r]."""
    R, V = logits.shape
    if R == 0:
        return
    _launch(GUMBEL_SAMPLE, (R,), (logits, temperature, seeds, excluded, out, V, logits.stride(0)),
            dispatch.vocab_meta(V))


def _rejection_sample_kernel(draft_tokens, accept_probs, uniforms, sampled, cu_rows, out, num_out, stride_o,
                             MAX_OUT: tl.constexpr, BLOCK: tl.constexpr):
    # Request r has rows cu_rows[r] .. cu_rows[r+1]-1: one per draft token, then the bonus
    # row. Draft j is accepted with probability accept_probs = min(1, p/q) (q is one-hot for
    # an n-gram draft, so it is p(draft)); the first rejected draft is replaced by the
    # row's recovered token (sampled without the draft); if none is rejected, the bonus
    # token follows.
    req = tl.program_id(0)
    start = tl.load(cu_rows + req)
    n = tl.load(cu_rows + req + 1) - start - 1
    offs = tl.arange(0, BLOCK)
    is_draft = offs < n
    d = tl.load(draft_tokens + start + offs, mask=is_draft, other=-1)
    p = tl.load(accept_probs + start + offs, mask=is_draft, other=0.0)
    u = tl.load(uniforms + start + offs, mask=is_draft, other=1.0)
    first = tl.min(tl.where(is_draft & (u >= p), offs, n), 0)
    s = tl.load(sampled + start + offs, mask=offs <= n, other=-1)
    token = tl.where(offs < first, d, tl.where(offs == first, s, -1))
    tl.store(out + req.to(tl.int64) * stride_o + offs, token, mask=offs < MAX_OUT)
    tl.store(num_out + req, first + 1)


REJECTION_SAMPLE = _runner_kernel(_rejection_sample_kernel)


def rejection_sample(draft_tokens, accept_probs, uniforms, sampled, cu_rows, max_spec: int):
    """(tokens (num_reqs, max_spec + 1) padded with -1, num_tokens (num_reqs,)) per request."""
    import torch  # here only: precompile workers import this module without torch

    num_reqs = cu_rows.shape[0] - 1
    out = torch.full((num_reqs, max_spec + 1), -1, dtype=torch.int32, device=cu_rows.device)
    num_out = torch.zeros(num_reqs, dtype=torch.int32, device=cu_rows.device)
    if num_reqs:
        _launch(REJECTION_SAMPLE, (num_reqs,),
                (draft_tokens, accept_probs, uniforms, sampled, cu_rows, out, num_out, out.stride(0)),
                dispatch.rejection_meta(max_spec))
    return out, num_out


# --- launching, recording, compiling ahead --------------------------------------------------------

_RECORDED: list | None = None  # keys of the launches made under record_launches()


def _launch(kernel: LazyKernel, grid, args: tuple, meta: dispatch.Meta) -> None:
    if _RECORDED is not None:
        _RECORDED.append(dispatch.observed_key(kernel.fn.__name__, args, meta))
    kernel[grid](*args, **meta.constexprs, **meta.options())


@contextlib.contextmanager
def record_launches():
    """Collect the compile key of every runner-kernel launch in the block (tests: each must
    be one that kernel_model.runner_kernels plans)."""
    global _RECORDED
    previous, _RECORDED = _RECORDED, []
    try:
        yield _RECORDED
    finally:
        _RECORDED = previous


def stand_in_args(launch: dispatch.Launch) -> list:
    """The launch's arguments with a stand-in tensor (planned dtype and alignment) per pointer."""
    out = []
    for param, arg in zip(dispatch.KERNELS[launch.kernel].params, launch.args):
        out.append(stand_in.pointer(*dispatch.pointer(arg)) if param.role == "ptr" else arg)
    return out


def compile_launch(launch: dispatch.Launch, load: bool = True) -> None:
    """Compile (or load from Triton's disk cache) the variant of `launch` without running it:
    ``JITFunction.warmup`` on stand-in tensors of the planned dtypes and alignments, then its
    launcher (a C module Triton builds with the host compiler per signature, and caches on
    disk next to the kernels). With `load`, the module and the launcher are also loaded into
    this process, and the variant sits in the kernel's in-process cache: the runner's first
    launch of that key only launches. Without (a precompile worker), only the disk caches
    are filled: no CUDA context, and under ``stand_in.use_offline_driver`` no torch either."""
    kernel = LAUNCHABLE[launch.kernel].get()
    compiled = kernel.warmup(*stand_in_args(launch), grid=(1,), **launch.meta.constexprs, **launch.meta.options())
    if compiled is None or not hasattr(compiled, "_init_handles"):
        return  # the interpreter, or another Triton: the first launch does the rest
    if load:
        compiled._init_handles()
    else:
        stand_in.build_launcher(compiled)


LAUNCHABLE = {k.fn.__name__: k for k in (PREPARE_INPUTS, WRITE_KV, PREFILL_ATTENTION, DECODE_ATTENTION,
                                          APPLY_BITMASK, PENALTIES, GUMBEL_SAMPLE, REJECTION_SAMPLE)}

KERNEL_FAMILIES = {
    **{name: k.family for name, k in dispatch.KERNELS.items()},
    "_prefill_attention_kernel": "attention",  # executor.kernels' context_attention_fwd
    "_fp8_gemm_kernel": "gemm",
    "_grouped_fp8_gemm_kernel": "gemm",
}
