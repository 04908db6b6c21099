"""The explicit registries: every step kind has a handler, every backend loads and answers
available() without raising, and an optional backend never fails at import."""

from __future__ import annotations

import inspect
import json
import os

import pytest
from execlib import ROOT

from executor import registry
from executor.backends.base import BaseBackend, Unavailable
from executor.run import Context, Options
from executor.jit_monitor import Monitor
from executor.progress import Progress


def schema_kinds() -> list[str]:
    with open(os.path.join(ROOT, "schemas", "expanded-plan.schema.json"), encoding="utf-8") as f:
        return json.load(f)["$defs"]["step"]["properties"]["kind"]["enum"]


def test_every_step_kind_has_a_handler():
    assert sorted(registry.HANDLERS) == sorted(schema_kinds())


def test_handlers_are_small_functions_of_step_and_ctx():
    for kind, handler in registry.HANDLERS.items():
        assert list(inspect.signature(handler).parameters) == ["step", "ctx"], kind
        assert len(inspect.getsource(handler).splitlines()) < 25, f"{kind}: a handler stays small"


@pytest.mark.parametrize("name", sorted(registry.BACKENDS))
def test_backend_loads_and_reports_availability(name):
    cls = registry.load_backend(name)
    backend = cls("cuda", Options())
    assert backend.name == name
    assert tuple(backend.families) == registry.BACKEND_FAMILIES[name]
    ok, why = backend.available()
    assert isinstance(ok, bool) and isinstance(why, str)
    assert ok or why, "an unavailable backend says why"


def test_missing_optional_libraries_are_unavailable_with_a_reason():
    for name, lib in (("deep_gemm", "deep_gemm"), ("flashinfer", "flashinfer")):
        try:
            __import__(lib)
        except ImportError:
            ok, why = registry.load_backend(name)("cuda", Options()).available()
            assert not ok and lib in why and "not installed" in why


def test_planned_backend():
    assert registry.planned_backend("gemm", {"backend": "deep_gemm"}) == "deep_gemm"
    assert registry.planned_backend("autotune", {"library": "flashinfer"}) == "flashinfer"
    assert registry.planned_backend("attention", {"kernel": "context_attention_fwd"}) == "triton"


def make_ctx(**opts) -> Context:
    return Context(Options(**opts), None, Progress(enabled=False), Monitor("off"))


def test_context_resolves_overrides_and_families():
    ctx = make_ctx(backends={"gemm": "null"})
    step = {"kind": "gemm", "backend": "deep_gemm"}
    assert ctx.backend_for("gemm", step).name == "null"
    with pytest.raises(Unavailable, match="does not implement attention"):
        make_ctx(backends={"attention": "torch"}).backend_for("attention", {"kernel": "context_attention_fwd"})
    with pytest.raises(Unavailable, match="no backend named"):
        make_ctx().backend_for("gemm", {"backend": "cutlass"})


def test_a_backend_whose_module_breaks_is_unavailable(monkeypatch):
    monkeypatch.setitem(registry.BACKENDS, "broken", ("executor.backends.does_not_exist", "X"))
    monkeypatch.setitem(registry.BACKEND_FAMILIES, "broken", ("gemm",))
    with pytest.raises(Unavailable, match="failed to import"):
        make_ctx().backend_for("gemm", {"backend": "broken"})


def test_base_backend_refuses_unimplemented_families():
    with pytest.raises(Unavailable):
        BaseBackend().gemm({}, [1], lambda n: None)
