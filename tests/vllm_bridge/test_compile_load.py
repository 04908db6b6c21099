"""vllm_bridge/compile_load.py on CPU, with stand-ins for the vLLM modules it reads (their names and
order are checked against vLLM 0.25's and 0.33's own code in tests/integration/vllm_plugin/test_compile_load_vllm.py)."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
import types

import pytest

from vllm_bridge import compile_load
from vllm_bridge.settings import PluginError, Settings

FACTORS = ["config-hash", "env-hash"]


class CompiledModule:
    """What a @support_torch_compile class's __init__ leaves on an instance."""

    def __init__(self, rank=0, dp=0, do_not_compile=False):
        self.was_aot_compile_fn_loaded_from_disk = False
        self.do_not_compile = do_not_compile
        self.compilation_config = types.SimpleNamespace(local_cache_dir=None)
        self.vllm_config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(rank=rank,
                                                                                       data_parallel_index=dp))

    def forward(self):
        return None

    def modules(self):
        return [self]


class Model:
    """The top module vLLM's loader makes: a plain module holding a compiled one."""

    def __init__(self, *inner):
        self.inner = inner

    def modules(self):
        return [self, *self.inner]


@pytest.fixture
def vllm(tmp_path, monkeypatch):
    """Stand-ins for vllm.envs, the decorators, caching and base_loader modules; records what ran where."""
    ran = types.SimpleNamespace(loads=[], processed=[], fail=None)
    envs = types.ModuleType("vllm.envs")
    envs.VLLM_USE_AOT_COMPILE, envs.VLLM_DISABLE_COMPILE_CACHE, envs.VLLM_CACHE_ROOT = True, False, str(tmp_path)
    decorators = types.ModuleType("vllm.compilation.decorators")

    def try_load(model, path):
        ran.loads.append((model, path, threading.current_thread().name, os.environ.get("TORCHINDUCTOR_CACHE_DIR")))
        if ran.fail:
            raise ran.fail
        return ("loaded", path)

    decorators._try_load_aot_compiled_fn = try_load
    decorators._model_hash_key = lambda fn: "key-of-" + fn.__qualname__
    caching = types.ModuleType("vllm.compilation.caching")
    caching.aot_compile_hash_factors = lambda config: list(FACTORS)
    base_loader = types.ModuleType("vllm.model_executor.model_loader.base_loader")
    base_loader.initialize_model = lambda model: model

    def process_weights_after_loading(model, model_config, device):
        ran.processed.append([(m.was_aot_compile_fn_loaded_from_disk, getattr(m, "aot_compiled_fn", None))
                              for m in model.modules()[1:]])

    base_loader.process_weights_after_loading = process_weights_after_loading
    for name, module in {"vllm": types.ModuleType("vllm"), "vllm.envs": envs, "vllm.compilation.decorators": decorators,
                         "vllm.compilation.caching": caching,
                         "vllm.model_executor.model_loader.base_loader": base_loader}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/inductor-before")
    yield types.SimpleNamespace(envs=envs, loader=base_loader, ran=ran, root=tmp_path)
    compile_load.uninstall()
    compile_load._pending.clear()


def load_model(loader, model):
    """BaseModelLoader.load_model's order, as both releases have it: make, weights, process."""
    model = loader.initialize_model(model)
    loader.process_weights_after_loading(model, "model-config", "cuda")
    return model


def artifact(root, module_name="CompiledModule.forward", rank=0, dp=0) -> str:
    digest = hashlib.sha256(str(FACTORS + ["key-of-" + module_name]).encode()).hexdigest()
    path = root / "torch_compile_cache" / "torch_aot_compile" / digest / f"rank_{rank}_{dp}" / "model"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"artifact")
    return str(path)


def test_a_warm_start_loads_the_artifact_in_a_thread_and_hands_it_over_before_the_weights_are_processed(vllm):
    path = artifact(vllm.root, rank=1, dp=0)
    compiled = CompiledModule(rank=1)
    assert compile_load.install() is True
    load_model(vllm.loader, Model(compiled))
    [(module, loaded_path, thread, inductor)] = vllm.ran.loads
    assert module is compiled and loaded_path == path and thread == "warmup-compile-load"
    assert vllm.ran.processed == [[(True, ("loaded", path))]]  # set before vLLM processed the weights
    root = os.path.dirname(os.path.dirname(path))
    assert compiled.compilation_config.local_cache_dir == root  # as vLLM's __call__ sets them
    assert inductor == os.environ["TORCHINDUCTOR_CACHE_DIR"] == os.path.join(root, "inductor_cache")
    assert compile_load._pending == {}


def test_a_cold_start_starts_nothing_and_vllm_loads_or_compiles_as_always(vllm):
    compiled = CompiledModule()
    compile_load.install()
    load_model(vllm.loader, Model(compiled))
    assert vllm.ran.loads == [] and vllm.ran.processed == [[(False, None)]]
    assert compiled.compilation_config.local_cache_dir is None
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/inductor-before"


@pytest.mark.parametrize("setting", ["VLLM_DISABLE_COMPILE_CACHE", "VLLM_USE_AOT_COMPILE"])
def test_nothing_is_loaded_where_vllm_would_not_load_either(vllm, setting):
    artifact(vllm.root)
    setattr(vllm.envs, setting, not getattr(vllm.envs, setting))
    compile_load.install()
    load_model(vllm.loader, Model(CompiledModule()))
    assert vllm.ran.loads == [] and vllm.ran.processed == [[(False, None)]]


def test_a_module_vllm_does_not_compile_is_left_alone(vllm):
    artifact(vllm.root)
    compile_load.install()
    load_model(vllm.loader, Model(CompiledModule(do_not_compile=True)))
    assert vllm.ran.loads == []


def test_a_failed_load_hands_nothing_over_and_says_so_in_one_line(vllm, caplog):
    artifact(vllm.root)
    vllm.ran.fail = EOFError("Compile cache file corrupted.")
    compile_load.install()
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        load_model(vllm.loader, Model(CompiledModule()))
    assert vllm.ran.processed == [[(False, None)]]
    [line] = [r.getMessage() for r in caplog.records]
    assert "not loaded beside the weights (EOFError: Compile cache file corrupted.)" in line


def test_a_load_past_the_deadline_is_left_to_vllms_first_forward(vllm, monkeypatch):
    artifact(vllm.root)
    release = threading.Event()
    sys.modules["vllm.compilation.decorators"]._try_load_aot_compiled_fn = lambda m, p: release.wait(5) and None
    monkeypatch.setattr(compile_load, "JOIN_DEADLINE_S", 0.05)
    compile_load.install()
    load_model(vllm.loader, Model(CompiledModule()))
    release.set()
    assert vllm.ran.processed == [[(False, None)]]


def test_installed_once_per_process_and_undone_by_uninstall(vllm):
    make, processed = vllm.loader.initialize_model, vllm.loader.process_weights_after_loading
    assert compile_load.install() is True and compile_load.install() is False
    assert vllm.loader.initialize_model is not make
    compile_load.uninstall()
    assert (vllm.loader.initialize_model, vllm.loader.process_weights_after_loading) == (make, processed)


def test_a_vllm_without_the_loader_module_is_one_line_and_no_change(monkeypatch, caplog):
    monkeypatch.setattr(compile_load, "NAMES", compile_load.Names(loader_module="no_such_vllm_module.base_loader"))
    with caplog.at_level(logging.INFO, logger="vllm.warmup_planner"):
        assert compile_load.installed(compile_load.NAMES) is False
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("warmup-planner: vLLM's compiled model loads after the weights (ModuleNotFoundError")


def test_the_setting_is_off_unless_asked():
    assert Settings.from_env({}).compile_load_beside_weights is False
    assert Settings.from_env({"WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS": "1"}).compile_load_beside_weights is True
    with pytest.raises(PluginError, match="WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS must be 1 or 0"):
        Settings.from_env({"WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS": "beside"})
