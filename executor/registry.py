"""The explicit registries: step kind -> handler, and backend name -> its row (class, compile-only twin).

Importing this imports no torch, triton or optional library: backend modules import
their libraries inside ``available()`` and the family methods. A backend class says
which kernel families it implements (``families``); the families themselves are the
step kinds' (planner.plan.steps.FAMILIES).
"""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping
from typing import NamedTuple

from planner.plan import steps
from planner.plugins import load_plugins_by_group

from .handlers import autotune, cudagraph, family, runner

HANDLERS = {
    steps.Prefill: runner.handle,
    steps.Decode: runner.handle,
    steps.Cleanup: runner.handle,
    steps.Sample: runner.handle,
    steps.CudaGraph: cudagraph.handle,
    steps.Autotune: autotune.handle,
    steps.Gemm: family.handle,
    steps.GroupedGemm: family.handle,
    steps.Attention: family.handle,
    steps.Kernel: family.handle,
}

class BackendRow(NamedTuple):
    """One backend of the executor, declared once: where its class lives, and the compile-only twin a
    precompile worker runs it with where it has one (executor/precompile/workers/backend_classes.py).
    The backend's class says its own `name` (the row's key) and families; the plan's steps name it;
    a backend another package provides is an entry point of `warmup.backends` in pyproject.toml instead.
    tests/executor/test_registry.py holds the class, the twin, the entry points and the planner's
    stages to these rows."""

    module: str
    cls: str
    worker: tuple[str, str] | None = None  # (module, class) of the compile-only twin


BACKEND_ROWS = {
    "triton": BackendRow("executor.backends.triton", "TritonBackend",
                         worker=("executor.backends.triton_compile", "TritonCompileOnly")),
    "deep_gemm": BackendRow("executor.backends.deep_gemm", "DeepGemmBackend"),
    "flashinfer": BackendRow("executor.backends.flashinfer", "FlashInferBackend"),
    "flashinfer_jit": BackendRow("executor.backends.flashinfer_jit", "FlashInferJitBackend",
                                 worker=("executor.backends.flashinfer_jit", "FlashInferJitBuildOnly")),
    "torch": BackendRow("executor.backends.torch_backend", "TorchBackend"),
    "null": BackendRow("executor.backends.null", "NullBackend"),
}


class _Backends(MutableMapping):
    """name -> (module, class) of each row, read off BACKEND_ROWS at every lookup (as vllm_bridge's
    PatchTable reads the release rows): a row added is a backend with no other edit. A write is a
    write of the row (a test's fake backend), keeping the twin the row has."""

    def __getitem__(self, name: str) -> tuple[str, str]:
        row = BACKEND_ROWS[name]
        return row.module, row.cls

    def __setitem__(self, name: str, spec: tuple[str, str]) -> None:
        module, cls = spec
        old = BACKEND_ROWS.get(name)
        BACKEND_ROWS[name] = BackendRow(module, cls, worker=old.worker if old else None)

    def __delitem__(self, name: str) -> None:
        del BACKEND_ROWS[name]

    def __iter__(self):
        return iter(BACKEND_ROWS)

    def __len__(self) -> int:
        return len(BACKEND_ROWS)


class _WorkerClasses(MutableMapping):
    """name -> (module, class) of each row's compile-only twin, where it has one, read off BACKEND_ROWS
    at every lookup; a write sets the twin of a row there is (KeyError without one)."""

    def __getitem__(self, name: str) -> tuple[str, str]:
        row = BACKEND_ROWS.get(name)
        if row is None or not row.worker:
            raise KeyError(name)
        return row.worker

    def __setitem__(self, name: str, worker: tuple[str, str]) -> None:
        BACKEND_ROWS[name] = BACKEND_ROWS[name]._replace(worker=tuple(worker))

    def __delitem__(self, name: str) -> None:
        self[name]  # noqa: B018 - KeyError where the row has no twin
        BACKEND_ROWS[name] = BACKEND_ROWS[name]._replace(worker=None)

    def __iter__(self):
        return (name for name, row in BACKEND_ROWS.items() if row.worker)

    def __len__(self) -> int:
        return sum(1 for _ in self)


# The views the registry and the pool read, live views of the rows (tests may add a fake backend to either)
BACKENDS = _Backends()
WORKER_CLASSES = _WorkerClasses()


ENTRY_POINTS = "warmup.backends"  # backends other packages provide (vllm_bridge's): name -> module:Class
_external: dict | None = None


def external_backends() -> dict:
    """Backends registered by other packages through the `warmup.backends` entry points, found once
    (name -> (module, class)); a package never edits this registry to add one."""
    global _external
    if _external is None:
        # (module, class), not the class: a precompile worker process imports it from the pair
        _external = {name: (cls.__module__, cls.__qualname__)
                     for name, cls in load_plugins_by_group(ENTRY_POINTS).items() if name not in BACKENDS}
    return _external


def backend_spec(name: str) -> tuple[str, str]:
    """(module, class) of a backend: the executor's own, else one another package registered."""
    spec = BACKENDS.get(name) or external_backends().get(name)
    if spec is None:
        raise KeyError(name)
    return spec


def known_backends() -> list[str]:
    return list(BACKENDS) + sorted(external_backends())


def load_backend(name: str):
    """The backend class for a name (imports its module: cheap, never the library itself)."""
    module, cls = backend_spec(name)
    return getattr(importlib.import_module(module), cls)


def backend_attr(name: str, attr: str, default):
    """A class attribute of a registered backend (its default when the backend is unknown or broken)."""
    try:
        return getattr(load_backend(name), attr, default)
    except Exception:  # noqa: BLE001 - unknown or broken: the jobs will say it
        return default


def writes_deep_gemm(name: str) -> bool:
    """Whether a backend's compiles land in DeepGEMM's JIT cache (its class's ``jit_cache``)."""
    try:
        return getattr(load_backend(name), "jit_cache", None) == "deep_gemm"
    except Exception:  # noqa: BLE001 - unknown or broken: it writes nothing we count
        return False


def backend_families(name: str) -> tuple[str, ...]:
    """The kernel families a backend implements, as its class declares them."""
    return load_backend(name).families
