"""The generic-variant closure (executor/triton_generic.py) through Triton's real binder and
compiler for SM 9.0, on a machine without a GPU (executor.kernels.jit.stand_in's offline driver).

A fresh process: tests/executor's conftest turns on Triton's interpreter, whose patching of
triton.language outlives the tests that ran interpreted, and the compiler needs the real one.
Runs every scenario of SCENARIOS and prints one JSON line: per scenario, the facts it saw (or its
error). test_triton_generic.py asserts on them.

    python3 generic_variants_worker.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import triton  # noqa: E402,F401
import triton.language as tl  # noqa: E402
from triton import knobs  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from executor.kernels.jit.stand_in import pointer, use_offline_driver  # noqa: E402
from executor.triton_generic import ORIGINALS, GenericVariants  # noqa: E402

COMPILED: list[str] = []  # every compile, by kernel name (jit_post_compile_hook)


def _scale_rows(x_ptr, out_ptr, stride, n_cols, factor, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask)
    tl.store(out_ptr + row * stride + cols, x * factor, mask=mask)


_scale_rows = JITFunction(_scale_rows)


def launch(n_cols: int, stride: int = 64, factor: int = 3, aligned: bool = True, block: int = 64):
    x, out = pointer("float32", aligned=aligned), pointer("float32", aligned=aligned)
    return _scale_rows.warmup(x, out, stride, n_cols, factor, BLOCK=block, grid=(4,))


def closure(load: bool = False) -> GenericVariants:
    c = GenericVariants(on_generic=lambda use: None, threads=2, load=load)  # no device to load on here
    assert c.install(), c.reason
    return c


def unseen_class_runs_generic() -> dict:
    c = closure()
    launch(n_cols=64)                       # the warmup saw n_cols a multiple of 16 only
    first = list(COMPILED)
    result = c.close()
    after_close = list(COMPILED)
    c.seal()
    kernel = launch(n_cols=50)              # n_cols '' and stride 64: never compiled exactly
    after_seal = list(COMPILED)
    again = launch(n_cols=50)
    return {"first": first, "close": [result.seen, result.built, result.failed], "after_close": after_close,
            "after_seal": after_seal, "uses": [u.kernel for u in c.uses], "signature": dict(kernel.src.signature),
            "attrs": any(kernel.src.attrs.values()), "again_same": again is kernel, "uses_after_again": len(c.uses)}


def one_and_unaligned_run_generic() -> dict:
    c = closure()
    launch(n_cols=64, factor=1)             # factor 1: folded into the kernel as a constexpr
    c.close()
    c.seal()
    launch(n_cols=64, factor=2, aligned=False)
    launch(n_cols=1, stride=1)
    return {"compiled": list(COMPILED), "uses": len(c.uses)}


def new_constexpr_compiles() -> dict:
    c = closure()
    launch(n_cols=64, block=64)
    c.close()
    c.seal()
    launch(n_cols=64, block=128)            # BLOCK selects another program: no stand-in
    return {"compiled": list(COMPILED), "uses": len(c.uses)}


def before_seal_recorded() -> dict:
    c = closure()
    launch(n_cols=64)
    launch(n_cols=50, stride=50, aligned=False)  # itself the generic class: nothing more to build
    result = c.close()
    return {"close": [result.seen, result.built, result.already]}


def unloadable_dropped() -> dict:
    """close() loads each generic variant and builds its launcher (Triton would at the first launch,
    after ready); here there is no device to load on, the way a variant out of resources fails."""
    c = closure(load=True)
    launch(n_cols=64)
    result = c.close()
    c.seal()
    launch(n_cols=50)
    return {"built": result.built, "failed": [k for k, _ in result.failed], "compiled": list(COMPILED),
            "uses": len(c.uses)}


def install_once() -> dict:
    pack, compile_ = JITFunction._pack_args, JITFunction._do_compile
    first, second = GenericVariants(), GenericVariants()
    ok = first.install()
    refused = not second.install()
    reason = second.reason
    first.uninstall()
    return {"ok": ok, "refused": refused, "reason": reason, "restored": ORIGINALS not in vars(JITFunction)
            and (JITFunction._pack_args, JITFunction._do_compile) == (pack, compile_)}


SCENARIOS = (unseen_class_runs_generic, one_and_unaligned_run_generic, new_constexpr_compiles,
             before_seal_recorded, unloadable_dropped, install_once)


def run(scenario) -> dict:
    """One scenario from a clean slate: its own Triton cache, no variant of the kernel in memory."""
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="generic-variants-")
    _scale_rows.device_caches.clear()
    COMPILED.clear()
    owner = vars(JITFunction).get(ORIGINALS, {}).get("owner")
    try:
        return scenario()
    except Exception:  # noqa: BLE001 - reported, the next scenario runs
        return {"error": traceback.format_exc()[-3000:]}
    finally:
        current = vars(JITFunction).get(ORIGINALS, {}).get("owner")
        if current is not None and current is not owner:
            current.uninstall()


def main() -> None:
    use_offline_driver(90)
    knobs.runtime.jit_post_compile_hook = lambda **kw: COMPILED.append(kw["fn"].name)
    print(json.dumps({s.__name__: run(s) for s in SCENARIOS}))


if __name__ == "__main__":
    main()
