"""The vLLM plugin against each installed vLLM release, on CPU (tests/integration/vllm_plugin/probe.py).

Like the parity tests: WARMUP_VLLM_ENVS (tests/integration/vllm_parity/setup_vllm.sh) names the releases, one
subprocess per release; without it these tests skip. The probe returns what vLLM's loader and
the recording worker saw; here it is compared with the plan, step by step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from planner.api import expand, load_engine, load_plan
from planner.plan.steps import Autotune, Cleanup, CudaGraph, Decode, Prefill, Sample
from tests.integration.vllm_parity.test_parity import RELEASES

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
ENGINE = "llama-3.1-8b-fp8-h100"
CHECKS = ["version", "entry_point", "patch", "runner", "redirect"]
pytestmark = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")


@pytest.fixture(scope="module", params=sorted(RELEASES) or ["none"])
def probe(request):
    version = request.param
    payload = {"checks": CHECKS, "plan": f"vllm-{version}", "engine": ENGINE}
    env = {**os.environ, "PYTHONPATH": RELEASES[version], "VLLM_LOGGING_LEVEL": "ERROR"}
    env.pop("WARMUP_PLAN", None)
    run = subprocess.run([sys.executable, os.path.join(HERE, "probe.py")], input=json.dumps(payload),
                         capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout)
    assert facts["version"].startswith(version)
    return version, facts


def test_the_plugins_engine_is_warmup_engine_from_vllm(tmp_path):
    """Issue 17: in a worker the plugin derives the engine config with `--from-vllm`'s own code;
    for the same `vllm serve` arguments the two agree field for field (the CLI adds only its
    provenance to the description)."""
    from planner.yamlio import load_file

    model = tmp_path / "llama"
    model.mkdir()
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "hf", "llama-3.1-8b-instruct-fp8-block.json"),
                model / "config.json")
    serve_args = [str(model), "--max-model-len", "8192", "--num-gpu-blocks-override", "4096"]
    for version in sorted(RELEASES):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, RELEASES[version]]), "VLLM_LOGGING_LEVEL": "ERROR",
               "VLLM_HAS_FLASHINFER_CUBIN": "1"}  # flashinfer-cubin, which vLLM's wheel brings (setup_vllm.sh)
        env.pop("WARMUP_PLAN", None)
        payload = {"checks": ["derived_engine"], "plan": f"vllm-{version}", "serve_args": serve_args}
        run = subprocess.run([sys.executable, os.path.join(HERE, "probe.py")], input=json.dumps(payload),
                             capture_output=True, text=True, env=env, timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
        plugin = json.loads(run.stdout)["derived_engine"]
        target = tmp_path / f"from-vllm-{version}.yaml"
        cli = subprocess.run([sys.executable, "-m", "planner.cli", "engine", "--from-vllm", "-o", str(target),
                              "--", *serve_args], capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
        assert cli.returncode == 0, cli.stderr[-3000:]
        written = dict(load_file(str(target)).data)
        assert written.pop("description").endswith(plugin.pop("description"))
        assert written == plugin and plugin["model"]["linear"], version


def test_entry_point_loads_through_vllm_and_is_inert_without_a_plan(probe):
    _, facts = probe
    assert facts["entry_point"] == {"listed": ["vllm_bridge.plugin:register"], "loaded": True, "inert": True}


def test_plan_patches_this_releases_worker_once(probe):
    _, facts = probe
    assert facts["patch"] == {"patched": True, "idempotent": True, "restored": True,
                              "names": ["load_model", "determine_available_memory", "compile_or_warm_up_model"]}


def test_register_leaves_the_worker_module_to_the_process_that_imports_it():
    """vLLM's API server process loads the plugin too and never imports the GPU worker: register
    must not import it there (2-3 s on the H100, bench/RESULTS.md part Y), and the engine core's
    own import patches it."""
    for version in sorted(RELEASES):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, RELEASES[version]]), "VLLM_LOGGING_LEVEL": "ERROR"}
        env.pop("WARMUP_PLAN", None)
        payload = {"checks": ["lazy"], "plan": f"vllm-{version}", "engine": ENGINE}
        run = subprocess.run([sys.executable, os.path.join(HERE, "probe.py")], input=json.dumps(payload),
                             capture_output=True, text=True, env=env, timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
        assert json.loads(run.stdout)["lazy"] == {"imported_before": False, "imported_by_register": False,
                                                  "patched_on_import": True}, version


# An unsupported vLLM: tests/integration/vllm_plugin/test_step_aside.py (the plugin steps aside; strict: one line).


def expected_calls(steps) -> list[dict]:
    """What the recording worker must have received, from the plan's steps."""
    out, last_ids = [], []
    for step in steps:
        if isinstance(step, Prefill):
            last_ids = [r.req_id for r in step.requests]
            out.append({"kind": "execute_model", "num_scheduled_tokens": {r.req_id: r.num_scheduled_tokens
                                                                          for r in step.requests},
                        "total": step.total_num_scheduled_tokens,
                        "new": [[r.req_id, [list(b) for b in r.block_ids], list(step.prompt_token_ids)]
                                for r in step.requests]})
        elif isinstance(step, Decode):
            last_ids = [r.req_id for r in step.requests]
            out.append({"kind": "execute_model", "num_scheduled_tokens": {r.req_id: r.num_scheduled_tokens
                                                                          for r in step.requests},
                        "total": step.total_num_scheduled_tokens,
                        "cached": [[r.req_id, r.num_computed_tokens,
                                    None if r.new_block_ids is None else [list(b) for b in r.new_block_ids]]
                                   for r in step.requests],
                        "spec": {r.req_id: [0] * r.num_spec_tokens for r in step.requests if r.num_spec_tokens}})
        elif isinstance(step, Cleanup):
            out.append({"kind": "execute_model", "finished": sorted(step.finished_req_ids)})
        elif isinstance(step, Sample):
            g = step.grammar_bitmask
            out.append({"kind": "sample_tokens",
                        "grammar": None if g is None else [last_ids, [g.num_rows, g.width], -1 if g.fill is None
                                                           else g.fill]})
    return out


def received(calls) -> list[dict]:
    """The same facts read from vLLM's objects as the recording worker got them."""
    out = []
    for c in calls:
        if c["kind"] == "sample_tokens":
            out.append({"kind": "sample_tokens", "grammar": c["grammar"]})
            continue
        assert c["class"] == "vllm.v1.core.sched.output.SchedulerOutput"
        if c["finished_req_ids"]:
            out.append({"kind": "execute_model", "finished": c["finished_req_ids"]})
            continue
        fact = {"kind": "execute_model", "num_scheduled_tokens": c["num_scheduled_tokens"],
                "total": c["total_num_scheduled_tokens"]}
        if c["new"]:
            assert {r["class"] for r in c["new"]} == {"NewRequestData"}
            fact["new"] = [[r["req_id"], r["block_ids"], r["prompt_token_ids"]] for r in c["new"]]
        else:
            cached = c["cached"]
            assert cached["class"] == "CachedRequestData"
            fact["cached"] = [list(x) for x in zip(cached["req_ids"], cached["num_computed_tokens"],
                                                   cached["new_block_ids"])]
            fact["spec"] = c["scheduled_spec_decode_tokens"]
        out.append(fact)
    return out


def test_runner_hands_vllm_the_plans_batches_exactly(probe):
    version, facts = probe
    steps = expand(load_plan(f"vllm-{version}"), load_engine(ENGINE)).steps
    got = facts["runner"]
    assert received(got["calls"]) == expected_calls(steps)
    graphs = [s for s in steps if isinstance(s, CudaGraph)]
    assert [c for c in got["captures"] if not is_kv(c)] == [sorted(set(graphs[0].sizes))]
    # The KV connector is off for each stage of batches and back on after (warmup_scope).
    flags = [c[1] for c in got["captures"] if is_kv(c)]
    assert flags and flags == [True, False] * (len(flags) // 2)
    # FlashInfer's autotune is vLLM's kernel_warmup's: the executor does not run it here.
    assert not any(step_id in got["statuses"] for step_id in (s.id for s in steps if isinstance(s, Autotune)))
    assert all(got["statuses"][s.id] == "ok" for s in steps if hasattr(s, "runner_method"))


def is_kv(record) -> bool:
    return bool(record) and record[0] == "kv_connector_disabled"


def test_sampling_params_reach_vllm_with_the_plan_temperature(probe):
    version, facts = probe
    temps = {r["temperature"] for c in facts["runner"]["calls"] if c["kind"] == "execute_model" for r in c["new"]}
    steps = expand(load_plan(f"vllm-{version}"), load_engine(ENGINE)).steps
    planned = {s.sampling_params.get("temperature", 1.0) for s in steps if isinstance(s, Sample)}
    assert temps == planned


def test_compile_or_warm_up_model_runs_the_plan_in_place_of_what_it_models(probe):
    _, facts = probe
    r = facts["redirect"]
    assert r["seen"] == [{"deep_gemm_warmup_is_vllms": False, "plan_ran_before": 0}]  # vLLM's, DeepGEMM off
    assert r["captures"] == 1 and r["result"] == [12345]      # capture_model answered from the plan's capture
    assert r["batches"] == r["plan_batches"] > 0              # warmup_kernels added none
    assert r["restored"]
