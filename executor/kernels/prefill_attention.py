"""Varlen causal prefill attention (the role of vLLM's ``context_attention_fwd``).

q (T, H, D), k/v (T, KVH, D) bf16/fp16 hold B packed sequences: sequence b is rows
``b_start_loc[b] : b_start_loc[b] + b_seq_len[b]`` (int32). GQA: H % KVH == 0, query
head h reads kv head h // (H // KVH). Query i of a sequence sees key j when every
enabled bound holds: causal ``j <= i``; left window ``i - sliding_window_q <= j``;
right window ``j <= i + sliding_window_k`` (-1 or None: unbounded, so
(sliding_window_q, sliding_window_k) is FlashAttention's (left, right) window).
Scores are ``s = softmax_scale * q.k``, then ``softcap * tanh(s / softcap)`` when
softcap > 0. Any head size works: D is padded to the next power of two with masks
(80 -> 128, 96 -> 128, 192 -> 256, 576 -> 1024).

Grid: (cdiv(max_input_len, BLOCK_M), H, B); programs past their sequence's end exit.

Specialization (Triton v3.6.0 rules: python/src/specialize.cc `native_specialize_impl`,
python/triton/runtime/jit.py `create_function_from_signature`):

=====================  ===========================  ===========================================
argument               how Triton treats it          varies with
=====================  ===========================  ===========================================
q, k, v, o             dtype + 16-byte alignment     model dtype; slicing (see below)
b_start_loc, b_seq_len int32 pointers; alignment     never (``do_not_specialize_on_alignment``:
                       not specialized               only scalar loads read them)
sm_scale, softcap      fp32, never specialized       -
window_left/right      ``do_not_specialize``: i32    -  (on/off is the constexpr below)
8 strides (t, h)       ==1 / %16 / other             model shape only (H*D, D, KVH*D, ...)
HEAD_SIZE, BLOCK_D,    constexpr                     model shape (head size, H // KVH)
QUERIES_PER_KV
IS_CAUSAL, USE_WINDOW_ constexpr                     layer (causal, window on/off, softcap on/off)
LEFT/RIGHT, USE_SOFTCAP
BLOCK_M, BLOCK_N,      constexpr / launch options    head size only (``attention_launch_params``)
num_warps, num_stages
=====================  ===========================  ===========================================

``attention_launch_params`` is in kernel_model.triton_kernels, whose attention key uses it too.

No argument depends on the number of tokens, the number of sequences or
max_input_len: they only size the grid, which is not part of the compile key. So
per layer configuration there is exactly one compiled variant for every token
count (``specialization_classes`` returns one class), as long as q/k/v/o keep
16-byte-aligned data pointers (a q/k/v slice of a packed qkv buffer stays aligned
when H*D and KVH*D are multiples of 8 elements) and the last dim is contiguous.
tests/executor/test_kernels_compile.py checks these keys with Triton's own binder
(and compiles every head size for sm_90) on a machine without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel_model import triton_kernels as dispatch

from .jit import prefill_attention as jit  # the @triton.jit kernel and its launch (no torch)


def _check_attention_args(q, k, v, o, b_start_loc, b_seq_len):
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3 or o.dim() != 3:
        raise ValueError("context_attention_fwd: q, o must be (T, H, D) and k, v (T, KVH, D)")
    T, H, D = q.shape
    if k.shape != v.shape or k.shape[0] != T or k.shape[2] != D or tuple(o.shape) != (T, H, D):
        raise ValueError(f"context_attention_fwd: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}, o {tuple(o.shape)} do not match")
    if H % k.shape[1]:
        raise ValueError(f"context_attention_fwd: num_heads={H} is not a multiple of num_kv_heads={k.shape[1]}")
    if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"context_attention_fwd: q/k/v must share dtype bf16 or fp16, got "
                         f"{q.dtype}, {k.dtype}, {v.dtype}")
    if any(t.stride(-1) != 1 for t in (q, k, v, o)):
        raise ValueError("context_attention_fwd: the head dim of q, k, v, o must be contiguous")
    for name, t in (("b_start_loc", b_start_loc), ("b_seq_len", b_seq_len)):
        if t.dtype != torch.int32 or t.dim() != 1:
            raise ValueError(f"context_attention_fwd: {name} must be a 1-D int32 tensor, "
                             f"got {t.dtype} {tuple(t.shape)}")
    if b_start_loc.shape != b_seq_len.shape:
        raise ValueError("context_attention_fwd: b_start_loc and b_seq_len must have the same length")


def context_attention_fwd(q, k, v, o, b_start_loc, b_seq_len, max_input_len, is_causal=True,
                          softmax_scale=None, softcap=0.0, sliding_window_q=-1, sliding_window_k=-1,
                          config=None):
    """Write attention of the packed sequences into o; ``config`` overrides
    ``attention_launch_params(D)`` (kernel_model.triton_kernels)."""
    _check_attention_args(q, k, v, o, b_start_loc, b_seq_len)
    if q.shape[0] > 0 and b_seq_len.shape[0] > 0 and max_input_len > 0:
        _launch(q, k, v, o, b_start_loc, b_seq_len, max_input_len, is_causal, softmax_scale, softcap,
                sliding_window_q, sliding_window_k, config)
    return o


_launch = jit.launch


# --- specialization facts for the planner -------------------------------------------------------

def specialization_key(num_tokens: int, num_heads: int, num_kv_heads: int, head_size: int,
                       dtype: str = "bfloat16", is_causal: bool = True, sliding_window=(-1, -1),
                       softcap: float = 0.0) -> str:
    """The compiled variant a call uses (contiguous q/k/v/o). ``num_tokens`` is not in it."""
    return dispatch.attention_key(num_tokens, num_heads, num_kv_heads, head_size, dtype, is_causal,
                                  sliding_window, softcap)


def specialization_classes(token_counts, num_heads: int, num_kv_heads: int, head_size: int,
                           **layer) -> dict[str, list[int]]:
    """Group token counts by compiled variant: always a single group, since no kernel
    argument depends on the token count (one warmup call covers them all)."""
    classes: dict[tuple, list[int]] = {}
    for n in sorted(set(token_counts)):
        key = specialization_key(n, num_heads, num_kv_heads, head_size, **layer)
        classes.setdefault(key, []).append(n)
    return classes


# --- warmup helpers --------------------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionInputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor

    def tokens(self, n: int) -> "AttentionInputs":
        return AttentionInputs(self.q[:n], self.k[:n], self.v[:n], self.o[:n])


def alloc_attention_inputs(num_tokens: int, num_heads: int, num_kv_heads: int, head_size: int,
                           dtype=torch.bfloat16, device="cuda", random: bool = False, seed: int = 0):
    if not random:
        q = torch.zeros(num_tokens, num_heads, head_size, dtype=dtype, device=device)
        k = torch.zeros(num_tokens, num_kv_heads, head_size, dtype=dtype, device=device)
        v = torch.zeros_like(k)
    else:
        gen = torch.Generator(device=device).manual_seed(seed)
        q, k, v = (torch.randn(num_tokens, h, head_size, generator=gen, device=device).to(dtype)
                   for h in (num_heads, num_kv_heads, num_kv_heads))
    return AttentionInputs(q, k, v, torch.empty_like(q))


def seq_layout(seq_lens, device="cuda") -> tuple[torch.Tensor, torch.Tensor, int]:
    """(b_start_loc, b_seq_len, max_input_len) for sequences packed back to back."""
    starts = [0]
    for n in seq_lens[:-1]:
        starts.append(starts[-1] + n)
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.int32, device=device)  # noqa: E731
    return as_tensor(starts), as_tensor(list(seq_lens)), max(seq_lens, default=0)


def warmup(num_tokens: int, num_heads: int, num_kv_heads: int, head_size: int, dtype=torch.bfloat16,
           device="cuda", inputs: AttentionInputs | None = None, seq_lens=None, is_causal=True,
           softmax_scale=None, softcap=0.0, sliding_window=(-1, -1)):
    """Compile and load the layer's variant: one launch over ``seq_lens`` (default: one
    sequence of num_tokens) on scratch tensors, as vLLM's warmup does with zero tensors."""
    inputs = (inputs or alloc_attention_inputs(num_tokens, num_heads, num_kv_heads, head_size,
                                                dtype, device)).tokens(num_tokens)
    b_start_loc, b_seq_len, max_len = seq_layout(list(seq_lens or [num_tokens]), inputs.q.device)
    context_attention_fwd(inputs.q, inputs.k, inputs.v, inputs.o, b_start_loc, b_seq_len, max_len,
                          is_causal=is_causal, softmax_scale=softmax_scale, softcap=softcap,
                          sliding_window_q=sliding_window[0], sliding_window_k=sliding_window[1])
    return inputs.o


def precompile(num_tokens: int, num_heads: int, num_kv_heads: int, head_size: int, dtype=torch.bfloat16,
               device="cuda", inputs: AttentionInputs | None = None, is_causal=True, softmax_scale=None,
               softcap=0.0, sliding_window=(-1, -1), config=None):
    """Compile the layer's variant without launching (see ``fp8_gemm.precompile``)."""
    inputs = (inputs or alloc_attention_inputs(num_tokens, num_heads, num_kv_heads, head_size,
                                                dtype, device)).tokens(num_tokens)
    b_start_loc, b_seq_len, max_len = seq_layout([num_tokens], inputs.q.device)
    return _launch(inputs.q, inputs.k, inputs.v, inputs.o, b_start_loc, b_seq_len, max_len, is_causal,
                   softmax_scale, softcap, sliding_window[0], sliding_window[1], config, compile_only=True)
