"""vLLM's Triton fused_moe kernel on Hopper: the compile-key model (kernel_model/vllm_fused_moe.py),
the vllm_fused_moe_kernels stage in both release plans, and, with WARMUP_VLLM_ENVS
(tests/integration/vllm_parity/setup_vllm.sh), parity with each release's own config choice for every token
count of each shipped MoE engine and with the arguments vLLM's launcher passes
(tests/integration/vllm_parity/fused_moe_oracle.py). No torch or Triton here, outside the oracle's subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from factories import MADE_UP_MOE_TABLES, write_moe_tables
from kernel_model import vllm_fused_moe as moe
from kernel_model.vllm_fused_moe import FusedMoeLaunch, MoeShape, TableDirs, choose_config, compile_key
from kernel_model.vllm_fused_moe import fused_moe_variants as variants_with
from planner.api import check_fresh
from planner.cli import main
from planner.engine.config import load_engine
from planner.engine.facts import engine_facts
from planner.errors import PlanError
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.stages.vllm_fused_moe import shapes
from planner.plan.steps import Kernel, step_from_dict
from planner.tables import vllm_moe as where

QWEN = MoeShape(128, 2048, 768, 8, "fp8_block", "H100")
MIXTRAL = MoeShape(8, 4096, 7168, 2, "none", "H100")
DSV3 = MoeShape(256, 7168, 256, 8, "fp8_block", "H200")
ENGINES = {"qwen3-30b-a3b-fp8-h100": QWEN, "mixtral-8x7b-tp2-h100": MIXTRAL, "deepseek-v3-fp8-tp8-h200": DSV3}
MIXTRAL_TABLE = "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json"
DSV3_TABLE = "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
QWEN_TABLE = "E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json"


def made_up(shape: MoeShape):
    """The made-up table rows of tests/factories.py for the layer, or None."""
    name = moe.table_file_name(shape.num_experts, shape.intermediate, shape.device, shape.quant)
    table = MADE_UP_MOE_TABLES.get(name)
    return None if table is None else moe.parse_table(json.dumps(table), name)


def fused_moe_variants(shape: MoeShape, max_tokens: int, table=None):
    return variants_with(shape, max_tokens, made_up(shape) if table is None else table)


def every_key(shape: MoeShape, max_tokens: int) -> set:
    """The keys of every token count, by brute force."""
    keys, table = set(), made_up(shape)
    for m in range(1, max_tokens + 1):
        config = moe._config_items(choose_config(m, shape.num_experts, shape.quant, table))
        for gemm in moe.GEMMS:
            keys.add(FusedMoeLaunch(gemm, m, shape.num_experts, shape.hidden, shape.intermediate, shape.top_k,
                                    shape.quant, config).key())
    return keys


@pytest.mark.parametrize("shape,count", [(QWEN, 20), (MIXTRAL, 22), (DSV3, 18)])
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
    """bf16 with a (made-up) H100 table E=8,N=7168 of keys 1, 4, 100, 700: the nearest key, the
    first of a tie (52 -> key 4, 400 -> key 100), Triton's defaults where a config has no warps."""
    table = made_up(MIXTRAL)
    assert [m for m, _ in table] == [1, 4, 100, 700]
    assert choose_config(52, 8, "none", table)["BLOCK_SIZE_K"] == 128     # key 4, not 100
    assert choose_config(53, 8, "none", table)["BLOCK_SIZE_K"] == 64      # key 100
    assert choose_config(400, 8, "none", table)["BLOCK_SIZE_M"] == 32     # key 100, not 700
    assert choose_config(100000, 8, "none", table)["BLOCK_SIZE_M"] == 128
    assert choose_config(3, 8, "none", None) == moe.default_config(3, 8, "none")
    launches = fused_moe_variants(MIXTRAL, 8192)
    launch = launches[0]
    assert launch.naive() and launch.pointer_dtypes()["a_scale_ptr"] is None
    assert launch.constexprs()["group_n"] == 0 and not launch.constexprs()["SWAP_AB"]
    assert "BLOCK_SIZE_K=64" in launch.key() and "warps=4 stages=2" in launch.key()
    assert "BLOCK_SIZE_M=128" in launches[-1].key() and "warps=4 stages=3" in launches[-1].key()


def test_table_file_names_are_vllms():
    assert moe.table_file_name(8, 7168, "H100", "none") == MIXTRAL_TABLE
    assert moe.table_file_name(256, 256, "H200", "fp8_block") == DSV3_TABLE


def test_parse_table_reads_as_vllm_does():
    text = '{"triton_version": "3.4", "16": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, ' \
           '"GROUP_SIZE_M": 1, "SPLIT_K": 1}, "8": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, ' \
           '"GROUP_SIZE_M": 1}, "016": {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}}'
    rows = moe.parse_table(text, "t.json")
    assert [m for m, _ in rows] == [16, 8]                 # file order, a repeated key keeps its place
    assert rows[0][1] == {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
    assert moe.parse_table('{"triton_version": "3.4"}', "t.json") == ()


@pytest.mark.parametrize("text,why", [
    ("{", "not JSON"), ("[1]", "JSON object"), ('{"x": {}}', "not a token count"), ('{"1": 3}', "not an object"),
    ('{"1": {"BLOCK_SIZE_M": 16}}', "no ["), ('{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, '
                                             '"GROUP_SIZE_M": 1, "kpack": 2}}', "does not know"),
    ('{"1": {"BLOCK_SIZE_M": true, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}}', "positive integers"),
    ('{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "SPLIT_K": 2}}', "SPLIT_K")])
def test_a_malformed_table_is_one_error_naming_the_file(text, why):
    with pytest.raises(moe.TableError) as e:
        moe.parse_table(text, "/x/E=1.json")
    assert str(e.value).startswith("/x/E=1.json: ") and why in str(e.value) and "\n" not in str(e.value)


def test_a_malformed_table_fails_the_cli_with_exit_2(moe_tables, capsys):
    with open(os.path.join(moe_tables, MIXTRAL_TABLE), "w") as f:
        f.write('{"1": [}')
    assert main(["plan", "vllm-0.25", "--engine", "mixtral-8x7b-tp2-h100"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and MIXTRAL_TABLE in err and "not JSON" in err


def test_default_config_thresholds():
    d = moe.default_config
    assert (d(4, 128, "fp8_block")["num_stages"], d(5, 128, "fp8_block")["num_stages"]) == (4, 3)
    assert (d(8, 128, "fp8_block")["BLOCK_SIZE_N"], d(9, 128, "fp8_block")["BLOCK_SIZE_N"]) == (64, 128)
    assert (d(16, 128, "fp8_block")["GROUP_SIZE_M"], d(17, 128, "fp8_block")["GROUP_SIZE_M"]) == (1, 32)
    assert (d(64, 128, "fp8_block")["BLOCK_SIZE_M"], d(65, 128, "fp8_block")["BLOCK_SIZE_M"]) == (16, 64)
    assert [d(m, 8, "none")["BLOCK_SIZE_M"] for m in (32, 33, 96, 97, 512, 513)] == [16, 32, 32, 64, 64, 128]
    assert (d(8 * 128, 8, "none")["GROUP_SIZE_M"], d(8 * 129, 8, "none")["GROUP_SIZE_M"]) == (1, 16)


def test_table_dirs_search_in_order(tmp_path):
    first = write_moe_tables(tmp_path / "user", {MIXTRAL_TABLE: {"7": MADE_UP_MOE_TABLES[MIXTRAL_TABLE]["4"]}})
    second = write_moe_tables(tmp_path / "shipped")
    assert [m for m, _ in TableDirs([first, second]).table(MIXTRAL)] == [7]
    assert [m for m, _ in TableDirs([second, first]).table(MIXTRAL)] == [1, 4, 100, 700]
    assert TableDirs([first, second]).table(QWEN) is None and TableDirs([]).table(MIXTRAL) is None


def test_without_tables_the_stage_plans_nothing_and_says_how(monkeypatch):
    monkeypatch.setenv("WARMUP_VLLM_MOE_CONFIGS", "")
    expanded = expand(load_plan("vllm-0.25"), load_engine("deepseek-v3-fp8-tp8-h200"))
    assert [s for s in expanded.steps if s.stage == "fused_moe"] == []
    (gap,) = [g for g in expanded.not_modelled if "tuned tables not found" in g["family"]]
    assert "E=256,N=256 (block FP8, H200)" in gap["why"] and "WARMUP_VLLM_MOE_CONFIGS" in gap["action"]
    assert "vllm_moe_configs" not in expanded.inputs


def test_the_plan_names_the_tables_it_read(moe_tables):
    expanded = expand(load_plan("vllm-0.25"), load_engine("qwen3-30b-a3b-fp8-h100"))
    assert expanded.inputs["vllm_moe_config_tables"] == {QWEN_TABLE: None}  # absent: vLLM's defaults
    expanded = expand(load_plan("vllm-0.25"), load_engine("mixtral-8x7b-tp2-h100"))
    (read,) = expanded.inputs["vllm_moe_config_tables"].values()
    assert list(expanded.inputs["vllm_moe_config_tables"]) == [MIXTRAL_TABLE] and read.startswith("sha256:")
    assert not any("tuned tables not found" in g["family"] for g in expanded.not_modelled)
    assert expand(load_plan("vllm-0.25"), load_engine("mixtral-8x7b-tp2-h100")) == expanded  # deterministic
    check_fresh(expanded, load_engine("mixtral-8x7b-tp2-h100"), load_plan("vllm-0.25"))
    table = dict(MADE_UP_MOE_TABLES[MIXTRAL_TABLE])
    table["1"] = {**table["1"], "num_stages": 3}
    write_moe_tables(moe_tables, {MIXTRAL_TABLE: table})
    with pytest.raises(PlanError, match="vLLM's tuned fused_moe tables changed"):
        check_fresh(expanded, load_engine("mixtral-8x7b-tp2-h100"), load_plan("vllm-0.25"))
    assert expand(load_plan("vllm-0.25"), load_engine("mixtral-8x7b-tp2-h100")).digest != expanded.digest


def fake_vllm(root) -> str:
    """A vllm package dir whose import would fail, with made-up tables where vLLM keeps its own."""
    package = root / "vllm"
    write_moe_tables(package.joinpath(*where.CONFIGS_IN_VLLM))
    (package / "__init__.py").write_text("raise RuntimeError('the planner imported vllm')\n")
    return str(package.joinpath(*where.CONFIGS_IN_VLLM))


def test_the_installed_vllms_tables_are_found_without_importing_it(tmp_path, monkeypatch):
    configs = fake_vllm(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("WARMUP_VLLM_MOE_CONFIGS", "")
    assert where.config_dirs() == ()                     # set but empty: none
    monkeypatch.delenv("WARMUP_VLLM_MOE_CONFIGS")
    assert where.config_dirs() == (configs,)
    monkeypatch.setenv("VLLM_TUNED_CONFIG_FOLDER", str(tmp_path / "mine"))
    assert where.config_dirs() == (str(tmp_path / "mine"), configs)   # vLLM's order
    monkeypatch.setenv("WARMUP_VLLM_MOE_CONFIGS", str(tmp_path / "nowhere"))
    with pytest.raises(PlanError, match="is not a directory"):
        where.config_dirs()
    assert "vllm" not in sys.modules


def test_the_plugin_plans_with_the_tables_of_the_vllm_it_runs_in(tmp_path, monkeypatch):
    """Inside vLLM (the plugin's make_plan), with nothing set, the running vLLM's tables are read."""
    from vllm_bridge.settings import Settings
    from vllm_bridge.warmup.worker_plan import make_plan

    fake_vllm(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("WARMUP_VLLM_MOE_CONFIGS")
    expanded = make_plan(Settings("vllm-0.25-plugin"), load_engine("mixtral-8x7b-tp2-h100"))
    (step,) = [s for s in expanded.steps if s.stage == "fused_moe"]
    assert [v.key for v in step.variants] == [l.key() for l in fused_moe_variants(MIXTRAL, 8192)]
    assert list(expanded.inputs["vllm_moe_config_tables"]) == [MIXTRAL_TABLE] and "vllm" not in sys.modules


def test_a_table_vllm_does_not_ship_gives_the_defaults(moe_tables):
    engine = load_engine("qwen3-30b-a3b-fp8-h100").data
    engine = {**engine, "device": {**engine["device"], "name": "H200"}}
    from planner.plan.stages.vllm_fused_moe import variants
    launches = variants(engine_facts(engine), 64, moe_tables_reader())
    assert shapes(engine_facts(engine)) == [MoeShape(128, 2048, 768, 8, "fp8_block", "H200")]
    assert launches == variants_with(MoeShape(128, 2048, 768, 8, "fp8_block", "H200"), 64, None)


def moe_tables_reader():
    return where.MoeTables()


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
def test_stage_in_every_release_plan(plan, engine, moe_tables):
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
    assert shapes(engine_facts({**engine, "parallel": par})) == []
    assert shapes(engine_facts({**engine, "device": {**engine["device"], "capability": "10.0"}})) == []
    assert shapes(engine_facts({**engine, "parallel": {**engine["parallel"], "enable_expert_parallel": True}})) == [QWEN]


# --- parity with each release's own code (WARMUP_VLLM_ENVS) ---------------------------------------------------

def release_paths() -> dict:
    """{version: sys.path} of the releases in WARMUP_VLLM_ENVS (`VERSION=PATH[:PATH...],...`)."""
    items = filter(None, os.environ.get("WARMUP_VLLM_ENVS", "").split(","))
    return dict(item.partition("=")[::2] for item in items)


def vllm_tables(paths: str) -> dict:
    """{MoeShape: that release's own table rows, or None} for the MoE engines' layers."""
    configs = os.path.join(paths.split(":")[0], "vllm", *where.CONFIGS_IN_VLLM)
    assert os.path.isdir(configs), configs
    source = TableDirs([configs])
    return {shape: source.table(shape) for shape in ENGINES.values()}


def planned_launches(tables: dict) -> list:
    return [l for shape in ENGINES.values() for l in variants_with(shape, 8192, tables[shape])]


def oracle_request(tables: dict) -> dict:
    cases = [{**shape.__dict__, "max_tokens": load_engine(name).data["scheduler"]["max_num_batched_tokens"]}
             for name, shape in ENGINES.items()]
    launches = [{**launch.spec(), "device": launch_device(launch)} for launch in planned_launches(tables)]
    return {"cases": cases, "launches": launches}


def launch_device(launch) -> str:
    (shape,) = [s for s in ENGINES.values() if (s.num_experts, s.intermediate) == (launch.num_experts,
                                                                                    launch.intermediate)]
    return shape.device


@pytest.fixture(scope="module", params=["0.25", "0.33"], name="facts")
def _facts(request):
    paths = release_paths().get(request.param)
    if paths is None:
        pytest.skip(f"WARMUP_VLLM_ENVS has no {request.param} release (tests/integration/vllm_parity/setup_vllm.sh)")
    tables = vllm_tables(paths)
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    oracle = os.path.join(tests, "integration", "vllm_parity", "fused_moe_oracle.py")
    env = {**os.environ, "PYTHONPATH": paths, "VLLM_LOGGING_LEVEL": "ERROR"}
    env.pop("TRITON_INTERPRET", None)
    env.pop("VLLM_TUNED_CONFIG_FOLDER", None)
    run = subprocess.run([sys.executable, oracle], input=json.dumps(oracle_request(tables)), capture_output=True,
                         text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout)
    assert facts["version"].startswith(request.param)
    return {**facts, "tables": tables, "paths": paths}


def test_parity_declaration(facts):
    declared = facts["declaration"]
    names = [n for n in declared["arg_names"] if n != "USE_TD"]   # 0.33's, False by default
    assert names == list(moe.POINTERS + moe.INTS + moe.CONSTEXPRS)
    assert declared["do_not_specialize"] == declared["do_not_specialize_on_alignment"] == []


def test_parity_config_for_every_token_count(facts):
    """Our choice from the release's own tables (read where it keeps them) is its own choice."""
    assert facts["tables"][MIXTRAL] and facts["tables"][DSV3] and facts["tables"][QWEN] is None
    for (name, shape), theirs in zip(ENGINES.items(), facts["configs"]):
        table = facts["tables"][shape]
        ours = [[choose_config(m, shape.num_experts, shape.quant, table).get(key) for key in moe.CONFIG_KEYS]
                for m in range(1, len(theirs) + 1)]
        assert ours == theirs, name


def test_parity_the_plan_reads_the_releases_configs_dir(facts, monkeypatch):
    """The plan made with WARMUP_VLLM_MOE_CONFIGS at the release's configs dir plans exactly the
    launches checked below, and records the tables it read."""
    configs = os.path.join(facts["paths"].split(":")[0], "vllm", *where.CONFIGS_IN_VLLM)
    monkeypatch.setenv("WARMUP_VLLM_MOE_CONFIGS", configs)
    for name, shape in ENGINES.items():
        expanded = expand(load_plan("vllm-0.25"), load_engine(name))
        (step,) = [s for s in expanded.steps if s.stage == "fused_moe"]
        assert [v.first for v in step.variants] == variants_with(shape, 8192, facts["tables"][shape])
        assert (list(expanded.inputs["vllm_moe_config_tables"].values())[0] is None) == (shape == QWEN)


SHORT = {"float8_e4m3fn": "fp8e4nv", "bfloat16": "bf16", "float32": "fp32", "int32": "i32"}


def test_parity_every_planned_launch(facts):
    """The key of each launch vLLM's launcher makes for a planned variant's GEMM and token count,
    read from its arguments, is the planned key."""
    launches = planned_launches(facts["tables"])
    assert len(launches) == len(facts["launches"])
    for launch, seen in zip(launches, facts["launches"]):
        dtypes = {p: SHORT[seen[p]["dtype"]] if seen[p] else None for p in moe.POINTERS}
        key = compile_key(launch.gemm, dtypes, {n: seen[n] for n in moe.INTS},
                          {n: seen[n] for n in moe.CONSTEXPRS},
                          {"num_warps": seen["num_warps"], "num_stages": seen["num_stages"]})
        assert key == launch.key(), launch


def test_one_expert_aliases_one_expert_with_the_real_layers_specialization():
    """The fused_moe runner's weights: E experts at the memory of one (the first GPU run failed
    building them with the full strides), and Triton specializes the expert stride as it does the
    real layer's (a multiple of 16, 32-bit)."""
    torch = pytest.importorskip("torch")
    from vllm_bridge.kernels.triton import one_expert

    w = one_expert((128, 1536, 2048), torch.uint8, "cpu")
    assert w.shape == (128, 1536, 2048) and w.stride() == (0, 2048, 1)
    assert w.untyped_storage().nbytes() == 1536 * 2048
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.nvidia.compiler import CUDABackend
    except ImportError:
        return
    assert native_specialize_impl(CUDABackend, w.stride(0), False, True, True) == \
        native_specialize_impl(CUDABackend, 1536 * 2048, False, True, True)
