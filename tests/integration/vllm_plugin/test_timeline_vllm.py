"""Issue 54 item 1: the start-up timeline through vLLM's own start-up on CPU (probe.py, `start_up`).

vLLM loads the plugin while it builds its EngineArgs, resolves the VllmConfig (timed by the plugin's
wrapper), the plugin patches vLLM's GPU Worker and its three methods run in the executor's order
(vLLM's own bodies stand in, since they need a GPU). The process is every role of an offline LLM
without multiprocessing: its one file holds the API server's marks and the worker's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.vllm_parity.test_parity import RELEASES
from tests.integration.vllm_plugin.test_step_aside import HERE, ROOT, Server

pytestmark = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")


@pytest.mark.parametrize("version", sorted(RELEASES) or ["none"])
def test_a_start_up_with_a_plan_writes_its_marks_in_order(version, tmp_path):
    server = Server(tmp_path, version)
    folder = tmp_path / "timeline"
    case = server.case("timeline", env={"WARMUP_TIMELINE": str(folder)})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, RELEASES[version]]), "VLLM_LOGGING_LEVEL": "ERROR",
           "VLLM_HAS_FLASHINFER_CUBIN": "1"}
    for key in [k for k in env if k.startswith(("WARMUP_PLAN", "WARMUP_TIMELINE", "WARMUP_PLANNER_"))]:
        env.pop(key)
    run = subprocess.run([sys.executable, os.path.join(HERE, "probe.py")],
                         input=json.dumps({"checks": ["start_up"], "cases": {"timeline": case}}),
                         capture_output=True, text=True, env=env, timeout=900, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout)["start_up"]["timeline"]
    assert facts["error"] is None and [level for level, _ in facts["lines"] if level == "WARNING"] == []
    [doc] = facts["timeline"]
    assert doc["role"] == "api_server" and doc["rank"] == 0 and doc["process_start_source"] == "/proc"
    beside = [(m["phase"], m["owner"]) for m in doc["marks"] if m.get("background")]
    # the plan ahead, a thread (its place in the list varies), where FlashInfer is installed (0.25's set here)
    ahead = [("plugin: plan ahead (FlashInfer's modules)", "plugin")]
    assert beside == (ahead if version == "0.25" else [])
    phases = [(m["phase"], m["owner"]) for m in doc["marks"] if not m.get("background")]
    assert phases == [("process start to plugin load", "vllm"), ("plugin: register", "plugin"),
                      ("engine config (arguments, model resolution)", "vllm"),
                      ("plugin: engine and plan", "plugin"), ("plugin: monitor and pool start", "plugin"),
                      ("load_model", "vllm"), ("plugin: live layers checked", "plugin"),
                      ("Worker.load_model", "vllm"), ("profile run", "vllm"),
                      ("Worker.determine_available_memory", "vllm"), ("warmup before the plan", "vllm"),
                      ("generic Triton variants", "plugin"),
                      ("Worker.compile_or_warm_up_model", "vllm"), ("ready", "vllm")], phases
    starts = [m["start"] for m in doc["marks"] if not m.get("background")]
    assert doc["process_start"] <= starts[1] and starts[-1] == max(m["end"] for m in doc["marks"])
