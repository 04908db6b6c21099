"""The executor's Triton kernels against their torch references, at small shapes.

Without a GPU they run under the Triton interpreter on CPU (``kernel_device``
fixture). Interpreter limits met in Triton 3.6: fp8 (e4m3) loads and ``tl.dot``
work; bf16 ``tl.dot`` does not (it multiplies the raw uint16 bits,
triton-lang/triton#11584, "not supported yet"), so attention runs in fp16 here
and bf16 attention only on a GPU. Int arguments used as ``range()`` bounds need
the NumPy >= 2.4 fix that ``executor.kernels._triton`` applies (triton#9171).
"""

from __future__ import annotations

import inspect
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from executor.kernels import fp8_gemm as gemm  # noqa: E402
from executor.kernels import grouped_gemm as grouped  # noqa: E402
from executor.kernels import prefill_attention as attn  # noqa: E402
from executor.kernels.configs import CANDIDATE_CONFIGS, make_config  # noqa: E402
from executor.kernels.jit import fp8_gemm as gemm_jit  # noqa: E402
from executor.kernels.jit import grouped_gemm as grouped_jit  # noqa: E402
from executor.kernels.jit import prefill_attention as attn_jit  # noqa: E402
from kernel_model import gemm_tables  # noqa: E402
from kernel_model import triton_kernels as dispatch  # noqa: E402
from kernel_refs import (  # noqa: E402
    contiguous_layout,
    ref_fp8_gemm,
    ref_grouped_fp8_gemm,
    ref_prefill_attention,
)

TOL = 2e-2


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    return ((out - ref).norm() / ref.norm().clamp(min=1e-30)).item()


def poisoned(t: torch.Tensor) -> torch.Tensor:
    return t.fill_(float("nan"))


def assert_written_and_close(out, ref):
    assert not out.isnan().any(), f"{int(out.isnan().sum())} output elements never written"
    assert rel_err(out, ref) < TOL


# --- fp8_gemm --------------------------------------------------------------------------------------

SMALL = make_config(16, 32, 1, 4, 2)
GEMM_CASES = [
    # M, N, K, config (None: default_config by M)
    (1, 200, 256, None),                           # decode row, N not a multiple of the block
    (17, 64, 128, None),                           # M not a multiple of BLOCK_SIZE_M
    (5, 16, 128, None),                            # N smaller than BLOCK_SIZE_N
    (100, 300, 384, make_config(32, 64, 2, 4, 2)), # several row and column tiles, grouped order
    (70, 130, 256, make_config(16, 32, 3, 4, 2, block_k=64)),  # BLOCK_SIZE_K < scale group
    (40, 96, 128, SMALL),
]


@pytest.mark.parametrize("M,N,K,config", GEMM_CASES)
def test_fp8_gemm_matches_reference(kernel_device, seed, M, N, K, config):
    inputs = gemm.alloc_gemm_inputs(M, N, K, kernel_device, random=True, seed=seed)
    out = gemm.fp8_gemm(*inputs.args(), out=poisoned(inputs.out), config=config)
    assert out.dtype == torch.bfloat16 and out.shape == (M, N)
    assert_written_and_close(out, ref_fp8_gemm(*inputs.args()))


def test_fp8_gemm_slices_of_one_max_m_buffer(kernel_device, seed):
    N, K = 96, 256
    full = gemm.alloc_gemm_inputs(48, N, K, kernel_device, random=True, seed=seed)
    for m in (1, 16, 33, 48):
        part = full.rows(m)
        poisoned(part.out)
        config = gemm.warmup(m, N, K, kernel_device, inputs=full)
        assert config == gemm.resolve_config(m, N, K, kernel_device)
        assert_written_and_close(part.out, ref_fp8_gemm(*part.args()))


def test_fp8_gemm_allocates_output_and_handles_m0(kernel_device):
    inputs = gemm.alloc_gemm_inputs(0, 64, 128, kernel_device)
    assert gemm.fp8_gemm(*inputs.args()).shape == (0, 64)


def test_fp8_gemm_rejects_k_not_multiple_of_128(kernel_device):
    a = torch.zeros(4, 200, dtype=torch.float8_e4m3fn)
    b = torch.zeros(64, 200, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="multiple of 128"):
        gemm.fp8_gemm(a, torch.ones(4, 1), b, torch.ones(1, 1))


def test_fp8_gemm_rejects_bad_scale_shape(kernel_device):
    inputs = gemm.alloc_gemm_inputs(4, 64, 256, kernel_device)
    with pytest.raises(ValueError, match="a_scales"):
        gemm.fp8_gemm(inputs.a, inputs.a_scales[:, :1], inputs.b, inputs.b_scales)


# --- grouped_fp8_gemm ------------------------------------------------------------------------------

GROUPED_CASES = [
    # rows per expert, block_m, total rows (None: no trailing padding), N, K, config, pad id inside chunks
    ([5, 0, 40, 16], 16, 112, 200, 256, None, -1),
    ([33, 1, 0, 20], 32, None, 64, 128, make_config(16, 32, 1, 4, 2), -1),  # 2 tiles per chunk
    ([7, 30], 32, 128, 96, 256, make_config(32, 64, 1, 4, 2), "expert"),     # pad rows carry the expert id
]


@pytest.mark.parametrize("rows,block_m,total,N,K,config,pad", GROUPED_CASES)
def test_grouped_fp8_gemm_matches_reference(kernel_device, seed, rows, block_m, total, N, K, config, pad):
    E = len(rows)
    expert_ids, _ = contiguous_layout(rows, block_m, total)
    if pad == "expert":  # every row of a chunk carries the chunk's expert
        expert_ids = expert_ids.view(-1, block_m)[:, :1].expand(-1, block_m).reshape(-1).contiguous()
    inputs = grouped.alloc_grouped_inputs(len(expert_ids), N, K, E, kernel_device, block_m,
                                          random=True, seed=seed)
    expert_ids = expert_ids.to(kernel_device)
    args = (inputs.a, inputs.a_scales, inputs.b, inputs.b_scales, expert_ids)
    out = grouped.grouped_fp8_gemm(*args, block_m=block_m, out=poisoned(inputs.out), config=config)
    ref = ref_grouped_fp8_gemm(*args, block_m=block_m)
    assert_written_and_close(out, ref)
    padding_chunks = expert_ids.view(-1, block_m)[:, 0] < 0
    assert (out.view(-1, block_m, N)[padding_chunks] == 0).all()


def test_grouped_fp8_gemm_warmup_on_slices(kernel_device, seed):
    N, K, E, block_m = 64, 128, 3, 16
    full = grouped.alloc_grouped_inputs(96, N, K, E, kernel_device, block_m, random=True, seed=seed)
    for m in (16, 48, 96):
        part = full.rows(m)
        poisoned(part.out)
        grouped.warmup(m, N, K, E, kernel_device, block_m, inputs=full)
        assert_written_and_close(part.out, ref_grouped_fp8_gemm(*part.args(), block_m=block_m))


def test_grouped_fp8_gemm_rejects_tile_larger_than_chunk(kernel_device):
    inputs = grouped.alloc_grouped_inputs(32, 64, 128, 2, kernel_device, block_m=16)
    with pytest.raises(ValueError, match="must divide block_m"):
        grouped.grouped_fp8_gemm(*inputs.args(), block_m=16, config=make_config(32, 32, 1, 4, 2))


def test_grouped_configs_fit_the_chunk():
    # Whatever config a table holds (here each tuning candidate), the launched BLOCK_SIZE_M
    # must divide the chunk: each program reads one expert id.
    for config in CANDIDATE_CONFIGS:
        for block_m in (16, 32, 64, 128):
            chosen = dispatch.grouped_gemm_config(4096, 4096, 7168, block_m, gemm_tables.Table({1: config}))
            assert block_m % chosen["BLOCK_SIZE_M"] == 0, (config, block_m)
    assert grouped.grouped_config(4096, 4096, 7168, block_m=32)["BLOCK_SIZE_M"] <= 32


# --- prefill attention -----------------------------------------------------------------------------

TINY = dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)
ATTN_CASES = {
    # H, KVH, D, sequence lengths, causal, (left, right) window, softcap, launch params
    "gqa": (4, 2, 64, [1, 37, 100], True, (-1, -1), 0.0, None),
    "mqa-d80-window": (4, 1, 80, [5, 33, 70], True, (16, -1), 0.0, TINY),
    "window-not-block-aligned": (2, 2, 64, [60, 1, 45], True, (7, -1), 0.0, TINY),
    "softcap": (2, 1, 128, [40, 2], True, (-1, -1), 30.0, TINY),
    "noncausal-two-sided-softcap": (2, 2, 96, [50, 9], False, (8, 5), 20.0,
                                    dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1)),
    "noncausal-full": (3, 3, 32, [19, 1, 26], False, (-1, -1), 0.0, TINY),
    "d576-mla-size": (2, 1, 576, [20, 3], True, (-1, -1), 0.0, None),
    "window-zero": (2, 1, 64, [17], True, (0, -1), 0.0, TINY),
}


def run_attention(device, seed, H, KVH, D, lens, causal, window, cap, params, dtype):
    T = sum(lens)
    inputs = attn.alloc_attention_inputs(T, H, KVH, D, dtype, device, random=True, seed=seed)
    b_start_loc, b_seq_len, max_len = attn.seq_layout(lens, device)
    scale = 0.7 / math.sqrt(D)
    attn.context_attention_fwd(inputs.q, inputs.k, inputs.v, poisoned(inputs.o), b_start_loc, b_seq_len,
                               max_len, is_causal=causal, softmax_scale=scale, softcap=cap,
                               sliding_window_q=window[0], sliding_window_k=window[1], config=params)
    ref = ref_prefill_attention(inputs.q, inputs.k, inputs.v, b_start_loc, b_seq_len, causal, scale,
                                cap, window[0], window[1])
    assert inputs.o.dtype == dtype
    assert_written_and_close(inputs.o, ref)


@pytest.mark.parametrize("case", ATTN_CASES.values(), ids=list(ATTN_CASES))
def test_prefill_attention_matches_reference(kernel_device, seed, case):
    run_attention(kernel_device, seed, *case, dtype=torch.float16)


def test_prefill_attention_bf16(kernel_device, seed):
    if kernel_device == "cpu":
        pytest.skip("Triton 3.6 interpreter: bf16 tl.dot multiplies raw bits (triton#11584); GPU only")
    run_attention(kernel_device, seed, *ATTN_CASES["gqa"], dtype=torch.bfloat16)


def test_prefill_attention_warmup_on_token_slices(kernel_device):
    inputs = attn.alloc_attention_inputs(64, 4, 2, 80, torch.float16, kernel_device)
    for n in (1, 16, 64):
        poisoned(inputs.o[:n])
        out = attn.warmup(n, 4, 2, 80, torch.float16, kernel_device, inputs=inputs)
        assert not out.isnan().any()  # zero q/k/v: uniform attention over zero values


def test_prefill_attention_rejects_bad_inputs(kernel_device):
    inputs = attn.alloc_attention_inputs(8, 3, 2, 64, torch.float16, kernel_device)
    b_start_loc, b_seq_len, max_len = attn.seq_layout([8], kernel_device)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        attn.context_attention_fwd(*vars(inputs).values(), b_start_loc, b_seq_len, max_len)
    inputs = attn.alloc_attention_inputs(8, 4, 2, 64, torch.float16, kernel_device)
    with pytest.raises(ValueError, match="int32"):
        attn.context_attention_fwd(*vars(inputs).values(), b_start_loc.long(), b_seq_len, max_len)


# --- specialization facts --------------------------------------------------------------------------

def test_attention_token_count_never_selects_a_variant():
    classes = attn.specialization_classes([1, 2, 15, 16, 17, 100, 8192], 32, 8, 128,
                                          sliding_window=(4096, -1), softcap=50.0)
    assert list(classes.values()) == [[1, 2, 15, 16, 17, 100, 8192]]


def test_gemm_variants_follow_the_config_only():
    table = {1: make_config(16, 64, 1, 4, 3), 64: make_config(64, 128, 8, 4, 3)}
    classes = gemm.specialization_classes([1, 2, 16, 17, 31, 32, 33, 100, 4096], 4096, 7168, table)
    assert list(classes.values()) == [[1, 2, 16, 17, 31, 32], [33, 100, 4096]]


@pytest.mark.parametrize("module", [gemm_jit, grouped_jit, attn_jit])
def test_unspecialized_args_exist_in_the_kernel(module):
    params = inspect.signature(module.KERNEL.fn).parameters
    for key in ("do_not_specialize", "do_not_specialize_on_alignment"):
        assert set(module.KERNEL.jit_kwargs.get(key, ())) <= set(params)
