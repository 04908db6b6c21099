"""DeepGEMM M-values, grouped GEMM sizes, FlashInfer buckets, attention keys, CUDA-graph sizes."""

import pytest
from factories import make_engine, merge, write_plan
from factories import plain_steps_of as steps_of

from planner.plan.stages.autotune import hybrid_buckets, power_of_2_buckets
from planner.plan.stages.cudagraph import default_sizes
from planner.plan.stages.deep_gemm import relax_m_values
from planner.plan.stages.triton_gemm import bucket_m_values, nearest_key_intervals

FP8 = {"method": "fp8", "weight_block_size": [128, 128]}


# vLLM 017e9f4448b7's _generate_optimal_warmup_m_values (deep_gemm_warmup.py): counts computed
# with S=132; 292 and 288 match PR #30903's progress bars.
@pytest.mark.parametrize("n,counts", [(7168, (132, 292, 429)), (36864, (190, 288, 416)), (4096, (118, 286, 436))])
def test_relax_m_value_counts(n, counts):
    assert tuple(len(relax_m_values(t, n, 132)) for t in (2048, 8192, 16384)) == counts


def test_relax_m_values_content():
    values = relax_m_values(8192, 7168, 132)
    assert values[:4] == [1, 2, 4, 8] and values[-1] == 8192
    assert all(m % 64 == 0 for m in range(64, 8193, 64) if m in values)
    assert set(range(64, 8193, 64)) <= set(values)
    # one wave of 132 SMs with block_m=64, block_n=16: 132 * 64 // cdiv(7168, 16) = 18
    assert 18 in values
    # vLLM adds the small cases even above max_tokens (a lint flags it)
    assert max(relax_m_values(32, 4096, 132)) == 64


def test_dense_gemm_shapes_are_deduplicated_and_filtered():
    engine = make_engine(model={"linear": [
        {"name": "a", "n": 4096, "k": 4096, "quant": FP8},
        {"name": "b", "n": 4096, "k": 4096, "quant": FP8},
        {"name": "unaligned", "n": 2112, "k": 7168, "quant": FP8},
        {"name": "bf16", "n": 4096, "k": 1024},
        {"name": "small_blocks", "n": 4096, "k": 2048, "quant": {"method": "fp8", "weight_block_size": [64, 64]}},
        {"name": "per_tensor", "n": 8192, "k": 2048, "quant": {"method": "fp8_per_tensor"}},
    ]})
    gemms = steps_of("vllm", engine, kind="gemm")
    assert [(s["n"], s["k"], s["layers"]) for s in gemms] == [(4096, 4096, ["a", "b"])]
    assert gemms[0]["kernel"] == "fp8_gemm_nt" and len(gemms[0]["m_values"]) == 118 + 0  # T=2048


def test_full_mode_lists_every_m(tmp_path):
    plan = write_plan(tmp_path, """
        name: full
        extends: vllm
        stages: [{name: deep_gemm, with: {mode: full}}]
    """)
    gemm = steps_of(plan, make_engine(), kind="gemm")[0]
    assert gemm["m_values"] == list(range(1, 2049))


MOE = {"model": {"linear": [], "moe": [{"name": "experts", "num_experts": 256, "top_k": 8, "hidden_size": 7168,
                                        "intermediate_size": 256, "quant": FP8}]},
       "scheduler": {"max_num_batched_tokens": 8192}}


def test_grouped_gemm_v011_block_m_steps():
    steps = steps_of("vllm", make_engine(**MOE), kind="grouped_gemm")
    assert [(s["weight"], s["n"], s["k"], s["num_groups"], s["top_k"]) for s in steps] == [
        ("w13", 512, 7168, 256, 8), ("w2", 7168, 256, 256, 8)]
    # MAX_M = round_up(8192 * 8 + 256 * 127, 128) = 98048 -> 766 calls per weight (vLLM 0d21b9b51,
    # deep_gemm_warmup.py)
    assert steps[0]["m_values"] == list(range(128, 98049, 128)) and len(steps[1]["m_values"]) == 766


def test_grouped_gemm_dp_and_chunk_cap():
    # dp * T = 4 * 16384 = 65536, capped by the 32768 chunk: MAX_M = round_up(32768*8 + 256*127, 128)
    engine = make_engine(**merge(MOE, {"scheduler": {"max_num_batched_tokens": 16384},
                                       "parallel": {"data_parallel_size": 4}}))
    m = steps_of("vllm", engine, kind="grouped_gemm")[0]["m_values"]
    assert m[-1] == 294656 and len(m) == 294656 // 128


def test_grouped_gemm_head_aligned_sum():
    steps = steps_of("vllm-head", make_engine(**MOE), kind="grouped_gemm")
    m = steps[0]["m_values"]
    # request M=1: 8 routed tokens, 8 active experts each padded to 128 -> 1024
    assert m[0] == round_up_(1 * 8 + 8 * 127, 128) == 1024
    # request M = dp*T = 8192: 65536 routed, min(65536, 256) experts active
    assert m[-1] == round_up_(65536 + 256 * 127, 128)
    assert m == sorted(set(m)) and steps[0]["m_values"] == steps[1]["m_values"]


def round_up_(x, m):
    return -(-x // m) * m


def test_flashinfer_buckets():
    assert power_of_2_buckets(8192) == [2 ** i for i in range(14)]
    assert power_of_2_buckets(6000) == [2 ** i for i in range(13)]
    assert len(hybrid_buckets(8192)) == 21 and len(hybrid_buckets(16384)) == 22 and len(hybrid_buckets(2048)) == 16
    assert hybrid_buckets(3000)[-3:] == [2048, 2560, 3000]
    steps = steps_of("vllm-head", make_engine(), kind="autotune")
    assert steps[0]["num_tokens"] == 2048 and steps[0]["buckets"] == hybrid_buckets(2048)
    assert steps[0]["cache"] == "persistent"


def test_flashinfer_and_deep_gemm_need_hopper():
    engine = make_engine(device={"name": "A100", "num_sms": 108, "capability": "8.0"})
    kinds = {s["kind"] for s in steps_of("vllm", engine)}
    assert "autotune" not in kinds and "gemm" not in kinds and "prefill" in kinds


NVFP4 = {"model": {"attention": [
    {"name": "full", "num_heads": 32, "num_kv_heads": 8, "head_size": 128, "backend": "TRITON_ATTN",
     "kv_cache_dtype": "nvfp4"},
    {"name": "full_again", "num_heads": 32, "num_kv_heads": 8, "head_size": 128, "backend": "TRITON_ATTN",
     "kv_cache_dtype": "nvfp4"},
    {"name": "sliding", "num_heads": 32, "num_kv_heads": 8, "head_size": 64, "backend": "TRITON_ATTN",
     "kv_cache_dtype": "nvfp4", "sliding_window": [1023, 0]},
    {"name": "fp8_kv", "num_heads": 32, "num_kv_heads": 8, "head_size": 128, "backend": "TRITON_ATTN",
     "kv_cache_dtype": "fp8"},
    {"name": "flashinfer", "num_heads": 16, "num_kv_heads": 8, "head_size": 128, "backend": "FLASHINFER",
     "kv_cache_dtype": "nvfp4"}]}}


def test_nvfp4_prefill_attention_one_step_per_layer_key():
    steps = steps_of("vllm", make_engine(**NVFP4), kind="attention")
    assert [(s["head_size"], s["sliding_window"], s["layers"]) for s in steps] == [
        (128, [-1, -1], ["full", "full_again"]), (64, [1023, 0], ["sliding"])]
    assert {s["num_tokens"] for s in steps} == {64}  # min(2048, 4096, 64)
    assert steps[0]["scale"] == 128 ** -0.5 and steps[0]["dtype"] == "bfloat16"
    small = make_engine(**merge(NVFP4, {"model": {"max_model_len": 16}}))
    assert {s["num_tokens"] for s in steps_of("vllm", small, kind="attention")} == {16}


def cudagraph(engine, plan="vllm"):
    return steps_of(plan, engine, kind="cudagraph")


def test_default_cudagraph_sizes():
    sizes = default_sizes(512, 8192, "default")
    assert len(sizes) == 51 and sizes[:4] == [1, 2, 4, 8] and sizes[-2:] == [496, 512]
    assert len(default_sizes(1024, 16384, "default")) == 83
    assert default_sizes(40, 40, "default")[-1] == 40 and default_sizes(64, 2048, "interactivity")[:33] == \
        list(range(1, 33)) + [40]
    step = cudagraph(make_engine(scheduler={"max_num_seqs": 1024, "max_num_batched_tokens": 8192}))[0]
    assert step["sizes"][0] == 512 and step["sizes"][-1] == 1 and len(step["sizes"]) == 51
    assert step["uniform_decode_sizes"] == step["sizes"]


def test_cudagraph_sizes_blackwell_and_small_batches():
    b200 = make_engine(scheduler={"max_num_seqs": 1024, "max_num_batched_tokens": 16384},
                       device={"name": "B200", "num_sms": 148, "capability": "10.0"})
    assert cudagraph(b200)[0]["sizes"][0] == 1024
    # max = min(T, R * q * 2, 512) = 2 * 4 * 1 = 8
    assert cudagraph(make_engine(scheduler={"max_num_seqs": 4}))[0]["sizes"] == [8, 4, 2, 1]


def test_cudagraph_spec_decode_sizes():
    engine = make_engine(speculative={"method": "eagle", "num_speculative_tokens": 2},
                         scheduler={"max_num_seqs": 8})
    step = cudagraph(engine)[0]
    # max = min(2048, 8 * 3 * 2, 512) = 48: sizes 1 2 4 8 16 24 32 40 48. FULL decode sizes are those
    # rounded up to multiples of 3 (3 3 6 9 18 24 33 42 48) that fit min(R * q, max) = 24.
    assert step["sizes"][0] == 48 and step["uniform_decode_sizes"] == [24, 18, 9, 6, 3]
    v1 = write_plan_v1()  # V1 rounds the capture sizes themselves
    assert steps_of(v1, engine, kind="cudagraph")[0]["sizes"] == [48, 42, 33, 24, 18, 9, 6, 3]


def write_plan_v1():
    import tempfile, pathlib
    d = pathlib.Path(tempfile.mkdtemp())
    return write_plan(d, "name: v1\nextends: vllm\nstages: [{name: cudagraph, with: {decode_rounding: v1}}]\n")


def test_cudagraph_modes_and_user_sizes():
    assert cudagraph(make_engine(compilation={"enforce_eager": True})) == []
    assert cudagraph(make_engine(compilation={"cudagraph_mode": "NONE"})) == []
    piecewise = cudagraph(make_engine(compilation={"cudagraph_mode": "PIECEWISE"}))[0]
    assert piecewise["uniform_decode_sizes"] == [] and piecewise["sizes"]
    decode_only = cudagraph(make_engine(compilation={"cudagraph_mode": "FULL_DECODE_ONLY"}))[0]
    assert decode_only["sizes"] == [] and decode_only["uniform_decode_sizes"]
    user = cudagraph(make_engine(compilation={"cudagraph_capture_sizes": [4096, 1, 64, 64, 3]}))[0]
    assert user["sizes"] == [64, 3, 1]  # deduplicated, > max_num_batched_tokens dropped


# vLLM's interactivity mode (VllmConfig._set_cudagraph_sizes: every size from 1 to 32, then the grid),
# and no size past the capture ceiling (issue 44 item 7).
def test_interactivity_captures_every_size_up_to_32_then_the_grid():
    assert default_sizes(512, 8192, "interactivity") == [*range(1, 33), *range(40, 256, 8), *range(256, 513, 16)]


def test_interactivity_below_32_captures_every_size_up_to_the_ceiling():
    assert default_sizes(20, 8192, "interactivity") == [*range(1, 21)]


def test_no_size_past_the_capture_ceiling_is_captured():
    assert default_sizes(15, 8192, "throughput") == [1, 2, 4, 8]
    assert default_sizes(263, 8192, "throughput") == [1, 2, 4, *range(8, 256, 8), 256]


def test_triton_buckets_cover_every_integer_class():
    intervals = nearest_key_intervals([1, 16, 32, 64], 100)
    assert intervals == [(1, 8), (9, 24), (25, 48), (49, 100)]
    values = bucket_m_values([1, 16, 32, 64], 100)
    for lo, hi in intervals:
        inside = [m for m in values if lo <= m <= hi]
        assert lo in inside and hi in inside
        if any(m % 16 == 0 for m in range(lo, hi + 1)):
            assert any(m % 16 == 0 for m in inside)
        assert any(m % 16 and m != 1 for m in inside) or hi == 1
