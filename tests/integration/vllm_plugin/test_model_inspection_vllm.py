"""vllm_bridge/model_inspection.py against vLLM 0.25's and 0.33's own registry on CPU: the function it wraps
is the registry's module global that inspect_model_cls calls, and a forked child's inspection of a real model
class gives what vLLM's own fresh interpreter gives. Skips without WARMUP_VLLM_ENVS
(tests/integration/vllm_parity/setup_vllm.sh)."""

from __future__ import annotations

from tests.integration.vllm_plugin.release_probe import releases_fixture
PROBE = """
import inspect, json, sys
from vllm.model_executor.models import registry
from vllm_bridge import model_inspection

source = inspect.getsource(registry._LazyRegisteredModel.inspect_model_cls)
out = {"called_by_name": "_run_in_subprocess(" in source and "from_model_cls(self.load_model_cls())" in source,
       "plugins_then_fn": inspect.getsource(registry._run).index("load_general_plugins()")
       < inspect.getsource(registry._run).index("fn()")}
lazy = registry.ModelRegistry.models["LlamaForCausalLM"]
fn = lambda: registry._ModelInfo.from_model_cls(lazy.load_model_cls())
theirs = registry._run_in_subprocess(fn)
assert model_inspection.install(registry)
ours = registry._run_in_subprocess(fn)
out["same_info"] = ours == theirs
out["fields"] = len(vars(ours))
out["parent_has_no_model_module"] = "vllm.model_executor.models.llama" not in sys.modules
print(json.dumps(out))
"""


vllm = releases_fixture(PROBE)


def test_vllm_inspects_through_the_module_global_after_loading_its_plugins(vllm):
    assert vllm["called_by_name"] is True and vllm["plugins_then_fn"] is True


def test_a_forked_childs_inspection_is_vllms(vllm):
    assert vllm["same_info"] is True and vllm["fields"] > 5
    assert vllm["parent_has_no_model_module"] is True  # the class was imported in the children only
