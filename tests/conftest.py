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
