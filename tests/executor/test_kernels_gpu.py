"""The executor's Triton kernels at serving sizes, on a CUDA GPU (skipped elsewhere).

Besides accuracy against the float64 torch references, these check the
specialization facts the planner relies on: after warming one size per
``specialization_classes`` group, the other sizes compile and load nothing.
Never run under TRITON_INTERPRET.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.gpu  # skipped without CUDA by tests/conftest.py

from execlib import config_key  # noqa: E402
from executor.kernels import configs  # noqa: E402
from executor.kernels import fp8_gemm as gemm  # noqa: E402
from executor.kernels import grouped_gemm as grouped  # noqa: E402
from executor.kernels import prefill_attention as attn  # noqa: E402
from executor.kernels.jit import fp8_gemm as gemm_jit  # noqa: E402
from executor.kernels.jit import grouped_gemm as grouped_jit  # noqa: E402
from executor.kernels.jit import prefill_attention as attn_jit  # noqa: E402
from executor.kernels.reference import quantize_fp8_per_token_group  # noqa: E402
from kernel_refs import (  # noqa: E402
    contiguous_layout,
    ref_fp8_gemm,
    ref_grouped_fp8_gemm,
    ref_prefill_attention,
)

TOL = 2e-2
DEVICE = "cuda"
MS = [1, 16, 17, 128, 1000, 4096]
GEMM_SHAPES = [(4096, 7168), (7168, 2048), (1000, 640)]  # the last: N not a multiple of 128


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp(min=1e-30)).item()


def assert_written_and_close(out, ref):
    assert not out.isnan().any(), f"{int(out.isnan().sum())} output elements never written"
    err = rel_err(out, ref)
    assert err < TOL, err


class CompileWatch:
    """Counts in-memory compiles of one kernel and module loads (Triton >= 3.4 knobs)."""

    def __init__(self, lazy_kernel):
        self.kernel = lazy_kernel.get()
        self.loads = []

    def variants(self) -> int:
        return sum(len(cache[0]) for cache in self.kernel.device_caches.values())

    def __enter__(self):
        from triton import knobs

        self.hook = getattr(knobs.runtime, "kernel_load_start_hook", None)
        if self.hook is not None:
            self.hook.add(self._on_load)
        return self

    def _on_load(self, *args):
        self.loads.append(args[2])

    def __exit__(self, *exc):
        if self.hook is not None:
            self.hook.remove(self._on_load)


# --- fp8_gemm --------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=GEMM_SHAPES, ids=lambda nk: f"N{nk[0]}-K{nk[1]}")
def gemm_inputs(request):
    N, K = request.param
    return gemm.alloc_gemm_inputs(max(MS), N, K, DEVICE, random=True, seed=N * 31 + K)


@pytest.mark.parametrize("M", MS)
def test_fp8_gemm_default_configs(gemm_inputs, M):
    part = gemm_inputs.rows(M)
    part.out.fill_(float("nan"))
    gemm.fp8_gemm(*part.args(), out=part.out)
    torch.cuda.synchronize()
    assert_written_and_close(part.out, ref_fp8_gemm(*part.args()))


@pytest.mark.parametrize("config", configs.CANDIDATE_CONFIGS, ids=lambda c: "-".join(map(str, config_key(c))))
def test_fp8_gemm_every_candidate_config(gemm_inputs, config):
    part = gemm_inputs.rows(1000)
    part.out.fill_(float("nan"))
    gemm.fp8_gemm(*part.args(), out=part.out, config=config)
    assert_written_and_close(part.out, ref_fp8_gemm(*part.args()))


def test_fp8_gemm_variants_are_the_configs():
    N, K = 4096, 7168
    full = gemm.alloc_gemm_inputs(max(MS) + 3, N, K, DEVICE)
    Ms = MS + [2, 15, 31, 33, 4097]
    classes = gemm.specialization_classes(Ms, N, K, table=gemm.lookup_table(gemm.KERNEL_NAME, N, K, DEVICE))
    with CompileWatch(gemm_jit.KERNEL) as watch:
        for ms in classes.values():
            gemm.warmup(ms[0], N, K, DEVICE, inputs=full)
        torch.cuda.synchronize()
        variants, loads = watch.variants(), len(watch.loads)
        for m in Ms:
            gemm.warmup(m, N, K, DEVICE, inputs=full)
        torch.cuda.synchronize()
        assert watch.variants() == variants, "an M outside the warmed classes compiled a new variant"
        assert len(watch.loads) == loads, "a warmed variant loaded its module again"


# --- grouped_fp8_gemm ------------------------------------------------------------------------------

GROUPED_LAYOUTS = {
    "decode-like": [1, 0, 2, 1, 0, 0, 1, 3],
    "mixed": [1, 0, 17, 128, 300, 5, 0, 1000],
    "prefill": [512, 700, 260, 90, 1024, 333, 64, 1500],
}


@pytest.fixture(scope="module")
def grouped_weights():
    N, K, E = 4096, 7168, 8
    return grouped.alloc_grouped_inputs(128, N, K, E, DEVICE, random=True, seed=7)


@pytest.mark.parametrize("rows", GROUPED_LAYOUTS.values(), ids=list(GROUPED_LAYOUTS))
@pytest.mark.parametrize("block_m", [64, 128])
def test_grouped_fp8_gemm(grouped_weights, rows, block_m):
    w = grouped_weights
    used = len(contiguous_layout(rows, block_m)[0])
    expert_ids = contiguous_layout(rows, block_m, used + block_m)[0].to(DEVICE)  # + a padding chunk
    total, K = len(expert_ids), w.b.shape[2]
    gen = torch.Generator(device=DEVICE).manual_seed(total)
    a, a_scales = quantize_fp8_per_token_group(torch.randn(total, K, generator=gen, device=DEVICE))
    out = torch.full((total, w.b.shape[1]), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    args = (a, a_scales, w.b, w.b_scales, expert_ids)
    grouped.grouped_fp8_gemm(*args, block_m=block_m, out=out)
    assert_written_and_close(out, ref_grouped_fp8_gemm(*args, block_m=block_m))
    assert (out[-block_m:] == 0).all()


def test_grouped_variants_are_the_configs(grouped_weights):
    N, K, E, block_m = 4096, 7168, 8, 128
    full = grouped.alloc_grouped_inputs(4096, N, K, E, DEVICE, block_m)
    Ms = [128, 256, 384, 1024, 2048, 4096]
    table = gemm.lookup_table(grouped.KERNEL_NAME, N, K, DEVICE)
    classes = grouped.specialization_classes(Ms, N, K, block_m, table=table)
    with CompileWatch(grouped_jit.KERNEL) as watch:
        for ms in classes.values():
            grouped.warmup(ms[0], N, K, E, DEVICE, block_m, inputs=full)
        torch.cuda.synchronize()
        variants = watch.variants()
        for m in Ms:
            grouped.warmup(m, N, K, E, DEVICE, block_m, inputs=full)
        torch.cuda.synchronize()
        assert watch.variants() == variants


# --- prefill attention -----------------------------------------------------------------------------

ATTN_CASES = {
    # H, KVH, D, dtype, sequence lengths, causal, (left, right), softcap
    "llama-gqa-bf16": (32, 8, 128, torch.bfloat16, [1, 17, 1000, 2048, 128], True, (-1, -1), 0.0),
    "d64-fp16": (16, 16, 64, torch.float16, [333, 1, 1024], True, (-1, -1), 0.0),
    "d80-bf16": (16, 4, 80, torch.bfloat16, [700, 5, 129], True, (-1, -1), 0.0),
    "d96-window": (8, 2, 96, torch.bfloat16, [1500, 2, 64], True, (256, -1), 0.0),
    "gemma-d256-softcap-window": (8, 4, 256, torch.bfloat16, [1200, 1, 300], True, (511, -1), 50.0),
    "d192-noncausal-two-sided": (4, 4, 192, torch.float16, [600, 33], False, (64, 32), 0.0),
    "d576-mla-size": (8, 1, 576, torch.bfloat16, [300, 1, 77], True, (-1, -1), 0.0),
}


@pytest.mark.parametrize("case", ATTN_CASES.values(), ids=list(ATTN_CASES))
def test_prefill_attention(case):
    H, KVH, D, dtype, lens, causal, window, cap = case
    inputs = attn.alloc_attention_inputs(sum(lens), H, KVH, D, dtype, DEVICE, random=True, seed=D + H)
    b_start_loc, b_seq_len, max_len = attn.seq_layout(lens, DEVICE)
    inputs.o.fill_(float("nan"))
    scale = 1.0 / math.sqrt(D)
    attn.context_attention_fwd(inputs.q, inputs.k, inputs.v, inputs.o, b_start_loc, b_seq_len, max_len,
                               is_causal=causal, softmax_scale=scale, softcap=cap,
                               sliding_window_q=window[0], sliding_window_k=window[1])
    ref = ref_prefill_attention(inputs.q, inputs.k, inputs.v, b_start_loc, b_seq_len, causal, scale,
                                cap, window[0], window[1])
    assert_written_and_close(inputs.o, ref)


def test_prefill_attention_one_variant_for_all_token_counts():
    H, KVH, D = 32, 8, 128
    counts = [1, 2, 16, 17, 100, 1000, 4096, 8192]
    assert len(attn.specialization_classes(counts, H, KVH, D)) == 1
    inputs = attn.alloc_attention_inputs(max(counts), H, KVH, D, torch.bfloat16, DEVICE)
    with CompileWatch(attn_jit.KERNEL) as watch:
        attn.warmup(counts[3], H, KVH, D, inputs=inputs)
        torch.cuda.synchronize()
        variants, loads = watch.variants(), len(watch.loads)
        for n in counts:
            attn.warmup(n, H, KVH, D, inputs=inputs, seq_lens=[n // 2, n - n // 2] if n > 1 else None)
        torch.cuda.synchronize()
        assert watch.variants() == variants
        assert len(watch.loads) == loads
