"""Stand-in tensors, and Triton's compile-only path for a fixed GPU target (no torch, no CUDA).

What Triton 3.6 keys a launch by, besides constexprs and launch options: each pointer's
dtype and whether ``data_ptr() % 16 == 0``, and each int's class. What a launch function
reads to build its arguments: shapes and strides. A ``StandIn`` has exactly these, so
the launch functions of ``executor.kernels.jit`` build the same argument list from
stand-ins as from real tensors of the same dtypes, shapes and alignment
(tests/executor/test_stand_in.py compares Triton's own binder on both).

``OfflineDriver`` answers Triton's three questions before a compile (device, stream,
target) with "device 0, no stream, cuda:<capability>", so ``JITFunction.warmup`` runs the
real binder and compiler (TTIR -> cubin with the bundled ptxas) and writes the disk
cache under the same key a process with a CUDA context computes for that GPU. Creating a
CUDA context costs little, also sixteen at once; what the offline path saves is torch, whose
import Triton's own CUDA driver needs (bench/RESULTS.md, part P).
"""

from __future__ import annotations

# torch's dtype names (as plans and dispatch models write them) -> triton.language's
TRITON_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "float64": "float64",
                 "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
                 "bool": "int1", "float8_e4m3fn": "float8e4nv", "float8_e5m2": "float8e5"}
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8, "int8": 1, "int16": 2, "int32": 4,
            "int64": 8, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}
ALIGNMENT = 16  # bytes: Triton specializes a pointer on data_ptr() % 16 == 0


def triton_dtype(name: str):
    import triton.language as tl

    try:
        return getattr(tl, TRITON_DTYPES[name])
    except KeyError:
        raise ValueError(f"no Triton dtype for {name!r} (known: {', '.join(sorted(TRITON_DTYPES))})") from None


def contiguous_strides(shape) -> tuple:
    strides, step = [], 1
    for size in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


class StandIn:
    """A tensor as a launch sees it: dtype, shape, strides and data-pointer alignment.

    ``offset`` is the byte offset of its data from an aligned allocation (a view's start);
    row slices ``x[:m]`` keep it, as torch's views keep their storage offset."""

    def __init__(self, dtype: str, shape, strides=None, offset: int = 0):
        self.dtype_name = dtype
        self.dtype = triton_dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        self._strides = tuple(strides) if strides is not None else contiguous_strides(self.shape)
        self.offset = int(offset)

    def stride(self, dim: int | None = None):
        return self._strides if dim is None else self._strides[dim]

    def dim(self) -> int:
        return len(self.shape)

    def data_ptr(self) -> int:
        return ALIGNMENT * 64 + self.offset  # never 0: a real allocation's address

    def __getitem__(self, index):
        """Rows ``[:m]`` only (what the launch helpers slice)."""
        if not isinstance(index, slice) or index.start not in (None, 0) or index.step not in (None, 1):
            raise TypeError(f"a stand-in tensor slices its leading rows only ([:m]), got {index!r}")
        rows = len(range(*index.indices(self.shape[0])))
        return StandIn(self.dtype_name, (rows,) + self.shape[1:], self._strides, self.offset)

    def __repr__(self) -> str:
        return f"StandIn({self.dtype_name}, {self.shape}, offset={self.offset})"


def pointer(dtype: str, aligned: bool = True) -> StandIn:
    """A pointer argument of a dtype, 16-byte aligned or not (a kernel reads no shape)."""
    return StandIn(dtype, (1,), offset=0 if aligned else ITEMSIZE.get(dtype, 1))


class OfflineDriver:
    """Triton's active driver in a process that compiles for `capability` and launches nothing."""

    def __init__(self, capability: int):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", int(capability), 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self):
        return self.target

    @property
    def launcher_cls(self):
        from triton.backends.nvidia.driver import CudaLauncher

        return CudaLauncher


def use_offline_driver(capability: int) -> OfflineDriver:
    """Make Triton compile for `capability` in this process without touching CUDA."""
    from triton.runtime.driver import driver

    offline = OfflineDriver(capability)
    driver.set_active(offline)
    return offline


def build_launcher(compiled) -> None:
    """Build (or find in the disk cache) the launcher of a compiled variant: a C module Triton
    compiles with the host compiler per signature at the first launch (bench/RESULTS.md, part P)."""
    from triton.runtime.driver import driver

    if compiled is not None and hasattr(compiled, "src"):
        driver.active.launcher_cls(compiled.src, compiled.metadata)
