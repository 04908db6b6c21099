"""The `gpu` marker skips by itself where there is no CUDA GPU (or under the Triton interpreter),
so GPU test modules only say `pytestmark = pytest.mark.gpu`."""

import os

import pytest


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
    """Every test plans as if no vLLM's fused_moe tables were known (planner/moe_tables.py), whether
    or not this Python has vLLM: a test that wants tables sets WARMUP_VLLM_MOE_CONFIGS itself
    (`moe_tables`), so plans and goldens do not depend on the machine."""
    monkeypatch.setenv("WARMUP_VLLM_MOE_CONFIGS", "")
    monkeypatch.delenv("VLLM_TUNED_CONFIG_FOLDER", raising=False)


@pytest.fixture
def moe_tables(tmp_path, monkeypatch):
    """WARMUP_VLLM_MOE_CONFIGS pointed at made-up tables (tests/factories.py); the directory."""
    from factories import write_moe_tables

    folder = write_moe_tables(tmp_path / "moe-configs")
    monkeypatch.setenv("WARMUP_VLLM_MOE_CONFIGS", folder)
    return folder
