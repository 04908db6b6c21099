"""Test factories: engines and plans with defaults, overridden per test."""

from __future__ import annotations

import copy
import textwrap

from planner.engine import engine_from_document
from planner.expand import expand
from planner.plan import load_plan
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
    """The typed steps (planner.steps) of a plan for an engine, of one stage and kind if given."""
    out = expand(load_plan(plan), engine).steps
    return [s for s in out if (stage is None or s.stage == stage) and (kind is None or s.kind == kind)]


def plain_steps_of(plan: str, engine, stage: str | None = None, kind: str | None = None) -> list[dict]:
    """The same steps in their plain form, as an expanded plan file holds them."""
    return [s.to_dict() for s in steps_of(plan, engine, stage, kind)]
