"""The `gpu` marker skips by itself where there is no CUDA GPU (or under the Triton interpreter),
so GPU test modules only say `pytestmark = pytest.mark.gpu`.

This conftest applies to every folder below: tests/<package>/ (the unit tests of each package),
tests/integration/ (the harnesses run against vLLM's own sources) and the repository-wide tests
left flat here; tests/test_layout.py holds that layout and says why. Loading it puts tests/ on
sys.path, so every folder imports the helpers here (factories, skip_policy...) by name."""

import os
import sys

import pytest
from skip_policy import pytest_addoption, pytest_configure  # noqa: F401 - CI's --allowed-skips-only


def _gpu_skip_reason() -> str | None:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "GPU tests never run interpreted"
    try:
        import torch
    except ImportError:
        return "needs torch and a CUDA GPU"
    return None if torch.cuda.is_available() else "needs a CUDA GPU"


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    reason = _gpu_skip_reason()
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _no_vllm_moe_tables(monkeypatch):
    """Every test plans as if no vLLM's fused_moe tables were known (planner/tables/vllm_moe.py), whether
    or not this Python has vLLM: a test that wants tables sets WARMUP_VLLM_MOE_CONFIGS itself
    (`moe_tables`), so plans and goldens do not depend on the machine."""
    monkeypatch.setenv("WARMUP_VLLM_MOE_CONFIGS", "")
    monkeypatch.delenv("VLLM_TUNED_CONFIG_FOLDER", raising=False)


@pytest.fixture(autouse=True)
def _triton_cache_dir_back(monkeypatch):
    """A test that runs the plugin's load_model pins TRITON_CACHE_DIR for the whole process
    (vllm_bridge/warmup/executor_options.py, pin_triton_cache): the next test starts from the value before."""
    if "TRITON_CACHE_DIR" in os.environ:
        monkeypatch.setenv("TRITON_CACHE_DIR", os.environ["TRITON_CACHE_DIR"])
    else:
        monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)


@pytest.fixture(autouse=True)
def _flashinfer_flags_back(monkeypatch):
    """A test that runs the plugin's register may set FlashInfer's extra nvcc flags for the whole process
    (vllm_bridge/flashinfer_flags.py): the next test starts from the value before."""
    if "FLASHINFER_EXTRA_CUDAFLAGS" in os.environ:
        monkeypatch.setenv("FLASHINFER_EXTRA_CUDAFLAGS", os.environ["FLASHINFER_EXTRA_CUDAFLAGS"])
    else:
        monkeypatch.delenv("FLASHINFER_EXTRA_CUDAFLAGS", raising=False)


@pytest.fixture(autouse=True)
def _dynamo_stance_back_to_default():
    """A test that runs a worker's warmup to its seal sets Dynamo's stance for the whole process
    (executor/dynamo_stance.py): the next test starts from Dynamo's default."""
    yield
    torch = sys.modules.get("torch")
    set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if set_stance is not None and getattr(torch, "__spec__", None) is not None:  # the real torch, not a stand-in
        set_stance("default")


@pytest.fixture
def moe_tables(tmp_path, monkeypatch):
    """WARMUP_VLLM_MOE_CONFIGS pointed at made-up tables (tests/factories.py); the directory."""
    from factories import write_moe_tables

    folder = write_moe_tables(tmp_path / "moe-configs")
    monkeypatch.setenv("WARMUP_VLLM_MOE_CONFIGS", folder)
    return folder


# --- stand-ins for optional libraries stay inside the test that made them -----------------------------

STAND_IN_ROOTS = ("deep_gemm", "flashinfer", "triton", "torch", "vllm", "numpy")
_BEFORE = pytest.StashKey[dict]()


def _libraries() -> dict:
    return {n: m for n, m in list(sys.modules.items()) if n.split(".", 1)[0] in STAND_IN_ROOTS}


def _stand_in(name: str, module) -> bool:
    """None (an import made to fail), or a module of a package no import made (its top level has no
    spec): a test's stand-in. (A real package's compiled submodules have no spec either.)"""
    root = sys.modules.get(name.split(".", 1)[0])
    return module is None or getattr(root, "__spec__", None) is None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_BEFORE] = _libraries()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A stand-in deep_gemm (or torch, triton...) put into sys.modules must be gone once the test's
    fixtures are (monkeypatch.setitem): one left behind made a later test assert nothing (issue 37)."""
    result = yield
    before = item.stash.get(_BEFORE, {})
    left = sorted(n for n, m in _libraries().items() if before.get(n) is not m and _stand_in(n, m))
    if left:
        for name in left:  # the next test starts clean either way
            if name in before:
                sys.modules[name] = before[name]
            else:
                del sys.modules[name]
        pytest.fail(f"{item.nodeid} left stand-ins in sys.modules: {', '.join(left)} (use monkeypatch.setitem "
                    "or a fixture, so that they go with the test)", pytrace=False)
    return result
