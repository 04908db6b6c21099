"""Issue 47 through vLLM's own start-up on CPU (probe.py, `start_up`): WARMUP_BUNDLE=oci://... with the
CNCF registry on loopback. vLLM loads the plugin, which pins the tag to its digest in one line and pulls
the node's copy; the engine core vLLM starts from that process finds the copy (no second pull). A
registry that is not there is one warning line, and every method of vLLM's runs as without the plugin.
(The bundle's fingerprint is an H200's: the install itself is then refused in its own line, which is the
install's business, tested elsewhere; what is checked here is the registry's part.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.executor.registry_server import RegistryServer, free_port
from tests.integration.vllm_parity.test_parity import RELEASES
from tests.integration.vllm_plugin.test_step_aside import HERE, ROOT, STOCK, llama_config

pytestmark = pytest.mark.skipif(not RELEASES, reason="WARMUP_VLLM_ENVS not set (tests/integration/vllm_parity/setup_vllm.sh)")


def push_a_bundle(tmp_path, address: str) -> str:
    sys.path.insert(0, os.path.join(ROOT, "tests", "executor"))
    try:
        from test_bundle_oci import make_bundle, push
    finally:
        sys.path.pop(0)
    make_bundle(tmp_path / "b.warmup")
    return str(push(tmp_path / "b.warmup", f"oci://{address}/warmup/llama:v1").reference)


@pytest.fixture(scope="module", params=sorted(RELEASES) or ["none"])
def started(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"oci-{request.param}")
    registry = RegistryServer(str(root / "registry")).start()
    pinned = push_a_bundle(root, registry.address)
    (root / "llama").mkdir()
    (root / "llama" / "config.json").write_text(json.dumps(llama_config()))
    args = [str(root / "llama"), "--max-model-len", "2048", "--num-gpu-blocks-override", "4096"]

    def case(name: str, bundle: str) -> dict:
        return {"serve_args": args, "child": True,
                "env": {"WARMUP_BUNDLE": bundle, "VLLM_CACHE_ROOT": str(root / name / "vllm")}}

    cases = {"pulled": case("pulled", f"oci://{registry.address}/warmup/llama:v1"),
             "down": case("down", f"oci://127.0.0.1:{free_port()}/warmup/llama:v1")}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, RELEASES[request.param]]),
           "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_HAS_FLASHINFER_CUBIN": "1"}
    for key in [k for k in env if k.startswith("WARMUP_") and k != "WARMUP_VLLM_ENVS"]:
        env.pop(key)
    try:
        run = subprocess.run([sys.executable, os.path.join(HERE, "probe.py")],
                             input=json.dumps({"checks": ["start_up"], "cases": cases}),
                             capture_output=True, text=True, env=env, timeout=900, check=False)
    finally:
        registry.kill()
    assert run.returncode == 0, run.stderr[-3000:]
    return root, pinned, registry.address, json.loads(run.stdout)["start_up"]


def messages(facts: dict, levels=("INFO", "WARNING", "ERROR")) -> list[str]:
    return [text for level, text in facts["lines"] if level in levels]


def test_the_tag_is_pinned_in_one_line_and_the_node_copy_pulled_once(started):
    root, pinned, address, facts = started
    pulled = facts["pulled"]
    assert pulled["error"] is None and pulled["stock"] == STOCK
    lines = messages(pulled)
    digest = pinned.rsplit("@", 1)[1]
    [pinned_line] = [line for line in lines if f" is {digest} (the registry answered in " in line]
    assert pinned_line.startswith(f"warmup-planner: bundle oci://{address}/warmup/llama:v1 is {digest} ")
    assert pinned_line.endswith("; the node's copy is fetched in the background")
    copy = root / "pulled" / "vllm" / "warmup_bundles" / "oci" / f"{digest.replace(':', '-')}.bundle"
    assert [line for line in lines if " pulled to " in line] == [
        line for line in lines if line.startswith(f"warmup-planner: bundle {pinned} pulled to {copy} (")]
    assert len([line for line in lines if " pulled to " in line]) == 1
    assert copy.read_bytes() == (root / "b.warmup").read_bytes()
    assert not [line for line in lines if "not installed, vLLM starts without it" in line]


def test_the_engine_core_finds_the_node_copy_and_pulls_nothing(started):
    root, pinned, _, facts = started
    child = facts["pulled"]["child"]
    assert child["error"] is None and child["patched"]
    assert not [line for line in messages(child) if " pulled to " in line or " is sha256:" in line]
    assert not [line for line in messages(child) if "not installed, vLLM starts without it" in line]
    # it went on to the install, from the node's copy (refused there: the bundle is an H200's, not this vLLM's)
    copy = root / "pulled" / "vllm" / "warmup_bundles" / "oci" / f"{pinned.rsplit('@', 1)[1].replace(':', '-')}.bundle"
    [early] = [line for line in messages(child) if "model info" in line]
    assert early.startswith(f"warmup-planner: bundle's model info not installed: {copy}: refused: ")


def test_a_registry_that_is_not_there_is_one_line_and_vllm_starts_as_stock(started):
    _, _, _, facts = started
    down = facts["down"]
    assert down["error"] is None and down["stock"] == STOCK
    [line] = messages(down, ("WARNING", "ERROR"))
    assert line.startswith("warmup-planner: bundle oci://127.0.0.1:") and "not installed, vLLM starts without it" in line
    assert "cannot be reached" in line
    assert messages(down["child"], ("WARNING", "ERROR")) == []  # the engine core inherits no bundle
