"""The premises of vllm_bridge/compile_load.py, against vLLM 0.25's and 0.33's own code on CPU: the loader
module keeps the two functions it wraps as module globals, BaseModelLoader makes the model with the one,
loads the weights, then processes them with the other; the names it calls exist with the arguments it
passes; and the compiled module's __call__ computes the artifact's path as compile_load.artifact_path does
and calls a function already set without loading again. Skips without WARMUP_VLLM_ENVS
(tests/integration/vllm_parity/setup_vllm.sh)."""

from __future__ import annotations

from tests.integration.vllm_plugin.release_probe import releases_fixture
from vllm_bridge.compile_load import NAMES

PROBE = f"""
import importlib, inspect, json
names = {dict(NAMES._asdict())!r}
loader = importlib.import_module(names["loader_module"])
decorators = importlib.import_module(names["decorators_module"])
caching = importlib.import_module(names["caching_module"])
load_model = inspect.getsource(loader.BaseModelLoader.load_model)
make = inspect.getsource(getattr(loader.BaseModelLoader, "create_model", loader.BaseModelLoader.load_model))
# the compiled class's __call__ is defined inside the decorator (one def __call__ in the module)
source = inspect.getsource(decorators)
assert source.count("def __call__") == 1
body = source.split("def __call__", 1)[1].split("\\n    def ", 1)[0]
out = {{
    "globals": [callable(getattr(loader, names[n], None)) for n in ("make_model", "weights_loaded")],
    "made_then_loaded_then_processed": (names["make_model"] + "(") in make and
        load_model.index("self.load_weights(") < load_model.index(names["weights_loaded"] + "("),
    "try_load_args": list(inspect.signature(getattr(decorators, names["try_load"])).parameters),
    "hash_key_args": list(inspect.signature(getattr(decorators, names["model_hash_key"])).parameters),
    "factors_args": list(inspect.signature(getattr(caching, names["hash_factors"])).parameters),
    "path_pieces": [piece in body for piece in (
        "aot_compile_hash_factors(self.vllm_config)", "factors.append(_model_hash_key(self.forward))",
        "hashlib.sha256(str(factors).encode()).hexdigest()", '"torch_compile_cache"', '"torch_aot_compile"',
        "self.compilation_config.local_cache_dir = cache_dir", 'os.path.join(cache_dir, "inductor_cache")',
        'os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache', "rank = self.vllm_config.parallel_config.rank",
        "dp_rank = self.vllm_config.parallel_config.data_parallel_index", 'f"rank_{{rank}}_{{dp_rank}}"',
        'os.path.join(cache_dir, "model")', "if not envs.VLLM_DISABLE_COMPILE_CACHE:",
        "self.aot_compiled_fn = loaded_fn", "self.was_aot_compile_fn_loaded_from_disk = True")],
    "set_fn_called_before_loading": body.index('getattr(self, "aot_compiled_fn", None) is not None') <
        body.index(names["try_load"] + "(self, aot_compilation_path)"),
    "marker_in_init": "self.was_aot_compile_fn_loaded_from_disk = False" in source,
}}
print(json.dumps(out))
"""


vllm = releases_fixture(PROBE)


def test_the_loader_makes_the_model_loads_the_weights_then_processes_them_through_module_globals(vllm):
    assert vllm["globals"] == [True, True]
    assert vllm["made_then_loaded_then_processed"] is True


def test_the_functions_called_take_what_compile_load_passes(vllm):
    assert vllm["try_load_args"] == ["model", "aot_compilation_path"]
    assert len(vllm["hash_key_args"]) == 1 and len(vllm["factors_args"]) == 1


def test_the_first_forward_computes_the_same_path_and_uses_a_function_already_set(vllm):
    assert all(vllm["path_pieces"]), vllm["path_pieces"]
    assert vllm["set_fn_called_before_loading"] is True
    assert vllm["marker_in_init"] is True
