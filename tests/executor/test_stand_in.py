"""Stand-in tensors specialize like real tensors of the same dtype and alignment (Triton's
own specializer, no GPU), and slice like them. The kernels' full argument lists are
compared through Triton's binder in test_kernels_compile.py (sm90_compile.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from triton._C.libtriton import native_specialize_impl  # noqa: E402
from triton.backends.compiler import BaseBackend  # noqa: E402

from executor.kernels.jit import stand_in  # noqa: E402
from kernel_model import runner_kernels  # noqa: E402


def spec(arg):
    return native_specialize_impl(BaseBackend, arg, False, True, True)


@pytest.mark.parametrize("dtype", sorted(stand_in.TRITON_DTYPES))
def test_pointer_specializes_like_a_tensor(dtype):
    t = torch.empty(64, dtype=getattr(torch, dtype))
    assert t.data_ptr() % 16 == 0
    assert spec(stand_in.pointer(dtype)) == spec(t)
    assert spec(stand_in.pointer(dtype, aligned=False)) == spec(t[1:])  # one element in: not 16-byte aligned
    assert spec(stand_in.pointer(dtype)) != spec(stand_in.pointer(dtype, aligned=False))


def test_every_runner_dtype_has_a_stand_in():
    assert set(runner_kernels.DTYPE_SHORT) <= set(stand_in.TRITON_DTYPES)


def test_rows_keep_strides_and_alignment_as_torch_views_do():
    t = torch.empty(8, 5, 3, dtype=torch.bfloat16)
    s = stand_in.StandIn("bfloat16", (8, 5, 3))
    for view, fake in ((t, s), (t[:3], s[:3]), (t[:0], s[:0]), (t[:100], s[:100])):
        assert tuple(view.shape) == fake.shape
        assert view.stride() == fake.stride()
        assert [view.stride(i) for i in range(view.dim())] == [fake.stride(i) for i in range(fake.dim())]
        assert spec(view) == spec(fake)


def test_only_leading_row_slices_are_modelled():
    s = stand_in.StandIn("float32", (4, 4))
    for index in (1, slice(1, 3), slice(None, None, 2)):
        with pytest.raises(TypeError, match="leading rows"):
            s[index]


def test_unknown_dtype_is_named():
    with pytest.raises(ValueError, match="complex64"):
        stand_in.StandIn("complex64", (1,))
