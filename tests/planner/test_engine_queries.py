"""planner/engine/queries.py: the one place that says which layers are block FP8 and what their
GEMM shapes are, asked of the engine record (planner.engine.facts.EngineFacts). Each caller must
still compute what it computed before the queries existed (the `old_*` functions below are those
computations over the engine dict, copied from before issue 26), on every shipped engine and on one
engine of every quantization edge; and no module outside planner/engine/facts.py's quant_of (and
planner/engine/hf/, which reads Hugging Face's config) reads the quantization of a layer itself."""

from __future__ import annotations

import copy
import glob
import os
import re

import pytest

from planner.engine.config import load_engine
from planner.engine.facts import engine_facts
from planner.engine.facts import Quant, quant_of
from planner.engine.queries import block_fp8_linears, block_fp8_moes
from planner.engine.vllm_choices import default_linear_kernel
from planner.plan.stages import autotune, deep_gemm, triton_gemm, vllm_fused_moe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINES = sorted(glob.glob(os.path.join(ROOT, "plans", "engines", "*.yaml"))
                 + glob.glob(os.path.join(ROOT, "tests", "fixtures", "engines", "*.yaml")))

# Every quantization the schema allows, and the edges the old tests treated differently
# (an FP8 weight without blocks, other block sizes, a non-square block, int8 blocks).
EDGE_QUANTS = [None, {"method": "none"}, {"method": "fp8"}, {"method": "fp8_per_tensor"},
               {"method": "fp8", "weight_block_size": [128, 128]}, {"method": "fp8", "weight_block_size": [64, 64]},
               {"method": "fp8", "weight_block_size": [1, 128]}, {"method": "fp8", "weight_block_size": [128, 64]},
               {"method": "int8", "weight_block_size": [128, 128]}, {"method": "nvfp4"}, {"method": "mxfp4"}]


def edge_engine() -> dict:
    """The Qwen3 engine with one linear and one MoE layer of each quantization of EDGE_QUANTS."""
    data = copy.deepcopy(load_engine(os.path.join(ROOT, "plans", "engines", "qwen3-30b-a3b-fp8-h100.yaml")).data)
    linear, moe = data["model"]["linear"], data["model"]["moe"]
    for i, quant in enumerate(EDGE_QUANTS):
        for n, k in ((4096, 2048), (2112, 7168), (4096, 1000), (256, 7168)):
            layer = {"name": f"edge{i}-{n}-{k}", "n": n, "k": k, "count": 1}
            linear.append(layer if quant is None else {**layer, "quant": quant})
        layer = {"name": f"experts{i}", "num_experts": 64, "top_k": 4, "hidden_size": 2048,
                 "intermediate_size": 1000 + 128 * i, "count": 1}
        moe.append(layer if quant is None else {**layer, "quant": quant})
    return data


def engines() -> list:
    return [load_engine(path).data for path in ENGINES] + [edge_engine()]


ENGINE_IDS = [os.path.basename(path) for path in ENGINES] + ["edges"]


# --- the computations before the queries, verbatim but for names ------------------------------

def old_is_block_fp8(layer, block):  # planner/plan/stages/deep_gemm.py
    quant = layer.get("quant") or {}
    return quant.get("method") == "fp8" and quant.get("weight_block_size") == [block, block]


def old_dense_shapes(engine, block, n_multiple=None, kernels=None):  # planner/plan/stages/deep_gemm.py
    n_multiple = n_multiple or block
    shapes = {}
    for layer in engine["model"]["linear"]:
        if kernels is not None and layer.get("kernel") not in kernels:
            continue
        if old_is_block_fp8(layer, block) and layer["n"] % n_multiple == 0 and layer["k"] % block == 0:
            shapes.setdefault((layer["n"], layer["k"]), []).append(layer["name"])
    return shapes


def old_moe_weights(engine, block):  # planner/plan/stages/deep_gemm.py
    weights = {}
    for moe in engine["model"]["moe"]:
        if not old_is_block_fp8(moe, block):
            continue
        e, h, i = moe["num_experts"], moe["hidden_size"], moe["intermediate_size"]
        for weight, n, k in (("w13", 2 * i, h), ("w2", h, i)):
            if weight == "w13" and h % block:  # issue 37: a hidden size no kernel takes is planned around
                continue
            entry = weights.setdefault((weight, e, n, k, moe["top_k"]), (max(2 * i, h), []))
            entry[1].append(moe["name"])
    return weights


def old_triton_dense_shapes(engine):  # planner/plan/stages/triton_gemm.py, dense_steps
    shapes = {}
    for layer in engine["model"]["linear"]:
        if old_is_block_fp8(layer, 128) and layer["k"] % 128 == 0:
            shapes.setdefault((layer["n"], layer["k"]), []).append(layer["name"])
    return shapes


def old_triton_moes(engine):  # planner/plan/stages/triton_gemm.py, grouped_steps' loop
    out = []
    for moe in engine["model"]["moe"]:
        if not old_is_block_fp8(moe, 128):
            continue
        e, h, i, top_k = moe["num_experts"], moe["hidden_size"], moe["intermediate_size"], moe["top_k"]
        out.append((moe["name"], e, top_k, (("w13", 2 * i, h), ("w2", h, i))))
    return out


def old_gemm_shapes(engine):  # planner/plan/stages/autotune.py
    seen = {}
    for layer in engine["model"]["linear"]:
        if old_is_block_fp8(layer, 128) and layer["k"] % 128 == 0:  # issue 37: another K is planned around
            seen.setdefault((layer["n"], layer["k"]), None)
    return list(seen)


def old_fused_moe_kind(layer):  # planner/plan/stages/vllm_fused_moe.py, layer_shape
    quant = layer.get("quant") or {"method": "none"}
    if quant["method"] == "fp8" and list(quant.get("weight_block_size") or ()) == [128, 128]:
        return "fp8_block"
    return "none" if quant["method"] == "none" else None


def old_default_linear_kernel(layer, dtype, capability, flashinfer=True):  # planner/engine/vllm_choices.py
    quant = layer.get("quant") or {}
    block = quant.get("weight_block_size")
    if quant.get("method") != "fp8" or not block:
        return None
    major, minor = (int(x) for x in capability.split("."))
    sm = major * 10 + minor
    deep_gemm_shape = (block == [128, 128] and dtype == "bfloat16" and layer["n"] % 64 == 0
                       and layer["k"] % 128 == 0)
    if deep_gemm_shape and sm == 90 and flashinfer:
        return "flashinfer_deep_gemm"
    if deep_gemm_shape and (sm == 90 or major in (10, 12)):
        return "deep_gemm"
    if sm >= 90 and block[1] == 128:
        return "cutlass"
    return "marlin" if sm < 89 else "triton"


def old_runner_is_block_fp8(layer):  # executor/runner/model.py
    quant = (layer or {}).get("quant", {})
    return quant.get("method") == "fp8" and list(quant.get("weight_block_size", [128, 128])) == [128, 128]


def old_fp8_linear_shapes(engine):  # executor/backends/flashinfer.py
    seen = {}
    for layer in engine["model"]["linear"]:
        quant = layer.get("quant") or {}
        if str(quant.get("method", "none")).startswith("fp8"):
            seen.setdefault((int(layer["n"]), int(layer["k"])), None)
    return list(seen)


def old_bridge_kernels(data, choose):  # vllm_bridge/engine/from_vllm.py, _apply_linear_kernels
    chosen = {}
    for layer in data["model"]["linear"]:
        quant = layer.get("quant") or {}
        block = quant.get("weight_block_size")
        if quant.get("method") != "fp8" or not block:
            continue
        key = (layer["n"], layer["k"], tuple(block))
        if key not in chosen:
            chosen[key] = choose(None, (layer["n"], layer["k"]), block)
        layer["kernel"] = chosen[key]


# --- each caller against its old computation ----------------------------------------------------

@pytest.mark.parametrize("engine", engines(), ids=ENGINE_IDS)
def test_planner_stages_compute_what_they_did(engine):
    facts = engine_facts(engine)  # the stages ask the record; the old computations read the dict
    for block in (64, 128):
        assert deep_gemm.moe_weights(facts, block) == old_moe_weights(engine, block)
        for n_multiple in (None, 64, 128):
            for kernels in (None, ("deep_gemm",), ("deep_gemm", "flashinfer_deep_gemm"), ()):
                assert (deep_gemm.dense_shapes(facts, block, n_multiple, kernels)
                        == old_dense_shapes(engine, block, n_multiple, kernels))
    assert triton_gemm.dense_shapes(facts) == old_triton_dense_shapes(engine)
    assert [(m.name, m.num_experts, m.top_k, m.weights) for m in block_fp8_moes(facts)] == old_triton_moes(engine)
    assert autotune.gemm_shapes(facts) == old_gemm_shapes(engine)
    for layer, record in zip(engine["model"]["moe"], facts.model.moe):
        shape = vllm_fused_moe.layer_shape(record, "NVIDIA H100 80GB HBM3")
        assert (shape and shape.quant) == old_fused_moe_kind(layer)


@pytest.mark.parametrize("engine", engines(), ids=ENGINE_IDS)
def test_vllm_choices_compute_what_they_did(engine):
    for layer in engine["model"]["linear"]:
        for dtype in ("bfloat16", "float16"):
            for capability in ("8.0", "8.9", "9.0", "10.0", "12.0"):
                for flashinfer in (True, False):
                    assert (default_linear_kernel(layer, dtype, capability, flashinfer)
                            == old_default_linear_kernel(layer, dtype, capability, flashinfer))


@pytest.mark.parametrize("engine", engines(), ids=ENGINE_IDS)
def test_executor_and_bridge_compute_what_they_did(engine, monkeypatch):
    pytest.importorskip("torch")  # the reference runner's module imports torch
    from executor.backends import flashinfer
    from executor.runner import model
    from vllm_bridge.engine import from_vllm as bridge

    facts = engine_facts(engine)
    pairs = zip(engine["model"]["linear"] + engine["model"]["moe"] + [None],
                facts.model.linear + facts.model.moe + (None,))
    for layer, record in pairs:
        assert model._is_block_fp8(record) == old_runner_is_block_fp8(layer)
    assert flashinfer.fp8_shapes(facts.model.linear) == old_fp8_linear_shapes(engine)

    def choose(_config, shape, block):  # vLLM's answer stands in as what it was asked
        return f"{shape}-{block!r}"
    monkeypatch.setattr(bridge, "fp8_linear_kernel", choose)
    new, old = copy.deepcopy(engine), copy.deepcopy(engine)
    bridge._apply_linear_kernels(new, None)
    old_bridge_kernels(old, choose)
    assert new == old


def test_the_typed_answers():
    engine = engine_facts(edge_engine())
    assert quant_of({"name": "x"}) == Quant("none", None)
    assert quant_of({"quant": {"method": "fp8", "weight_block_size": [1, 128]}}) == Quant("fp8", (1, 128))
    qkv = block_fp8_linears(engine)[0]
    assert (qkv.name, qkv.n, qkv.k, qkv.kernel) == ("qkv_proj", 5120, 2048, "flashinfer_deep_gemm")
    experts = block_fp8_moes(engine)[0]
    assert experts.weights == (("w13", 1536, 2048), ("w2", 2048, 768)) and experts.relax_n == 2048


# --- one place -------------------------------------------------------------------------------

# Reading a layer's quantization (its `quant`, or the block size in it) is the block-FP8 test
# written again; planner/engine/hf/ writes `quant` from Hugging Face's quantization_config (quantization.py,
# the entries that count it: entries.py, a weight's bytes: memory.py), and reads Hugging Face's own
# weight_block_size there.
READS_QUANT = re.compile(r"""(\.get\(\s*|\[\s*)["'](weight_block_size|quant)["']""")
MAY_READ = {"planner/engine/facts.py", "planner/engine/hf/quantization.py", "planner/engine/hf/entries.py",
            "planner/engine/hf/memory.py"}
# kernel_model's launch specs have a `quant` of their own (the kernel's, not a layer's).
FLOORS = ("bench", "vllm_bridge", "executor", "planner")


def test_only_the_queries_read_a_layers_quantization():
    found = []
    for floor in FLOORS:
        for path in glob.glob(os.path.join(ROOT, floor, "**", "*.py"), recursive=True):
            name = os.path.relpath(path, ROOT).replace(os.sep, "/")
            if name in MAY_READ:
                continue
            with open(path, encoding="utf-8") as f:
                found += [f"{name}:{i}: {line.strip()}" for i, line in enumerate(f, 1) if READS_QUANT.search(line)]
    assert found == [], "read the quantization from the engine record (planner/engine/facts.py):\n" + "\n".join(found)
