"""A Triton kernel in a module of its own, for the scenarios of twins compiled in processes
(generic_variants_worker.py): a fresh process finds it by its module and name
(executor.triton_twins.address), which it cannot do for a kernel of a script's __main__."""

from __future__ import annotations

import triton
import triton.language as tl

from executor.kernels.jit.stand_in import pointer


@triton.jit
def scale_rows(x_ptr, out_ptr, stride, n_cols, factor, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask)
    tl.store(out_ptr + row * stride + cols, x * factor, mask=mask)


def launch(n_cols: int, stride: int = 64, factor: int = 3, block: int = 64):
    x, out = pointer("float32"), pointer("float32")
    return scale_rows.warmup(x, out, stride, n_cols, factor, BLOCK=block, grid=(4,))
