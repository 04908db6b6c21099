"""Expanded-plan output: lossless YAML compression, JSON, table, determinism, digests."""

import os
import json
import random
import subprocess
import sys

import pytest
import yaml
from factories import make_engine, write_plan

from planner.cli import main
from planner.engine.config import load_engine
from planner.plan.authored import load_plan
from planner.plan.expand import expand
from planner.plan.expanded import ExpandedPlan
from planner.render import to_json, to_table, to_yaml
from planner.yamlio import compress_runs, decompress, expand_runs


@pytest.mark.parametrize("values,compressed", [
    ([1, 2, 3, 4], ["1..4"]),
    ([1, 2, 3], [1, 2, 3]),
    ([128, 256, 384, 512, 513], ["128..512/128", 513]),
    ([1, 2, 4, 8, 16, 24, 32, 40], [1, 2, 4, "8..40/8"]),
    ([5, 5, 5, 5], [5, 5, 5, 5]),
    ([], []),
])
def test_compress_runs(values, compressed):
    assert compress_runs(values) == compressed
    assert expand_runs(compressed) == values


def test_compression_round_trips_random_lists():
    rng = random.Random(0)
    for _ in range(500):
        values = sorted(rng.sample(range(1, 300), rng.randint(0, 120)))
        assert expand_runs(compress_runs(values)) == values


def expanded(plan="vllm-head", engine="deepseek-v3-fp8-tp8-h200"):
    return expand(load_plan(plan), load_engine(engine))


@pytest.mark.parametrize("engine", ["deepseek-v3-fp8-tp8-h200", "qwen3-30b-a3b-fp8-h100"])
def test_yaml_is_lossless(engine):
    typed = expanded(engine=engine)
    plan = typed.to_dict()
    assert decompress(yaml.safe_load(to_yaml(plan))) == json.loads(to_json(plan)) == plan
    assert ExpandedPlan.from_dict(decompress(yaml.safe_load(to_yaml(plan)))) == typed  # and the typed steps


def test_float_and_string_scalars_round_trip():
    plan = {"format": "x", "values": {"a": 1e-05, "b": 0.1352337788608801, "c": "yes", "d": "a: b",
                                      "e": "", "f": "null", "g": "8..16"}, "steps": []}
    assert yaml.safe_load(to_yaml(plan)) == plan


def test_output_is_deterministic(tmp_path):
    for fmt in ("yaml", "json", "table"):
        paths = [tmp_path / f"{fmt}{i}" for i in range(2)]
        for p in paths:
            assert main(["plan", "vllm-head", "--engine", "qwen3-30b-a3b-fp8-h100", "-f", fmt, "-o", str(p)]) == 0
        assert paths[0].read_bytes() == paths[1].read_bytes()


def test_digest_tracks_exactly_the_shaping_inputs(tmp_path):
    base = expand(load_plan("vllm"), make_engine())
    renamed = expand(load_plan("vllm"), make_engine(name="other-name", description="cosmetic"))
    assert renamed.digest == base.digest
    more_seqs = expand(load_plan("vllm"), make_engine(scheduler={"max_num_seqs": 128}))
    assert more_seqs.inputs["engine"] != base.inputs["engine"]
    assert more_seqs.inputs["plan"] == base.inputs["plan"] and more_seqs.digest != base.digest
    override = write_plan(tmp_path, "name: v\nextends: vllm\nstages: [{name: deep_gemm, with: {mode: full}}]\n")
    changed = expand(load_plan(override), make_engine())
    assert changed.inputs["plan"] != base.inputs["plan"]
    assert changed.inputs["engine"] == base.inputs["engine"]


def test_header_and_summary():
    plan = expanded().to_dict()
    assert plan["format"] == "warmup-expanded-plan/v2" and plan["plan"] == "vllm-head"
    assert plan["engine"] == "deepseek-v3-fp8-tp8-h200" and plan["digest"].startswith("sha256:")
    s = plan["summary"]
    assert s["steps"] == len(plan["steps"]) == sum(s["steps_by_kind"].values())
    assert s["gemm_calls"] == sum(len(x["m_values"]) for x in plan["steps"] if "m_values" in x)
    assert s["requests"] == 1024
    ids = [x["id"] for x in plan["steps"]]
    assert len(ids) == len(set(ids)) and all(i.startswith(x["stage"] + "/") for i, x in zip(ids, plan["steps"]))


def test_table_summarises():
    plan = expanded()
    text = to_table(plan)
    assert "Plan vllm-head for engine deepseek-v3-fp8-tp8-h200" in text
    assert "warmup_kernels       prefill" in text and "1024 requests" in text
    s = plan.summary
    assert text.strip().splitlines()[-1].startswith(
        f"Totals: {s['steps']} steps; 1024 requests, {s['scheduled_tokens']} scheduled tokens; "
        f"{s['gemm_calls']} GEMM calls over {s['gemm_shapes']} shapes")


def test_expanded_plan_validates_against_its_schema():
    import jsonschema

    from planner.schema import load_schema

    for plan in ("vllm", "vllm-head"):
        jsonschema.validate(json.loads(to_json(expanded(plan).to_dict())), load_schema("expanded-plan"))


def test_write_atomic_gives_the_mode_a_plain_open_would(tmp_path):
    """mkstemp makes 0600 files: tables and plans are read by other users' processes."""
    import stat

    from planner.output import write_atomic

    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "table.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "table.json").st_mode) == 0o644
    assert (tmp_path / "table.json").read_text() == "{}\n"


def test_writing_yaml_does_not_import_pyyaml():
    """The writer is pure stdlib: executor workers import planner.output (write_atomic)."""
    code = ("import sys\nfrom planner.render import to_yaml\nfrom planner.engine.hf import engine_to_yaml\n"
            "to_yaml({'steps': [{'m_values': [1, 2, 3, 4]}]}); engine_to_yaml({'a': [{'b': 1}]})\n"
            "print('yaml' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
