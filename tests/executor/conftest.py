"""Fixtures for the executor kernel tests.

Without a GPU the kernels run under the Triton interpreter, which must be chosen
before ``triton`` is first imported: Triton binds its own standard library
(``tl.max``, ``tl.sum``, ``tl.cdiv``...) to the mode at import time. So this
conftest sets TRITON_INTERPRET=1 when it is loaded, and only when torch sees no
CUDA device; on a GPU machine nothing is set and the GPU tests run natively.
(Only Triton code running on CPU reads the flag, and on CPU that is the only mode
that can run at all.)
"""

from __future__ import annotations

import os
import sys
import zlib

import pytest


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_CUDA = cuda_available()
TRITON_IMPORTED_EARLY = "triton" in sys.modules
if not HAS_CUDA and not TRITON_IMPORTED_EARLY:
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def kernel_device() -> str:
    """"cuda" on a GPU machine, else "cpu" (kernels run in the Triton interpreter)."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    if HAS_CUDA:
        return "cuda"
    if TRITON_IMPORTED_EARLY or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU, and triton was imported before TRITON_INTERPRET=1 could be set")
    return "cpu"


@pytest.fixture
def seed(request) -> int:
    """A seed of its own for every test (and parameter set), stable across runs."""
    return zlib.crc32(request.node.nodeid.encode())
