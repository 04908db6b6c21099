"""The generic-variant closure (executor/triton_generic.py) through Triton's real binder and
compiler, for an SM 9.0 target without a GPU (executor.kernels.jit.stand_in's offline driver):
after the seal, a launch of a value class the warmup never saw runs the generic variant and
nothing compiles; a new constexpr still compiles; the rule itself is kernel_model's."""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")

import triton.language as tl  # noqa: E402
from triton import knobs  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from executor.kernels.jit.stand_in import pointer, use_offline_driver  # noqa: E402
from executor.triton_generic import ORIGINALS, GenericVariants  # noqa: E402
from kernel_model.specialization import generic_entry, generic_specialization  # noqa: E402


def _scale_rows(x_ptr, out_ptr, stride, n_cols, factor, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask)
    tl.store(out_ptr + row * stride + cols, x * factor, mask=mask)


# JITFunction itself, not triton.jit: tests/executor's conftest sets TRITON_INTERPRET=1 on a machine
# without a GPU, under which triton.jit hands back the interpreter's function; the compiler is what
# this test needs, and it runs without a GPU.
_scale_rows = JITFunction(_scale_rows)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Triton compiles for SM 9.0 here, into a cache of the test's own; every compile counted."""
    from triton.runtime.driver import driver

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    before = driver._active  # None until a first use: no GPU here, so no default driver either
    use_offline_driver(90)
    compiled = []
    previous = knobs.runtime.jit_post_compile_hook
    knobs.runtime.jit_post_compile_hook = lambda **kw: compiled.append(kw["fn"].name)
    _scale_rows.device_caches.clear()
    yield compiled
    knobs.runtime.jit_post_compile_hook = previous
    _scale_rows.device_caches.clear()
    driver._active = before


@pytest.fixture
def closure():
    uses = []
    c = GenericVariants(on_generic=uses.append, threads=2, load=False)  # no device to load on here
    assert c.install(), c.reason
    c.uses_seen = uses
    yield c
    c.uninstall()


def launch(n_cols: int, stride: int = 64, factor: int = 3, aligned: bool = True, block: int = 64):
    x, out = pointer("float32", aligned=aligned), pointer("float32", aligned=aligned)
    return _scale_rows.warmup(x, out, stride, n_cols, factor, BLOCK=block, grid=(4,))


def signature_of(kernel) -> dict:
    return dict(kernel.src.signature)


def test_a_class_the_warmup_did_not_see_runs_the_generic_variant(offline, closure):
    launch(n_cols=64)                       # the warmup saw n_cols a multiple of 16 only
    assert offline == ["_scale_rows"]
    result = closure.close()
    assert (result.seen, result.built, result.failed) == (1, 1, [])
    assert offline == ["_scale_rows", "_scale_rows"]  # the generic variant, before the seal
    closure.seal()
    kernel = launch(n_cols=50)              # n_cols '' and stride 64: never compiled exactly
    assert offline == ["_scale_rows", "_scale_rows"], "a launch after the seal compiled"
    assert [u.kernel for u in closure.uses_seen] == ["_scale_rows"]
    sig = signature_of(kernel)
    assert sig["n_cols"] == "i32" and sig["stride"] == "i32" and sig["factor"] == "i32"
    assert not any(kernel.src.attrs.values()), "the generic variant carries no divisibility facts"
    again = launch(n_cols=50)               # now a plain cache hit: reported once
    assert again is kernel and len(closure.uses_seen) == 1


def test_an_int_equal_to_one_and_an_unaligned_pointer_run_the_generic_variant(offline, closure):
    launch(n_cols=64, factor=1)             # factor 1: folded into the kernel as a constexpr
    closure.close()
    closure.seal()
    launch(n_cols=64, factor=2, aligned=False)
    launch(n_cols=1, stride=1)
    assert offline == ["_scale_rows", "_scale_rows"]
    assert len(closure.uses_seen) == 2


def test_a_new_constexpr_still_compiles_and_the_monitors_see_it(offline, closure):
    launch(n_cols=64, block=64)
    closure.close()
    closure.seal()
    launch(n_cols=64, block=128)            # BLOCK selects another program: no stand-in
    assert offline.count("_scale_rows") == 3
    assert closure.uses_seen == []


def test_before_the_seal_misses_compile_and_are_recorded(offline, closure):
    launch(n_cols=64)
    launch(n_cols=50, stride=50, aligned=False)  # itself the generic class: nothing more to build
    result = closure.close()
    assert result.seen == 2 and result.built == 0 and result.already == 2


def test_install_is_once_per_process_and_uninstall_restores_triton():
    from triton.runtime.jit import JITFunction

    pack, compile_ = JITFunction._pack_args, JITFunction._do_compile
    first, second = GenericVariants(), GenericVariants()
    assert first.install()
    assert not second.install() and "another" in second.reason
    first.uninstall()
    assert ORIGINALS not in vars(JITFunction)
    assert (JITFunction._pack_args, JITFunction._do_compile) == (pack, compile_)


@pytest.mark.parametrize("entry, generic", [
    (("i32", "D"), ("i32", "")), (("i64", "D"), ("i64", "")), (("i32", ""), ("i32", "")),
    (("constexpr", 1), ("i32", "")), (("*fp32", "D"), ("*fp32", "")), (("*bf16", ""), ("*bf16", "")),
    (("constexpr", None), ("constexpr", None)), (("u1", None), ("u1", None)), (("fp32", None), ("fp32", None)),
    (("i32", None), ("i32", None)), (("i32", 1), ("i32", "")),
    ((("constexpr", "i32"), (1, "D")), (("i32", "i32"), ("", ""))),
])
def test_generic_entry(entry, generic):
    assert generic_entry(entry) == generic


def test_declared_constexprs_keep_their_value():
    spec = [("constexpr", 1), ("constexpr", 1), ("constexpr", True)]
    assert generic_specialization(spec, [False, True, True]) == [("i32", ""), ("constexpr", 1), ("constexpr", True)]


def test_a_generic_variant_that_will_not_load_is_dropped_and_its_misses_compile(offline):
    """close() loads each generic variant and builds its launcher (Triton would at the first launch,
    after ready); here there is no device to load on, the way a variant out of resources fails."""
    c = GenericVariants(threads=1, load=True)
    assert c.install(), c.reason
    try:
        launch(n_cols=64)
        result = c.close()
        assert result.built == 0 and [k for k, _ in result.failed] == ["_scale_rows"]
        c.seal()
        launch(n_cols=50)
        assert offline.count("_scale_rows") == 3 and c.uses == []
    finally:
        c.uninstall()
