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
