"""The generic-variant closure (executor/triton_generic.py) through Triton's real binder and
compiler for SM 9.0, without a GPU: generic_variants_worker.py runs the scenarios in a fresh
process (no interpreter) and says what it saw. After the seal, a launch of a value class the warmup
never saw runs the generic variant and nothing compiles; a new constexpr still compiles; the rule
itself is kernel_model's (tested here directly)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("triton") is None or importlib.util.find_spec("triton.backends.nvidia") is None:
    pytest.skip("needs triton with its NVIDIA backend (the README's test line installs it)", allow_module_level=True)

from kernel_model.specialization import generic_entry, generic_specialization  # noqa: E402

WORKER = Path(__file__).with_name("generic_variants_worker.py")


@pytest.fixture(scope="module")
def worker_tmp(tmp_path_factory) -> Path:
    """The worker's temporary directory (its TMPDIR), where its scenarios' Triton caches are made."""
    return tmp_path_factory.mktemp("generic-variants-worker")


@pytest.fixture(scope="module")
def seen(worker_tmp):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TMPDIR"] = str(worker_tmp)
    run = subprocess.run([sys.executable, str(WORKER)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.splitlines()[-1])


def scenario(seen, name: str) -> dict:
    out = seen[name]
    assert "error" not in out, out.get("error")
    return out


def test_a_class_the_warmup_did_not_see_runs_the_generic_variant(seen):
    s = scenario(seen, "unseen_class_runs_generic")
    assert s["first"] == ["_scale_rows"]
    assert s["close"] == [1, 1, []]
    assert s["after_close"] == ["_scale_rows", "_scale_rows"]  # the generic variant, before the seal
    assert s["after_seal"] == s["after_close"], "a launch after the seal compiled"
    assert s["uses"] == ["_scale_rows"]
    sig = s["signature"]
    assert sig["n_cols"] == "i32" and sig["stride"] == "i32" and sig["factor"] == "i32"
    assert s["attrs"] is False, "the generic variant carries no divisibility facts"
    assert s["again_same"] and s["uses_after_again"] == 1, "then a plain cache hit, reported once"


def test_an_int_equal_to_one_and_an_unaligned_pointer_run_the_generic_variant(seen):
    s = scenario(seen, "one_and_unaligned_run_generic")
    assert s["compiled"] == ["_scale_rows", "_scale_rows"] and s["uses"] == 2


def test_a_new_constexpr_still_compiles_and_the_monitors_see_it(seen):
    s = scenario(seen, "new_constexpr_compiles")
    assert s["compiled"].count("_scale_rows") == 3 and s["uses"] == 0


def test_before_the_seal_misses_compile_and_are_recorded(seen):
    assert scenario(seen, "before_seal_recorded")["close"] == [2, 0, 2]


def test_a_generic_variant_that_will_not_load_is_dropped_and_its_misses_compile(seen):
    s = scenario(seen, "unloadable_dropped")
    assert s["built"] == 0 and s["failed"] == ["_scale_rows"]
    assert s["compiled"].count("_scale_rows") == 3 and s["uses"] == 0


def test_install_is_once_per_process_and_uninstall_restores_triton(seen):
    s = scenario(seen, "install_once")
    assert s["ok"] and s["refused"] and "another" in s["reason"] and s["restored"]
    assert s["quieted"] and s["hooks_kept"], "while installed: the hook knobs read as set (off the pool)"
    assert s["knobs_restored"], "Triton's hook knobs' classes as they were"


# --- ahead: each twin's build starts when its variant is recorded ---------------------------------------

def test_a_twin_is_built_in_the_background_before_close_and_counted_ahead(seen):
    s = scenario(seen, "ahead_builds_before_close")
    assert s["started"], "the twin did not reach the kernel's cache before close()"
    assert s["threads"] >= 1, "built on the closure's own pool (warmup-generic)"
    assert s["close"] == {"seen": 1, "built": 1, "ahead": 1, "already": 0, "failed": []}
    assert s["after_close"] == s["compiled_before_close"] == ["_scale_rows"], "close() compiled nothing more"
    assert s["uses"] == ["_scale_rows"] and s["after_seal"] == ["_scale_rows"], "the twin stands in after the seal"
    assert s["threads_after_close"], "close() ends the pool's threads"


def test_with_ahead_off_nothing_is_built_before_close_and_the_twins_are_the_same(seen):
    off, on = scenario(seen, "ahead_off_builds_at_close"), scenario(seen, "ahead_builds_before_close")
    assert off["before_close"] == 1 and off["threads"] == 0
    assert off["close"] == {"seen": 1, "built": 1, "ahead": 0, "already": 0, "failed": []}
    assert off["compiled"] == ["_scale_rows", "_scale_rows"]
    assert off["keys"] == on["keys"] and len(on["keys"]) == 2


def test_the_monitors_step_counts_leave_out_the_twins_built_ahead(seen):
    s = scenario(seen, "ahead_unseen_by_the_monitor")
    ahead, at_close = s["ahead"], s["at_close"]
    assert ahead["built_in_step"] and ahead["ahead"] == 1
    assert ahead["step"] == [1, 1, {"_scale_rows": 1}], "the step counts its own launch's compile only"
    assert ahead["close_step"] == [0, 0] and ahead["totals"] == [1, 1]
    # the same monitor sees a twin that close() builds, in close's step: the counts above can differ
    assert not at_close["built_in_step"] and at_close["step"] == ahead["step"]
    assert at_close["close_step"] == [1, 1] and at_close["totals"] == [2, 2]


def test_uninstall_with_pending_jobs_returns_at_once_and_cancels_them(seen):
    s = scenario(seen, "ahead_uninstall_with_pending_jobs")
    assert s["jobs"] == 4 and s["cancelled"] == 3, "one job running, three pending and cancelled"
    assert s["seconds"] < 1.0 and s["restored"] and s["threads_gone"]


def test_a_failed_background_build_is_built_again_at_close_and_recorded_if_it_fails_there(seen):
    s = scenario(seen, "ahead_failure_is_built_again_at_close")
    assert s["1"] == {"built": 1, "ahead": 0, "failed": []}
    assert s["2"] == {"built": 0, "ahead": 0, "failed": [["_scale_rows", "RuntimeError: a background build failed"]]}


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


def test_the_scenarios_triton_caches_are_removed_when_the_worker_ends(seen, worker_tmp):
    left = [p.name for p in worker_tmp.iterdir() if p.name.startswith("generic-variants-")]
    assert len(seen) > 1 and left == [], "a Triton cache left in the temporary directory"
