"""The premises of vllm_bridge/engine_core_start.py, against vLLM 0.25's and 0.33's own code on CPU:
`vllm serve`'s CLI sets VLLM_WORKER_MULTIPROC_METHOD=spawn only where it is absent, vLLM starts
its processes with the method that variable names where no CUDA context stops it, and the API
server makes its config (EngineArgs.create_engine_config, where the plugin's default decides) before
it starts the engine core, a config whose ParallelConfig says how many GPUs the engine runs on.
Skips as the plugin tests do without WARMUP_VLLM_ENVS (tests/integration/vllm_parity/setup_vllm.sh)."""

from __future__ import annotations

from tests.integration.vllm_plugin.release_probe import releases_fixture
from vllm_bridge.engine_core_start import METHOD

# cli_env_setup, the first call of the CLI's main() (vllm/entrypoints/cli/main.py), where each release
# keeps it (0.25: serve/utils/api_utils.py, 0.33: common/startup.py); main() itself needs the server's
# packages (uvicorn, fastapi), which the CPU environments leave out
PROBE = f"""
import importlib, importlib.util, inspect, json, os
from vllm.entrypoints.cli import main as cli
from vllm.utils import system_utils

assert inspect.getsource(cli.main).index("cli_env_setup()") < inspect.getsource(cli.main).index("parse_args")
for where in ("vllm.entrypoints.serve.utils.api_utils", "vllm.entrypoints.common.startup"):
    try:
        setup = importlib.import_module(where).cli_env_setup
        break
    except (ImportError, AttributeError):
        continue

def cli_leaves(value):
    os.environ.pop({METHOD!r}, None)
    if value is not None:
        os.environ[{METHOD!r}] = value
    setup()
    return os.environ.get({METHOD!r})

out = {{"cli_sets": cli_leaves(None), "cli_keeps": cli_leaves("user-choice")}}

# the API server's engine client (0.25: entrypoints/openai/api_server.py, 0.33: launchers/api_server/entry.py),
# read as text: importing it needs the server's packages
for where in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.launchers.api_server.entry"):
    source = open(importlib.util.find_spec(where).origin).read()
    if "def build_async_engine_client_from_engine_args" in source:
        body = source.split("def build_async_engine_client_from_engine_args", 1)[1].split("\\ndef ", 1)[0]
        out["config_then_engine"] = body.index("create_engine_config(") < body.index("from_vllm_config(")
        break
from vllm.config import ParallelConfig
out["parallel_fields"] = sorted({{"world_size", "data_parallel_size"}} & set(ParallelConfig.__dataclass_fields__))
os.environ[{METHOD!r}] = "fork"
out["context"] = system_utils.get_mp_context().get_start_method()
print(json.dumps(out))
"""


vllm = releases_fixture(PROBE)


def test_the_cli_chooses_spawn_only_where_the_user_did_not(vllm):
    assert vllm["cli_sets"] == "spawn"
    assert vllm["cli_keeps"] == "user-choice"


def test_vllm_starts_its_processes_by_the_method_the_variable_names(vllm):
    assert vllm["context"] == "fork"


def test_the_server_makes_its_config_before_it_starts_the_engine_core(vllm):
    """Where the plugin's default decides (after create_engine_config) comes before the engine core's start,
    and what it reads of the config (one_gpu_engine) is there."""
    assert vllm["config_then_engine"] is True
    assert vllm["parallel_fields"] == ["data_parallel_size", "world_size"]
