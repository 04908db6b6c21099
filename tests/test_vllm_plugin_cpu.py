"""The plugin's own logic without vLLM: settings, the version table, the stale-plan refusal."""

from __future__ import annotations

import os
from types import SimpleNamespace as NS

import pytest

from planner.api import expand, load_engine, load_plan
from planner.output import to_yaml
from planner.resources import engines_dir
from vllm_bridge.releases import RELEASES, UnsupportedVllm, release_for
from vllm_bridge.warmup import PluginError, Settings, WorkerWarmup, with_rank


def test_settings_from_env_inert_without_a_plan():
    assert Settings.from_env({}).plan is None
    s = Settings.from_env({"WARMUP_PLAN": "vllm-0.33", "WARMUP_JIT_LOG": "/t/jit.jsonl", "WARMUP_JOBS": "4"})
    assert (s.plan, s.jit_log, s.jobs, s.report) == ("vllm-0.33", "/t/jit.jsonl", 4, None)


def test_bad_jobs_is_one_line():
    with pytest.raises(PluginError, match="WARMUP_JOBS must be a whole number, got 'x'"):
        Settings.from_env({"WARMUP_PLAN": "p", "WARMUP_JOBS": "x"})


def test_version_table_names_a_built_in_plan_per_release():
    assert {v: r.plan for v, r in RELEASES.items()} == {"0.25.0": "vllm-0.25", "0.33.0": "vllm-0.33"}
    for release in RELEASES.values():
        load_plan(release.plan)  # exists and loads
    with pytest.raises(UnsupportedVllm) as e:
        release_for("0.30.1")
    assert "\n" not in str(e.value) and "vLLM 0.30.1 is installed" in str(e.value)


def test_rank_files():
    assert with_rank("/r/report.json", 0) == "/r/report.json"
    assert with_rank("/r/report.json", 3) == "/r/report.rank3.json"
    assert with_rank(None, 3) is None


def test_stale_saved_plan_is_refused_before_the_weights_load(tmp_path):
    saved = tmp_path / "plan.yaml"
    expanded = expand(load_plan("vllm-0.33"), load_engine("llama-3.1-8b-fp8-h100"))
    saved.write_text(to_yaml(expanded.to_dict()))
    worker = NS(vllm_config=None, rank=0, device="cpu")
    settings = Settings(str(saved), engine="qwen3-30b-a3b-fp8-h100")
    with pytest.raises(PluginError) as e:
        WorkerWarmup.prepare(worker, RELEASES["0.33.0"], settings)
    message = str(e.value)
    assert message.startswith("warmup-planner: ") and "stale plan" in message and "\n" not in message


def test_an_engine_config_as_plan_is_refused():
    worker = NS(vllm_config=None, rank=0, device="cpu")
    engine_file = os.path.join(engines_dir(), "llama-3.1-8b-fp8-h100.yaml")
    settings = Settings(engine_file, engine="llama-3.1-8b-fp8-h100")
    with pytest.raises(PluginError, match="WARMUP_PLAN names a plan, not an engine config"):
        WorkerWarmup.prepare(worker, RELEASES["0.33.0"], settings)
