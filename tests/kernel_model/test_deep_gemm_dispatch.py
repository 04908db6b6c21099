"""The DeepGEMM SM90 kernel-selection model (kernel_model/deep_gemm.py) and `exact` mode.

Exhaustive over the engines' ranges: every M in 1..max_tokens of every dense shape, every
M_sum the engine produces for the grouped GEMM, must compile a kernel the exact plan warms.
The hand-checked cases recompute SM90ArchSpec's formulas (DeepGEMM 54e2261) by hand.
"""

import deep_gemm_oracle as oracle
import pytest
from factories import make_engine, steps_of, write_plan

from kernel_model import deep_gemm as dg
from planner.engine.config import load_engine
from planner.errors import PlanError
from planner.plan.expr import round_up

ENGINES = ("deepseek-v3-fp8-tp8-h200", "qwen3-30b-a3b-fp8-h100")
EXACT = """
    name: {base}-exact
    extends: {base}
    stages: [{{name: deep_gemm, with: {{mode: exact}}}}]
"""


@pytest.fixture(scope="module")
def exact_plans(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plans")
    plans = {base: write_plan(tmp, EXACT.format(base=base), f"{base}-exact.yaml") for base in ("vllm", "vllm-head")}
    return {(base, name): steps_of(path, load_engine(name), stage="deep_gemm")
            for base, path in plans.items() for name in ENGINES}


def num_sms(engine: str) -> int:
    return load_engine(engine).data["device"]["num_sms"]


def test_module_docstring_names_the_version():
    assert dg.VERSION == "54e2261" and "54e2261" in dg.__doc__ and "v2.6.1" in dg.__doc__


# --- exhaustive coverage ------------------------------------------------------------

@pytest.mark.parametrize("engine", ENGINES)
def test_every_dense_m_compiles_a_planned_kernel(exact_plans, engine):
    sms, max_tokens = num_sms(engine), load_engine(engine).data["scheduler"]["max_num_batched_tokens"]
    gemms = [s for s in exact_plans[("vllm", engine)] if s.kind == "gemm"]
    assert gemms
    for s in gemms:
        keys, m_values = s.compile_keys, list(s.m_values)
        assert len(keys) == len(set(keys)) == len(m_values) and m_values == sorted(m_values)
        first = {}
        for m in range(1, max_tokens + 1):
            key = oracle.dense_kernel_key(m, s.n, s.k, sms)
            first.setdefault(key, m)
        # exactly the kernels 1..max_tokens reach, each at its smallest M, in that order
        assert list(first) == keys and list(first.values()) == m_values, (s.n, s.k)


@pytest.mark.parametrize("base", ["vllm", "vllm-head"])
@pytest.mark.parametrize("engine", ENGINES)
def test_every_aligned_m_sum_compiles_a_planned_kernel(exact_plans, base, engine):
    """Exact grouped steps cover every multiple of the alignment up to MAX_M: the M_sum of any
    batch, whether the engine pads the worst case (vLLM's formula) or sums padded per-expert
    counts (DeepEP), lands on a planned kernel; `max_m` is that range, for --verify."""
    data = load_engine(engine).data
    tokens = min(data["scheduler"]["max_num_batched_tokens"] * data["parallel"]["data_parallel_size"], 32768)
    grouped = [s for s in exact_plans[(base, engine)] if s.kind == "grouped_gemm"]
    assert [s.weight for s in grouped] == ["w13", "w2"]
    sms = num_sms(engine)
    for s in grouped:
        max_m = round_up(tokens * s.top_k + s.num_groups * 127, 128)
        assert s.max_value == max_m
        first = {}
        for m_sum in range(128, max_m + 1, 128):
            key = oracle.grouped_contiguous_kernel_key(m_sum, s.n, s.k, s.num_groups, sms)
            first.setdefault(key, m_sum)
        assert list(first) == s.compile_keys and list(first.values()) == list(s.m_values)


@pytest.mark.parametrize("base", ["vllm", "vllm-head"])
@pytest.mark.parametrize("engine", ENGINES)
def test_compile_keys_of_relax_and_full_plans(base, engine, tmp_path):
    """Every mode lists the distinct kernels of its M-values, in order of first M."""
    full = write_plan(tmp_path, f"name: f\nextends: {base}\nstages: [{{name: deep_gemm, with: {{mode: full}}}}]\n")
    sms = num_sms(engine)
    for plan in (base, full):
        for s in steps_of(plan, load_engine(engine), stage="deep_gemm"):
            if s.kind == "gemm":
                keys = [oracle.dense_kernel_key(m, s.n, s.k, sms) for m in list(s.m_values)]
            else:
                keys = [oracle.grouped_contiguous_kernel_key(m, s.n, s.k, s.num_groups, sms)
                        for m in list(s.m_values)]
            assert s.compile_keys == list(dict.fromkeys(keys))
            first = {}
            for m, key in zip(list(s.m_values), keys):
                first.setdefault(key, m)
            assert [v.first for v in s.variants] == [first[key] for key in s.compile_keys]  # where --jobs compiles each


def test_exact_plans_cover_what_full_and_block_m_steps_compile(exact_plans, tmp_path):
    """Dense: exact and full reach the same kernels; grouped: exact and block_m_steps too."""
    full = write_plan(tmp_path, "name: f\nextends: vllm\nstages: [{name: deep_gemm, with: {mode: full}}]\n")
    for engine in ENGINES:
        by_id = {s.id: s for s in steps_of(full, load_engine(engine), stage="deep_gemm")}
        for s in exact_plans[("vllm", engine)]:
            other = by_id[s.id].compile_keys
            assert s.compile_keys == other


# --- the pruned search is the heuristic ---------------------------------------------

SHAPES = [(3072, 1536), (4096, 512), (7168, 2048), (4608, 7168), (7168, 2304), (512, 7168), (7168, 256),
          (5120, 2048), (2048, 4096), (6144, 4096), (4096, 14336), (128, 128), (151936, 2048)]


@pytest.mark.parametrize("sms", [132, 114, 78, 16])
def test_pruned_selection_equals_the_full_enumeration(sms):
    """_select_each prunes by bounds; the oracle's select_all counts every candidate exactly, as
    DeepGEMM does."""
    for n, k in SHAPES:
        model = dg._model(False, n, k, sms)
        for m_class in range(1, 2 + 8192 // 64 + 1):
            m = model.largest_m(m_class)
            assert model.winner(m_class) == oracle.select_all(model.space, m), (n, k, sms, m)
    for n, k in [(512, 7168), (7168, 256), (1536, 2048), (2048, 768)]:
        model = dg._model(True, n, k, sms)
        for m_class in range(1, 800):
            m = model.largest_m(m_class)
            assert model.winner(m_class) == oracle.select_all(model.space, m), (n, k, sms, m)


def test_m_classes_are_sound():
    """The layout depends on M only through its class: check raw M against the full enumeration."""
    for n, k in [(7168, 2048), (512, 7168), (2048, 4096)]:
        space = dg._space(True, n, k, 132)
        for m in [*range(1, 300), *range(300, 8193, 61)]:
            c = oracle.select_all(space, m)
            assert dg.dense_layout(m, n, k, 132)[:5] == (c.block_m, c.block_n, c.cluster_m, c.cluster_n, c.stages)


# --- hand-checked outcomes ----------------------------------------------------------

def test_block_n_candidates_and_stage_counts():
    # 1D2D: block_n up to 192; 176 fails the unroll rule (176 % 48 and 128 % 48 are both 32).
    assert dg.BLOCK_NS == (16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 192)
    # block_m 64, block_n 112, K 7168: D 64*112*2 = 14336 (already 1024-aligned), barriers 256,
    # B scales 56 * 4 * 2 (128 % 112 != 0) = 448; per stage 8192 + 14336 + 256 = 22784;
    # (232448 - 15040) // 22784 = 9.
    assert dg.num_stages(64, 112, 7168) == 9
    # block_m 256, block_n 128: D 65536, B scales 56 * 4 = 224; per stage 32768 + 16384 + 1024;
    # (232448 - 66016) // 50176 = 3, the minimum for 256 * 128 >= 128 * 192.
    assert dg.num_stages(256, 128, 7168) == 3
    # Small K: the cap of 16 stages.
    assert dg.num_stages(64, 16, 256) == 16


def test_one_row_picks_the_cheapest_block_that_fits_one_wave():
    # M = 1, N = 7168, K = 2048, 132 SMs: one wave only for ceil(7168 / block_n) <= 132, i.e.
    # block_n >= 64; then the count is the per-block L2 bytes (l2 dominates l1 here):
    #   block_m 16, block_n 64: 2048 * (16 + 64) + 16 * 64 * 2 = 165888 bytes,
    #   112 blocks: floor(165888 * 112 / 6153) = 3019 cycles, / (112 / 132) -> 3558;
    #   block_n 48 needs 150 blocks, two waves: floor(132608 * 150 / 6153) / (150 / 264) -> 5688.
    # Clusters are disabled (one wave), block_m 16 is allowed (M <= 16).
    layout = dg.dense_layout(1, 7168, 2048, 132)
    assert layout == dg.Layout(16, 64, 1, 1, 16, 3558)
    assert oracle.dense_kernel_key(1, 7168, 2048, 132) == (
        "sm90_fp8_gemm_1d2d:n=7168,k=2048,block_m=16,block_n=64,block_k=128,stages=16,multicast=1,sms=132")
    # From M = 17 block_m 16 is no longer a candidate; from M = 33 neither is 32.
    assert dg.dense_layout(17, 7168, 2048, 132).block_m == 32
    assert dg.dense_layout(33, 7168, 2048, 132).block_m == 64


def test_n_2112_one_row_uses_block_n_16():
    # ceil(2112 / 16) = 132 blocks: exactly one wave of 132 SMs, and the smallest blocks.
    assert dg.dense_layout(1, 2112, 7168, 132)[:4] == (16, 16, 1, 1)
    # With 114 SMs (H100 PCIe) 132 blocks are two waves: a larger block_n wins.
    assert dg.dense_layout(1, 2112, 7168, 114).block_n > 16


def test_multicast_needs_more_than_one_wave_and_names_its_side():
    for m in (1, 16, 32, 64, 128):
        assert dg.dense_layout(m, 7168, 2048, 132).multicast == "1"
    big = dg.dense_layout(8192, 7168, 2048, 132)
    assert (big.block_m, big.block_n, big.cluster_m, big.cluster_n, big.multicast) == (256, 128, 1, 2, "2(a)")
    assert "multicast=2(a)" in oracle.dense_kernel_key(8192, 7168, 2048, 132)
    assert dg.Layout(64, 96, 2, 1, 10, 0).multicast == "2(b)"


def test_grouped_key_uses_the_alignment_as_block_m_and_names_the_groups():
    key = oracle.grouped_contiguous_kernel_key(98048, 512, 7168, 256, 132)
    assert key.startswith("sm90_m_grouped_fp8_gemm_contiguous_1d2d:groups=256,n=512,k=7168,block_m=128,")
    # M_sum only matters through ceil(M_sum / 128) * ceil(N / block_n) blocks; the group count not at all.
    assert (dg.grouped_contiguous_layout(1000, 512, 7168, 132)
            == dg.grouped_contiguous_layout(1024, 512, 7168, 132))
    assert key.replace("groups=256", "groups=8") == oracle.grouped_contiguous_kernel_key(98048, 512, 7168, 8, 132)


def test_compiled_dims_and_the_scale_transpose():
    assert oracle.dense_kernel_key(5, 4096, 4096, 132, compiled_dims="").split(":")[1].startswith("block_m=16,")
    assert oracle.dense_kernel_key(5, 4096, 4096, 132, compiled_dims="mnk").split(":")[1].startswith("m=5,n=4096,k=4096,")
    assert len(dg.dense_keys(range(1, 100), 4096, 4096, 132, compiled_dims="mnk")) == 99
    assert oracle.sf_transpose_key(7168) == "transpose_fp32:num_threads=512,block_mn=64,sf_k=56"


def test_float32_steps_are_emulated():
    assert dg._f32(0.1) == 0.10000000149011612
    assert dg._f32(16777217.0) == 16777216.0  # 2^24 + 1 is not a float


def test_bad_inputs():
    with pytest.raises(ValueError, match="even SM count"):
        dg.dense_layout(1, 4096, 4096, 133)
    with pytest.raises(ValueError, match="even SM count"):
        dg.dense_keys([1], 4096, 4096, 133)
    with pytest.raises(ValueError, match="positive"):
        dg.dense_layout(0, 4096, 4096, 132)
    with pytest.raises(ValueError, match="positive"):
        dg.dense_keys([3, 0], 4096, 4096, 132)


def test_bulk_keys_equal_one_call_per_m():
    ms = [70, 3, 900, 64, 65, 3, 1, 8000, 17]
    assert dg.dense_keys(ms, 4096, 4096, 132) == {
        k: v[0] for k, v in oracle.enumerate_keys(ms, lambda m: oracle.dense_kernel_key(m, 4096, 4096, 132)).items()}
    assert dg.dense_keys(range(5, 3000), 4096, 4096, 132) == dg.dense_keys(list(range(5, 3000)), 4096, 4096, 132)


# --- the stage ----------------------------------------------------------------------

def test_exact_is_refused_where_the_model_does_not_apply(tmp_path):
    plan = write_plan(tmp_path, "name: e\nextends: vllm\nstages: [{name: deep_gemm, with: {mode: exact}}]\n")
    blackwell = make_engine(device={"name": "B200", "num_sms": 148, "capability": "10.0"})
    with pytest.raises(PlanError, match="SM90 kernel selection only.*SM100"):
        steps_of(plan, blackwell)
    # relax still plans there, without compile_keys
    assert all(not s.variants for s in steps_of("vllm", blackwell, stage="deep_gemm"))
    odd = make_engine(device={"name": "H100", "num_sms": 131, "capability": "9.0"})
    with pytest.raises(PlanError, match="num_sms 131 is odd"):
        steps_of(plan, odd)


def test_pinned_distinct_kernel_counts(exact_plans):
    """Distinct kernels per shape over 1..8192 (dense) and over every multiple of 128 up to
    MAX_M (grouped); the GPU ground truth of bench/deep_gemm_gpu.py compares with these."""
    def counts(base, engine):
        return {s.id.split("/")[1]: len(s.compile_keys) for s in exact_plans[(base, engine)]}

    dense = {"gemm-n3072-k1536": 23, "gemm-n4096-k512": 20, "gemm-n7168-k2048": 13, "gemm-n4608-k7168": 17,
             "gemm-n7168-k2304": 13, "gemm-n512-k7168": 21, "gemm-n7168-k256": 13}
    grouped = {"grouped_gemm-w13-e256-n512-k7168": 13, "grouped_gemm-w2-e256-n7168-k256": 8}
    assert counts("vllm", "deepseek-v3-fp8-tp8-h200") == {**dense, **grouped}
    assert counts("vllm-head", "deepseek-v3-fp8-tp8-h200") == {**dense, **grouped}
    dense = {"gemm-n5120-k2048": 16, "gemm-n2048-k4096": 23}
    grouped = {"grouped_gemm-w13-e128-n1536-k2048": 16, "grouped_gemm-w2-e128-n2048-k768": 14}
    assert counts("vllm", "qwen3-30b-a3b-fp8-h100") == {**dense, **grouped}
    assert counts("vllm-head", "qwen3-30b-a3b-fp8-h100") == {**dense, **grouped}
