"""The explicit registries: every step kind has a handler, every backend loads and answers
available() without raising, and an optional backend never fails at import."""

from __future__ import annotations

import inspect
import json
import os
import sys

import pytest
from execlib import ROOT

from executor import registry
from executor.backends.base import BaseBackend, Unavailable
from executor.caches import deep_gemm_install
from executor.jit_monitor import Monitor
from executor.progress import Progress
from executor.run import Context, Options
from planner.plan import steps


def schema_kinds() -> list[str]:
    with open(os.path.join(ROOT, "schemas", "expanded-plan.schema.json"), encoding="utf-8") as f:
        return json.load(f)["$defs"]["step"]["properties"]["kind"]["enum"]


def test_every_step_kind_has_a_handler():
    assert sorted(cls.kind for cls in registry.HANDLERS) == sorted(schema_kinds()) == sorted(steps.KINDS)


def test_handlers_are_small_functions_of_step_and_ctx():
    for cls, handler in registry.HANDLERS.items():
        assert list(inspect.signature(handler).parameters) == ["step", "ctx"], cls.kind
        assert len(inspect.getsource(handler).splitlines()) < 25, f"{cls.kind}: a handler stays small"


@pytest.mark.parametrize("name", sorted(registry.BACKENDS))
def test_backend_loads_and_reports_availability(name):
    cls = registry.load_backend(name)
    backend = cls("cuda", Options())
    assert backend.name == name
    assert set(backend.families) <= set(steps.FAMILIES) and registry.backend_families(name) == backend.families
    ok, why = backend.available()
    assert isinstance(ok, bool) and isinstance(why, str)
    assert ok or why, "an unavailable backend says why"


def test_missing_optional_libraries_are_unavailable_with_a_reason():
    import importlib.util

    checked = []
    for name, lib in (("deep_gemm", "deep_gemm"), ("flashinfer", "flashinfer")):
        if importlib.util.find_spec(lib) is not None or (lib == "deep_gemm" and deep_gemm_install.find_install()):
            continue  # really installed here
        ok, why = registry.load_backend(name)("cuda", Options()).available()
        assert not ok and lib in why and "not installed" in why
        checked.append(lib)
    if not checked:
        pytest.skip("deep_gemm and flashinfer are both installed here")


def gemm(backend: str) -> steps.Gemm:
    return steps.Gemm("s/gemm", "s", kernel="fp8_gemm", backend=backend, n=128, k=128, m_values=(1,))


ATTENTION = steps.Attention("s/attn", "s", kernel="context_attention_fwd", backend="triton", num_heads=8,
                            num_kv_heads=8, head_size=64, scale=0.125, logits_soft_cap=0.0,
                            sliding_window=(-1, -1), dtype="bfloat16", num_tokens=16)


def test_planned_backend():
    assert gemm("deep_gemm").backend == "deep_gemm"
    assert steps.Autotune("s/a", "s", library="flashinfer", num_tokens=8).backend == "flashinfer"
    assert ATTENTION.backend == "triton"


def make_ctx(**opts) -> Context:
    return Context(Options(**opts), None, Progress(enabled=False), Monitor("off"))


def test_context_resolves_overrides_and_families():
    ctx = make_ctx(backends={"gemm": "null"})
    assert ctx.backend_for(gemm("deep_gemm")).name == "null"
    with pytest.raises(Unavailable, match="does not implement attention"):
        make_ctx(backends={"attention": "torch"}).backend_for(ATTENTION)
    with pytest.raises(Unavailable, match="no backend named"):
        make_ctx().backend_for(gemm("cutlass"))


def test_a_backend_whose_module_breaks_is_unavailable(monkeypatch):
    monkeypatch.setitem(registry.BACKENDS, "broken", ("executor.backends.does_not_exist", "X"))
    with pytest.raises(Unavailable, match="failed to import"):
        make_ctx().backend_for(gemm("broken"))


def test_kernel_is_a_family_every_backend_protocol_declares():
    """--backend kernel=... is a family like the others, and the protocol declares its method."""
    from executor.backends.base import Backend
    from executor.cli import parse_backends

    assert "kernel" in steps.FAMILIES and hasattr(Backend, "kernel") and hasattr(BaseBackend, "kernel")
    assert parse_backends(["kernel=null"], dry_run=False) == {"kernel": "null"}


def test_base_backend_refuses_unimplemented_families():
    with pytest.raises(Unavailable):
        BaseBackend().gemm({}, [1], lambda n: None)


# --- each backend declared once: its row (executor/registry.py), or another package's entry point ---

def pyproject_backends() -> dict:
    """pyproject.toml's `warmup.backends` entry points: name -> (module, class)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        entries = tomllib.load(f)["project"]["entry-points"]["warmup.backends"]
    return {name: tuple(value.split(":")) for name, value in entries.items()}


def declared_name(module: str, cls: str) -> str:
    """The `name = "..."` a backend class declares, read from its source (an entry point's module may
    need vLLM to import)."""
    import ast

    with open(os.path.join(ROOT, *module.split(".")) + ".py", encoding="utf-8") as f:
        tree = ast.parse(f.read())
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == cls).body
    return next(node.value.value for node in body if isinstance(node, ast.Assign)
                and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["name"])


def test_the_registry_views_are_read_off_the_backend_rows():
    """BACKENDS (the registry's) and WORKER_CLASSES (the pool's, executor/precompile/workers/backend_classes.py
    reads it from here) are views of the rows, not tables of their own."""
    assert registry.BACKENDS == {name: (row.module, row.cls) for name, row in registry.BACKEND_ROWS.items()}
    assert registry.WORKER_CLASSES == {name: row.worker for name, row in registry.BACKEND_ROWS.items() if row.worker}


@pytest.mark.parametrize("name", sorted(registry.WORKER_CLASSES))
def test_a_compile_only_twin_runs_its_rows_backend(name):
    import importlib

    module, cls = registry.WORKER_CLASSES[name]
    twin = getattr(importlib.import_module(module), cls)
    assert twin.name == name  # the worker runs the row's backend: the name its jobs and reports carry


def test_another_packages_backend_is_an_entry_point_whose_class_says_its_name():
    """A backend outside the executor (vllm_bridge's) is a pyproject.toml entry point, not a row: its key
    is the name its class declares, and no row of the executor has that name."""
    external = pyproject_backends()
    assert external and not set(external) & set(registry.BACKEND_ROWS)
    for name, (module, cls) in external.items():
        assert declared_name(module, cls) == name, (name, module, cls)


def test_every_backend_the_planner_names_is_declared():
    """The backends the planner's stages put into steps (backend="...") each have a row or an entry point:
    a plan never names a backend `warmup execute` cannot find."""
    import glob
    import re

    named = set()
    for path in glob.glob(os.path.join(ROOT, "planner", "plan", "stages", "*.py")):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        named |= set(re.findall(r'backend="(\w+)"', text))
        named |= set(re.findall(r'KERNEL_BACKENDS.get\(\w+, "(\w+)"\)', text))
    from planner.plan.stages.attention import KERNEL_BACKENDS

    named |= set(KERNEL_BACKENDS.values())
    assert {"triton", "deep_gemm", "flashinfer_jit", "vllm_triton"} <= named
    assert named <= set(registry.BACKEND_ROWS) | set(pyproject_backends())


# --- a new backend is one row (issue 56): a made-up one, added for one test -----------------------

FICTITIOUS_MODULE = "fictitious_backend_of_test_registry"
FICTITIOUS_SOURCE = '''
from executor.backends.base import BaseBackend


class FictitiousBackend(BaseBackend):
    name = "fictitious"
    families = ("gemm",)
    worker_preload = ("json",)

    def available(self):
        return True, ""

    def gemm(self, step, m_values, tick):
        tick(len(m_values))
        return 10 * len(m_values)


class FictitiousCompileOnly(FictitiousBackend):
    cuda_free = True
'''


@pytest.fixture
def fictitious_row(tmp_path, monkeypatch):
    """One row in BACKEND_ROWS, its classes in a module of a temporary folder; nothing else edited."""
    (tmp_path / f"{FICTITIOUS_MODULE}.py").write_text(FICTITIOUS_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    row = registry.BackendRow(FICTITIOUS_MODULE, "FictitiousBackend",
                              worker=(FICTITIOUS_MODULE, "FictitiousCompileOnly"))
    monkeypatch.setitem(registry.BACKEND_ROWS, "fictitious", row)
    yield row
    sys.modules.pop(FICTITIOUS_MODULE, None)


def test_a_fictitious_backend_is_one_row(fictitious_row):
    """The row alone makes the backend: the registry loads it by name, every view of the rows lists it
    (BACKENDS, WORKER_CLASSES, known_backends, --backend; the pool's specs and lane: test_precompile_lanes.py), and a plan step
    naming it is dispatched to it. A view kept as a table of its own (computed once at import) fails."""
    from executor.cli import parse_backends

    cls = registry.load_backend("fictitious")
    assert (cls.__module__, cls.__name__) == (FICTITIOUS_MODULE, "FictitiousBackend")
    assert registry.BACKENDS["fictitious"] == (FICTITIOUS_MODULE, "FictitiousBackend")
    assert registry.WORKER_CLASSES["fictitious"] == fictitious_row.worker
    assert "fictitious" in registry.known_backends() and registry.backend_families("fictitious") == ("gemm",)
    # the precompile pool's view of the row: tests/executor/test_precompile_lanes.py (the pool's insides)
    # the command line and a plan's step: --backend takes it, and a step naming it runs on it
    assert parse_backends(["gemm=fictitious"], dry_run=False) == {"gemm": "fictitious"}
    step = gemm("fictitious")
    assert registry.HANDLERS[type(step)](step, make_ctx()) == {"backend": "fictitious", "kernel_calls": 10}
    assert make_ctx(backends={"gemm": "fictitious"}).backend_for(gemm("deep_gemm")).name == "fictitious"
    attention = steps.Attention("s/attn", "s", kernel="context_attention_fwd", backend="fictitious", num_heads=8,
                                num_kv_heads=8, head_size=64, scale=0.125, logits_soft_cap=0.0,
                                sliding_window=(-1, -1), dtype="bfloat16", num_tokens=16)
    with pytest.raises(Unavailable, match="backend fictitious does not implement attention"):
        make_ctx().backend_for(attention)  # its class's families, read through the row


def test_the_fictitious_row_leaves_no_trace(fictitious_row, monkeypatch):
    """The views are the rows': the row gone (monkeypatch undoes it), the backend is gone from each."""
    monkeypatch.delitem(registry.BACKEND_ROWS, "fictitious")
    assert "fictitious" not in registry.BACKENDS and "fictitious" not in registry.WORKER_CLASSES
    assert "fictitious" not in registry.known_backends()
    with pytest.raises(KeyError):
        registry.load_backend("fictitious")
