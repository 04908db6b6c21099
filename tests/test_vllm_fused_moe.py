"""vLLM's Triton fused_moe kernel on Hopper: the compile-key model (kernel_model/vllm_fused_moe.py),
the vllm_fused_moe_kernels stage in both release plans, and, with WARMUP_VLLM_ENVS
(tests/vllm_parity/setup_vllm.sh), parity with each release's own config choice for every token
count of each shipped MoE engine and with the arguments vLLM's launcher passes
(tests/vllm_parity/fused_moe_oracle.py). No torch or Triton here, outside the oracle's subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernel_model import vllm_fused_moe as moe
from kernel_model.vllm_fused_moe import FusedMoeLaunch, MoeShape, choose_config, compile_key, fused_moe_variants
from planner.engine import load_engine
from planner.expand import expand
from planner.plan import load_plan
from planner.stages.vllm_fused_moe import shapes
from planner.steps import Kernel, step_from_dict

QWEN = MoeShape(128, 2048, 768, 8, "fp8_block", "H100")
MIXTRAL = MoeShape(8, 4096, 7168, 2, "none", "H100")
DSV3 = MoeShape(256, 7168, 256, 8, "fp8_block", "H200")
ENGINES = {"qwen3-30b-a3b-fp8-h100": QWEN, "mixtral-8x7b-tp2-h100": MIXTRAL, "deepseek-v3-fp8-tp8-h200": DSV3}


def every_key(shape: MoeShape, max_tokens: int) -> set:
    """The keys of every token count, by brute force."""
    keys = set()
    for m in range(1, max_tokens + 1):
        config = moe._config_items(choose_config(m, shape.num_experts, shape.intermediate, shape.device, shape.quant))
        for gemm in moe.GEMMS:
            keys.add(FusedMoeLaunch(gemm, m, shape.num_experts, shape.hidden, shape.intermediate, shape.top_k,
                                    shape.quant, config).key())
    return keys


@pytest.mark.parametrize("shape,count", [(QWEN, 20), (MIXTRAL, 66), (DSV3, 50)])
def test_variant_count_and_scan_covers_every_token_count(shape, count):
    launches = fused_moe_variants(shape, 8192)
    assert len(launches) == count
    assert {launch.key() for launch in launches} == every_key(shape, 8192)
    assert len({launch.key() for launch in launches}) == count


def test_qwen3_keys():
    """Block-FP8 defaults (no H100 table for E=128, N=768): naive assignment up to 4 tokens
    (4 x 8 x 4 <= 128), the narrow N tile and 4 stages there, SWAP_AB while BLOCK_SIZE_M is 16."""
    launches = fused_moe_variants(QWEN, 8192)
    first = launches[0]
    assert (first.gemm, first.tokens) == ("w13", 1)
    assert first.key() == (
        "vllm.fused_moe[w13 group_n=128 group_k=128 naive_block_assignment=1 BLOCK_SIZE_M=16 BLOCK_SIZE_N=64 "
        "BLOCK_SIZE_K=128 GROUP_SIZE_M=1 SPLIT_K=1 MUL_ROUTED_WEIGHT=0 top_k=8 compute_type=bf16 use_fp8_w8a8=1 "
        "use_int8_w8a8=0 use_int8_w8a16=0 per_channel_quant=0 HAS_BIAS=0 SWAP_AB=1 warps=4 stages=4]"
        "(fp8e4nv fp8e4nv bf16 none fp32 fp32 none none i32 i32 | N=i32D K=i32D EM=i32D num_valid_tokens=i32 "
        "stride_am=i32D stride_ak=constexpr=1 stride_be=i32D stride_bk=constexpr=1 stride_bn=i32D stride_cm=i32D "
        "stride_cn=constexpr=1 stride_asm=i32D stride_ask=constexpr=1 stride_bse=i32D stride_bsk=constexpr=1 "
        "stride_bsn=i32D stride_bbe=i32D stride_bbn=i32D)")
    assert [(l.gemm, l.tokens) for l in launches[:4]] == [("w13", 1), ("w2", 1), ("w13", 2), ("w2", 2)]
    w2 = launches[1]
    assert w2.ints()["N"] == 2048 and w2.ints()["K"] == 768 and w2.ints()["stride_asm"] == 6
    assert w2.pointer_dtypes()["topk_weights_ptr"] == "fp32" and w2.constexprs()["top_k"] == 1
    big = [l for l in launches if l.block_m == 64]
    assert {l.tokens for l in big} == {65, 66} and not any(l.constexprs()["SWAP_AB"] for l in big)
    assert big[0].em() == 65 * 8 + 128 * 63


def test_mixtral_keys_follow_the_tuned_table():
    """bf16 with vLLM's H100 table E=8,N=7168: nearest key, the first of a tie (3 -> key 2)."""
    assert choose_config(3, 8, 7168, "H100", "none")["BLOCK_SIZE_N"] == 128   # key 2, not 4
    assert choose_config(6, 8, 7168, "H100", "none")["BLOCK_SIZE_K"] == 256   # key 4, not 8
    assert choose_config(100000, 8, 7168, "H100", "none")["BLOCK_SIZE_M"] == 128
    launch = fused_moe_variants(MIXTRAL, 8192)[0]
    assert launch.naive() and launch.pointer_dtypes()["a_scale_ptr"] is None
    assert launch.constexprs()["group_n"] == 0 and not launch.constexprs()["SWAP_AB"]
    assert "BLOCK_SIZE_K=128" in launch.key() and "warps=4 stages=4" in launch.key()


def test_default_config_thresholds():
    d = moe.default_config
    assert (d(4, 128, "fp8_block")["num_stages"], d(5, 128, "fp8_block")["num_stages"]) == (4, 3)
    assert (d(8, 128, "fp8_block")["BLOCK_SIZE_N"], d(9, 128, "fp8_block")["BLOCK_SIZE_N"]) == (64, 128)
    assert (d(16, 128, "fp8_block")["GROUP_SIZE_M"], d(17, 128, "fp8_block")["GROUP_SIZE_M"]) == (1, 32)
    assert (d(64, 128, "fp8_block")["BLOCK_SIZE_M"], d(65, 128, "fp8_block")["BLOCK_SIZE_M"]) == (16, 64)
    assert [d(m, 8, "none")["BLOCK_SIZE_M"] for m in (32, 33, 96, 97, 512, 513)] == [16, 32, 32, 64, 64, 128]
    assert (d(8 * 128, 8, "none")["GROUP_SIZE_M"], d(8 * 129, 8, "none")["GROUP_SIZE_M"]) == (1, 16)


def test_a_table_not_carried_is_refused_not_guessed():
    with pytest.raises(moe.TableNotCarried):
        choose_config(1, 128, 768, "H200", "fp8_block")
    engine = load_engine("qwen3-30b-a3b-fp8-h100").data
    engine = {**engine, "device": {**engine["device"], "name": "H200"}}
    from planner.stages.vllm_fused_moe import variants
    assert shapes(engine) == [MoeShape(128, 2048, 768, 8, "fp8_block", "H200")] and variants(engine, 64) == []


def test_launch_round_trips_through_plan_data():
    for launch in fused_moe_variants(DSV3, 512):
        again = FusedMoeLaunch.from_spec(moe.KERNEL, json.loads(json.dumps(launch.spec())))
        assert again == launch and again.key() == launch.key()
    with pytest.raises(ValueError):
        FusedMoeLaunch.from_spec("other_kernel", launch.spec())
    with pytest.raises(ValueError):
        FusedMoeLaunch.from_spec(moe.KERNEL, {**launch.spec(), "gemm": "w3"})


@pytest.mark.parametrize("plan", ["vllm-0.25", "vllm-0.33", "vllm-0.25-plugin"])
@pytest.mark.parametrize("engine", ["qwen3-30b-a3b-fp8-h100", "mixtral-8x7b-tp2-h100", "deepseek-v3-fp8-tp8-h200",
                                    "llama-3.1-8b-fp8-h100"])
def test_stage_in_every_release_plan(plan, engine):
    expanded = expand(load_plan(plan), load_engine(engine))
    steps = [s for s in expanded.steps if s.stage == "fused_moe"]
    if engine not in ENGINES:
        assert steps == []
        return
    (step,) = steps
    assert isinstance(step, Kernel) and (step.backend, step.kernel) == ("vllm_triton", moe.KERNEL)
    assert [v.key for v in step.variants] == [l.key() for l in fused_moe_variants(ENGINES[engine], 8192)]
    assert step_from_dict(json.loads(json.dumps(step.to_dict()))) == step
    assert not any("Triton fused_moe, FlashInfer CUTLASS" in gap["family"] for gap in expanded.not_modelled)
    assert any(gap["family"].startswith("FlashInfer CUTLASS MoE (expert parallel)") for gap in expanded.not_modelled)


def test_no_triton_step_under_expert_parallelism_or_off_hopper():
    engine = load_engine("qwen3-30b-a3b-fp8-h100").data
    par = {**engine["parallel"], "enable_expert_parallel": True, "tensor_parallel_size": 2}
    assert shapes({**engine, "parallel": par}) == []
    assert shapes({**engine, "device": {**engine["device"], "capability": "10.0"}}) == []
    assert shapes({**engine, "parallel": {**engine["parallel"], "enable_expert_parallel": True}}) == [QWEN]


# --- parity with each release's own code (WARMUP_VLLM_ENVS) ---------------------------------------------------

def release_paths() -> dict:
    """{version: sys.path} of the releases in WARMUP_VLLM_ENVS (`VERSION=PATH[:PATH...],...`)."""
    items = filter(None, os.environ.get("WARMUP_VLLM_ENVS", "").split(","))
    return dict(item.partition("=")[::2] for item in items)


def oracle_request() -> dict:
    cases = [{**shape.__dict__, "max_tokens": load_engine(name).data["scheduler"]["max_num_batched_tokens"]}
             for name, shape in ENGINES.items()]
    launches = [{**launch.spec(), "device": shape.device} for shape in ENGINES.values()
                for launch in fused_moe_variants(shape, 8192)]
    return {"cases": cases, "launches": launches}


@pytest.fixture(scope="module", params=["0.25", "0.33"], name="facts")
def _facts(request):
    paths = release_paths().get(request.param)
    if paths is None:
        pytest.skip(f"WARMUP_VLLM_ENVS has no {request.param} release (tests/vllm_parity/setup_vllm.sh)")
    oracle = os.path.join(os.path.dirname(__file__), "vllm_parity", "fused_moe_oracle.py")
    env = {**os.environ, "PYTHONPATH": paths, "VLLM_LOGGING_LEVEL": "ERROR"}
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run([sys.executable, oracle], input=json.dumps(oracle_request()), capture_output=True,
                         text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout)
    assert facts["version"].startswith(request.param)
    return facts


def test_parity_declaration(facts):
    declared = facts["declaration"]
    names = [n for n in declared["arg_names"] if n != "USE_TD"]   # 0.33's, False by default
    assert names == list(moe.POINTERS + moe.INTS + moe.CONSTEXPRS)
    assert declared["do_not_specialize"] == declared["do_not_specialize_on_alignment"] == []


def test_parity_config_for_every_token_count(facts):
    for (name, shape), theirs in zip(ENGINES.items(), facts["configs"]):
        ours = [[choose_config(m, shape.num_experts, shape.intermediate, shape.device, shape.quant)[key]
                 for key in moe.CONFIG_KEYS] for m in range(1, len(theirs) + 1)]
        assert ours == theirs, name


SHORT = {"float8_e4m3fn": "fp8e4nv", "bfloat16": "bf16", "float32": "fp32", "int32": "i32"}


def test_parity_every_planned_launch(facts):
    """The key of each launch vLLM's launcher makes for a planned variant's GEMM and token count,
    read from its arguments, is the planned key."""
    launches = [l for shape in ENGINES.values() for l in fused_moe_variants(shape, 8192)]
    assert len(launches) == len(facts["launches"])
    for launch, seen in zip(launches, facts["launches"]):
        dtypes = {p: SHORT[seen[p]["dtype"]] if seen[p] else None for p in moe.POINTERS}
        key = compile_key(launch.gemm, dtypes, {n: seen[n] for n in moe.INTS},
                          {n: seen[n] for n in moe.CONSTEXPRS},
                          {"num_warps": seen["num_warps"], "num_stages": seen["num_stages"]})
        assert key == launch.key(), launch
