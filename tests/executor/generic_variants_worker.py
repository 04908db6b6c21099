"""The generic-variant closure (executor/triton_generic.py) through Triton's real binder and
compiler for SM 9.0, on a machine without a GPU (executor.kernels.jit.stand_in's offline driver).

A fresh process: tests/executor's conftest turns on Triton's interpreter, whose patching of
triton.language outlives the tests that ran interpreted, and the compiler needs the real one.
Runs every scenario of SCENARIOS and prints one JSON line: per scenario, the facts it saw (or its
error). test_triton_generic.py asserts on them. The first scenarios build every twin at close
(``ahead=False``); the ``ahead_*`` ones start each twin's build when its variant is recorded.

    python3 generic_variants_worker.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import triton.language as tl  # noqa: E402 - the real Triton, before the compiler is needed
from triton import knobs  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from executor.jit_monitor import Monitor  # noqa: E402
from executor.kernels.jit.stand_in import pointer, use_offline_driver  # noqa: E402
from executor.triton_generic import HOOKS, ORIGINALS, GenericVariants  # noqa: E402

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


def closure(load: bool = False, ahead: bool = False, threads: int = 2) -> GenericVariants:
    c = GenericVariants(on_generic=lambda use: None, threads=threads, load=load, ahead=ahead)  # no device here
    assert c.install(), c.reason
    return c


def cache_keys() -> list[str]:
    return sorted(str(k) for k in _scale_rows.device_caches[0][0]) if 0 in _scale_rows.device_caches else []


def wait_for_keys(n: int, seconds: float = 120.0) -> bool:
    """Until the kernel's in-memory cache holds n variants (a twin built in the background lands there)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if len(cache_keys()) >= n:
            return True
        time.sleep(0.01)
    return False


def pool_threads() -> int:
    return sum(t.name.startswith("warmup-generic") for t in threading.enumerate())


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
    knob_classes = {name: dict(vars(type(getattr(knobs, group)))) for group, name in HOOKS}
    hooks = {name: getattr(getattr(knobs, group), name) for group, name in HOOKS}
    first, second = GenericVariants(), GenericVariants()
    ok = first.install()
    quieted = all(type(vars(type(getattr(knobs, group)))[name]).__name__ == "_QuietHook" for group, name in HOOKS)
    hooks_while = {name: getattr(getattr(knobs, group), name) for group, name in HOOKS}
    refused = not second.install()
    reason = second.reason
    first.uninstall()
    knobs_restored = all(vars(type(getattr(knobs, group))).get(name) is knob_classes[name].get(name)
                         and getattr(getattr(knobs, group), name) is hooks[name] for group, name in HOOKS)
    return {"ok": ok, "refused": refused, "reason": reason, "restored": ORIGINALS not in vars(JITFunction)
            and (JITFunction._pack_args, JITFunction._do_compile) == (pack, compile_),
            "quieted": quieted, "hooks_kept": hooks_while == hooks, "knobs_restored": knobs_restored}


# --- ahead: each twin's build starts when its variant is recorded ---------------------------------------

def ahead_builds_before_close() -> dict:
    c = closure(ahead=True)
    launch(n_cols=64)
    before = cache_keys()                       # right after the miss: the twin is on its way
    started = wait_for_keys(2)                  # the twin lands in the kernel's cache, no close yet
    threads = pool_threads()
    compiled_before_close = list(COMPILED)
    result = c.close()
    after_close = list(COMPILED)
    keys = cache_keys()
    c.seal()
    launch(n_cols=50)                           # the twin built ahead stands in
    return {"first": len(before) >= 1, "started": started, "threads": threads,
            "compiled_before_close": compiled_before_close, "after_close": after_close,
            "close": {"seen": result.seen, "built": result.built, "ahead": result.ahead,
                      "already": result.already, "failed": result.failed},
            "keys": keys, "uses": [u.kernel for u in c.uses], "after_seal": list(COMPILED),
            "threads_after_close": _threads_gone()}


def ahead_off_builds_at_close() -> dict:
    c = closure(ahead=False)
    launch(n_cols=64)
    time.sleep(0.5)                             # time a background build would have had
    before = cache_keys()
    threads = pool_threads()
    result = c.close()
    return {"before_close": len(before), "threads": threads,
            "close": {"seen": result.seen, "built": result.built, "ahead": result.ahead,
                      "already": result.already, "failed": result.failed},
            "keys": cache_keys(), "compiled": list(COMPILED)}


def _threads_gone(seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while pool_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return pool_threads() == 0


def ahead_unseen_by_the_monitor() -> dict:
    """The project's JIT monitor counts per step whatever compiles on any thread: a twin built ahead
    while a step runs is not in that step's counts; a twin built at close is, in close's step."""
    out = {}
    for ahead in (True, False):
        _scale_rows.device_caches.clear()
        monitor = Monitor("warn").install()
        c = closure(ahead=ahead)
        try:
            monitor.begin_step("stage")
            launch(n_cols=64)
            built = wait_for_keys(2, 120.0 if ahead else 0.5)
            step = monitor.end_step()
            monitor.begin_step("close")
            result = c.close()
            closing = monitor.end_step()
        finally:
            c.uninstall()
            monitor.uninstall()
        out["ahead" if ahead else "at_close"] = {
            "built_in_step": built, "step": [step.jit_misses, step.compiled + step.disk_loads, step.kernels],
            "close_step": [closing.jit_misses, closing.compiled + closing.disk_loads],
            "built": result.built, "ahead": result.ahead,
            "totals": [monitor.totals.jit_misses, monitor.totals.compiled + monitor.totals.disk_loads]}
    return out


def _blocking_originals(release: threading.Event, fail: int = 0, entered: threading.Event | None = None):
    """The background jobs' _pack_args sets `entered` and waits for `release` (then raises `fail`
    times): the jobs read Triton's originals from ORIGINALS when submitted; the launches' own path
    is untouched."""
    originals = vars(JITFunction)[ORIGINALS]
    pack = originals["_pack_args"]
    left = [fail]

    def waiting_pack_args(*args, **kwargs):
        if entered is not None:
            entered.set()
        release.wait(60)
        if left[0]:
            left[0] -= 1
            raise RuntimeError("a background build failed")
        return pack(*args, **kwargs)
    originals["_pack_args"] = waiting_pack_args
    return lambda: originals.__setitem__("_pack_args", pack)


def ahead_uninstall_with_pending_jobs() -> dict:
    c = closure(ahead=True, threads=1)
    release, entered = threading.Event(), threading.Event()
    _blocking_originals(release, entered=entered)
    for block in (16, 32, 64, 128):             # four twins: one job running (waiting), three pending
        launch(n_cols=64, block=block)
    jobs = [future for _, _, future in c._jobs.values()]
    entered.wait(60)
    started = time.monotonic()
    c.uninstall()
    seconds = time.monotonic() - started
    cancelled = sum(f.cancelled() for f in jobs)
    release.set()
    return {"jobs": len(jobs), "seconds": seconds, "cancelled": cancelled,
            "restored": ORIGINALS not in vars(JITFunction), "threads_gone": _threads_gone()}


def ahead_failure_is_built_again_at_close() -> dict:
    """A job that fails raises nowhere: close() builds that twin itself (and says it, if it fails again)."""
    out = {}
    for fail in (1, 2):
        _scale_rows.device_caches.clear()
        c = closure(ahead=True)
        release = threading.Event()
        undo = _blocking_originals(release, fail=fail)
        try:
            launch(n_cols=64)                   # the launch is unaffected by its twin's job
            release.set()
            result = c.close()
        finally:
            undo()
            c.uninstall()
        out[str(fail)] = {"built": result.built, "ahead": result.ahead,
                          "failed": [[k, e] for k, e in result.failed]}
    return out


SCENARIOS = (unseen_class_runs_generic, one_and_unaligned_run_generic, new_constexpr_compiles,
             before_seal_recorded, unloadable_dropped, install_once, ahead_builds_before_close,
             ahead_off_builds_at_close, ahead_unseen_by_the_monitor, ahead_uninstall_with_pending_jobs,
             ahead_failure_is_built_again_at_close)


def run(scenario, caches: str) -> dict:
    """One scenario from a clean slate: its own Triton cache (a new directory under `caches`), no
    variant of the kernel in memory."""
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"{scenario.__name__}-", dir=caches)
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
    # the scenarios' Triton caches, removed when the last one ends (every scenario's background builds
    # have ended by then: close() waits for them, uninstall's scenario waits for its threads to end)
    with tempfile.TemporaryDirectory(prefix="generic-variants-", ignore_cleanup_errors=True) as caches:
        results = {s.__name__: run(s, caches) for s in SCENARIOS}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
