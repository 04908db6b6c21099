"""Test factories: engines and plans with defaults, overridden per test."""

from __future__ import annotations

import copy
import textwrap

from planner.engine.config import engine_from_document
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.yamlio import Document

BASE_ENGINE = {
    "name": "test-engine",
    "model": {
        "vocab_size": 32000, "max_model_len": 4096, "runner": "generate", "dtype": "bfloat16",
        "linear": [
            {"name": "qkv_proj", "n": 6144, "k": 4096, "count": 32,
             "quant": {"method": "fp8", "weight_block_size": [128, 128]}},
            {"name": "o_proj", "n": 4096, "k": 4096, "count": 32,
             "quant": {"method": "fp8", "weight_block_size": [128, 128]}},
        ],
        "moe": [],
        "attention": [{"name": "attn", "num_heads": 32, "num_kv_heads": 8, "head_size": 128, "count": 32}],
    },
    "kv_cache": {"num_blocks": 1000, "groups": [{"block_size": 16}]},
    "scheduler": {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
    "device": {"name": "H100", "num_sms": 132},
}


def merge(base: dict, overrides: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def make_engine(**overrides):
    """An Engine from BASE_ENGINE with nested overrides: make_engine(scheduler={"max_num_seqs": 1})."""
    return engine_from_document(Document(data=merge(BASE_ENGINE, overrides), file="<test engine>"))


def write_plan(tmp_path, text: str, name: str = "plan.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def steps_of(plan: str, engine, stage: str | None = None, kind: str | None = None) -> list:
    """The typed steps (planner.plan.steps) of a plan for an engine, of one stage and kind if given."""
    out = expand(load_plan(plan), engine).steps
    return [s for s in out if (stage is None or s.stage == stage) and (kind is None or s.kind == kind)]


def plain_steps_of(plan: str, engine, stage: str | None = None, kind: str | None = None) -> list[dict]:
    """The same steps in their plain form, as an expanded plan file holds them."""
    return [s.to_dict() for s in steps_of(plan, engine, stage, kind)]


# Made-up tuned fused_moe tables (not vLLM's numbers) for the MoE layers of the shipped engines
# that have one: Mixtral TP2 on H100 (bf16) and DeepSeek-V3 TP8 on H200 (block FP8). Qwen3's
# layer (E=128, N=768, H100) has none here: vLLM's default configs.
MADE_UP_MOE_TABLES = {
    "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json": {
        "triton_version": "0.0.0",
        "1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
              "num_stages": 2},
        "4": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 8, "num_warps": 4,
              "num_stages": 3},
        "100": {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 8,
                "num_stages": 4},
        "700": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 16},
    },
    "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json": {
        "2": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
              "num_stages": 5},
        "10": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 4, "num_warps": 4,
               "num_stages": 3},
        "300": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32, "num_warps": 8,
                "num_stages": 3},
    },
}


def write_moe_tables(folder, tables=None) -> str:
    """Write tuned fused_moe tables (default: MADE_UP_MOE_TABLES) into `folder`; return it."""
    import json
    import os

    os.makedirs(folder, exist_ok=True)
    for name, table in (MADE_UP_MOE_TABLES if tables is None else tables).items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump(table, f)
    return str(folder)
