"""The JSON report: written atomically, always; stage totals; the summary table; exit codes."""

from __future__ import annotations

import functools
import json
import os
import sys
import types

import pytest
from execlib import TINY, TUNED_PLAN, by_id, load_report, run_cli

from executor import report as report_mod
from executor.caches import triton as triton_cache
from executor.records import StepRecord
from executor.report import Report
from planner.hashing import digest
from planner.plan.expanded import ExpandedPlan


def record(i, stage="s", status="ok", calls=3, compiled=1, disk=2):
    jit = None if compiled is None else {"compiled": compiled, "disk_loads": disk}
    return StepRecord(id=f"{stage}/x{i}", stage=stage, kind="gemm", status=status, kernel_calls=calls, wall_s=0.5,
                      error=None if status == "ok" else "boom", jit=jit)


def test_stage_summary_and_table():
    r = Report(ExpandedPlan(plan="p", engine="e", planner_version="0", digest="sha256:x", inputs={}, steps=()))
    for i, status in enumerate(("ok", "ok", "failed", "unavailable", "skipped")):
        r.add_step(record(i, status=status))
    r.add_step(record(9, stage="t", compiled=None))
    r.stage_wall = {"s": 2.0, "t": 1.0}
    s = r.stage_summary("s")
    assert (s["steps"], s["run"], s["ok"], s["failed"], s["unavailable"], s["skipped"]) == (5, 3, 2, 1, 1, 1)
    assert (s["kernel_calls"], s["compiled"], s["disk_loads"], s["wall_s"]) == (15, 5, 10, 2.0)
    assert r.stage_summary("t")["compiled"] is None  # monitor off: not counted, shown as "-"
    table = r.render_summary()
    assert "stage" in table and "compiled" in table and "disk" in table and "wall_s" in table
    assert "failed: s/x2: boom" in table and "unavailable: s/x3: boom" in table
    assert r.exit_code() == 1


@pytest.mark.parametrize("statuses,allow,code", [
    (("ok", "skipped"), False, 0), (("ok", "unavailable"), False, 1), (("ok", "unavailable"), True, 0),
    (("failed",), True, 1),
])
def test_exit_codes(statuses, allow, code):
    r = Report(None, {"allow_missing": allow})
    for i, s in enumerate(statuses):
        r.add_step(record(i, status=s))
    assert r.exit_code() == code
    r.interrupted = True
    assert r.exit_code() == 130


def test_verify_compiles_fail_the_run():
    r = Report(None)
    r.add_step(record(0))
    r.verify = {"calls": 10, "keys": [], "seed": 0, "post_seal_compiles": 1, "failures": [], "wall_s": 0.1,
                "events": [{"step": "verify/x/m3", "kernel": "k"}]}
    assert r.exit_code() == 1 and "post-seal: verify/x/m3: k" in r.render_summary()


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    path.write_text('{"old": true}\n')
    r = Report(ExpandedPlan(plan="p", engine="e", planner_version="0", digest="", inputs={}, steps=()))

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(report_mod.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        r.write(str(path))
    assert json.loads(path.read_text()) == {"old": True}
    assert os.listdir(tmp_path) == ["report.json"]  # no temporary file left behind


def test_report_written_for_a_dry_run(tmp_path, capsys):
    out = tmp_path / "r.json"
    code, stdout, _ = run_cli([TUNED_PLAN, "--engine", TINY, "--dry-run", "--report", str(out)], capsys)
    assert code == 0
    rep = load_report(out)
    assert rep["format"] == "warmup-execute-report/v1" and rep["status"] == "ok" and rep["exit_code"] == 0
    assert rep["plan"] == "triton-tuned" and rep["engine"] == "tiny-moe"
    assert [s["stage"] for s in rep["stages"]] == ["autotune", "triton_gemm", "prefill_attention"]
    assert all(s["status"] == "ok" and s["backend"] == "null" for s in rep["steps"])
    assert by_id(rep)["triton_gemm/gemm-n256-k128"]["kernel_calls"] == 4
    assert "total" in stdout


def test_report_written_on_invalid_input(tmp_path, capsys):
    out = tmp_path / "r.json"
    code, _, err = run_cli(["triton", "--engine", "no-such-engine", "--report", str(out)], capsys)
    assert code == 2 and "no built-in engine" in err
    rep = load_report(out)
    assert rep["status"] == "invalid input" and rep["exit_code"] == 2 and "no-such-engine" in rep["error"]


def _dg_record(step_id, jit, precompile=None):
    from executor.records import StepRecord

    rec = StepRecord(id=step_id, stage="deep_gemm", kind="gemm", backend="deep_gemm", planned_backend="deep_gemm",
                     kernel_calls=1, jit=jit, precompile=precompile)
    return rec


def test_deep_gemm_compiles_and_loads_are_counted_in_the_stage_and_summary():
    """Issue 18: the summary said "0 compiled" although 141 DeepGEMM kernels were compiled."""
    from executor.jit_monitor import StepCounts
    from executor.report import Report

    report = Report()
    main = StepCounts(deep_gemm_jit=1, deep_gemm_loads=None).as_dict()
    loaded = StepCounts(deep_gemm_loads=3).as_dict()
    report.add_step(_dg_record("deep_gemm/a", main, {"compiled": 2, "deep_gemm_compiled": 2}))
    report.add_step(_dg_record("deep_gemm/b", loaded))
    [stage] = report.stages()
    assert (stage["compiled"], stage["compiled_main"], stage["compiled_pool"]) == (3, 1, 2)
    assert (stage["deep_gemm_compiled"], stage["deep_gemm_loaded"], stage["disk_loads"]) == (3, 3, 3)
    total = report.render_summary().splitlines()[-2].split()
    assert total[0] == "total" and total[-3:-1] == ["3", "3"]  # compiled, disk


def test_deep_gemm_loads_not_counted_stay_none():
    from executor.jit_monitor import StepCounts
    from executor.report import Report

    report = Report()
    report.add_step(_dg_record("deep_gemm/a", StepCounts(deep_gemm_jit=0).as_dict()))
    [stage] = report.stages()
    assert stage["deep_gemm_loaded"] is None and stage["deep_gemm_compiled"] == 0


@pytest.mark.parametrize("libtriton, expected", [
    (None, None),  # Triton not imported: nothing asked
    (type("Old", (), {})(), None),  # a Triton without the list
    (type("T", (), {"get_cache_invalidating_env_vars": staticmethod(lambda: {"TRITON_F32_DEFAULT": "ieee", "A": "1"})})(),
     {"A": "1", "TRITON_F32_DEFAULT": "ieee"}),
    (type("Broken", (), {"get_cache_invalidating_env_vars": staticmethod(lambda: 1 / 0)})(), None),
])
def test_the_report_names_the_environment_tritons_cache_key_holds(monkeypatch, libtriton, expected):
    """Part AN: a warm start found none of its Triton kernels on disk in the same directory; the variables
    Triton hashes into every key are what two such runs' reports can be compared by."""
    if libtriton is None:
        monkeypatch.delitem(sys.modules, "triton._C.libtriton", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "triton._C.libtriton", libtriton)
    env = report_mod.environment()
    assert env.get("triton_cache_env") == expected and (("triton_cache_env" in env) == (expected is not None))


def _module_with_triton_key(called: bool):
    @functools.lru_cache
    def triton_key():
        return "3.6.0-build-of-this-machine"
    if called:
        triton_key()
    return types.SimpleNamespace(triton_key=triton_key)


def _stand_in_triton(monkeypatch, where: str, module) -> None:
    """Triton's two homes of triton_key as stand-ins (the other one empty, so that nothing of the real
    Triton is imported under them), `module` at `where`."""
    for name in triton_cache.TRITON_KEY_MODULES:
        monkeypatch.setitem(sys.modules, name, module if name == where else types.SimpleNamespace())


@pytest.mark.parametrize("where", ["triton.runtime.cache", "triton.compiler.compiler"])
def test_the_report_names_the_triton_key_this_process_used(monkeypatch, where):
    """Part AO: a second warm start compiled every Triton kernel again in the cache directory where the
    runs before and after it loaded them, with the same cache-invalidating environment: the digest of
    Triton's own build (and its backend's) is what tells such a run from a good one."""
    _stand_in_triton(monkeypatch, where, _module_with_triton_key(called=True))
    parts = report_mod.environment()["triton_key_parts"]
    assert parts == {"triton_key": digest("3.6.0-build-of-this-machine")}  # no backend to ask: none named


def test_the_report_names_the_backend_hash_of_the_current_target(monkeypatch):
    """The backend's part of the key (ptxas's version and the arch) for the device the process compiled for."""
    module = _module_with_triton_key(called=True)
    module.make_backend = lambda target: types.SimpleNamespace(hash=lambda: f"ptxas 13.0-{target}")
    _stand_in_triton(monkeypatch, "triton.compiler.compiler", module)
    active = types.SimpleNamespace(get_current_target=lambda: 90)
    monkeypatch.setitem(sys.modules, "triton.runtime.driver",
                        types.SimpleNamespace(driver=types.SimpleNamespace(active=active)))
    parts = report_mod.environment()["triton_key_parts"]
    assert parts == {"triton_key": digest("3.6.0-build-of-this-machine"), "backend": digest("ptxas 13.0-90")}


def test_the_report_never_builds_tritons_key_itself(monkeypatch):
    """Building triton_key reads libtriton whole: a process that never compiled or loaded a kernel
    has none to report, and the report does not make one."""
    module = _module_with_triton_key(called=False)
    _stand_in_triton(monkeypatch, "triton.runtime.cache", module)
    assert "triton_key_parts" not in report_mod.environment()
    assert module.triton_key.cache_info().currsize == 0
