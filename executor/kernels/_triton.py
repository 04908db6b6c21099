"""Optional Triton import, lazily built kernels, and Triton 3.6's int specialization rule.

Nothing here needs a GPU. Kernels are plain functions turned into ``triton.jit``
objects on their first call, so the package imports without Triton. Under
TRITON_INTERPRET=1 they become interpreted functions instead; the flag has to be
set before ``triton`` is first imported, because Triton binds its own standard
library (``tl.max``, ``tl.sum``, ``tl.cdiv``...) to the mode at import time.
"""

from __future__ import annotations

from kernel_model.specialization import INT32_MAX, INT32_MIN, int_spec  # noqa: F401 - one rule, shared

try:  # pragma: no cover - exercised by the import-without-triton test in a subprocess
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None
    tl = None

HAS_TRITON = triton is not None


def require_triton() -> None:
    if not HAS_TRITON:
        raise RuntimeError("executor.kernels needs Triton (from a clone of warmup-planner: pip install '.[gpu]')")


def interpreting() -> bool:
    return HAS_TRITON and bool(triton.knobs.runtime.interpret)


class LazyKernel:
    """``triton.jit(fn, **jit_kwargs)``, built on first use (once per TRITON_INTERPRET mode)."""

    def __init__(self, fn, **jit_kwargs):
        self.fn = fn
        self.jit_kwargs = jit_kwargs
        self._built: dict[bool, object] = {}

    def get(self):
        """The JITFunction (or InterpretedFunction): its ``device_caches`` count compiled variants."""
        require_triton()
        mode = interpreting()
        kernel = self._built.get(mode)
        if kernel is None:
            if mode:
                _fix_interpreter_index()
            kernel = self._built[mode] = triton.jit(self.fn, **self.jit_kwargs)
        return kernel

    def __getitem__(self, grid):
        return self.get()[grid]


def _fix_interpreter_index() -> None:
    """Let the interpreter use int arguments as ``range()`` bounds under NumPy >= 2.4.

    Triton 3.6's interpreter holds an int argument as a 1-element array and its
    ``tensor.__index__`` calls ``int()`` on it, which NumPy 2.4 rejects ("only
    0-dimensional arrays can be converted to Python scalars", triton-lang/triton#9171,
    fixed upstream after 3.6.0). This applies the upstream fix (squeeze first), once,
    and only when a kernel is built for the interpreter.
    """
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "squeezes_index", False):
        return

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor.squeezes_index = True
    interpreter._patch_lang_tensor = patch_lang_tensor
