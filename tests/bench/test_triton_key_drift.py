"""bench/triton_key_drift.py: two plan reports' Triton key parts side by side (parts AN and AO: a warm
start compiled every @triton.jit kernel again where the cold start had written them)."""

from __future__ import annotations

import json

import pytest

from bench import triton_key_drift as drift


def report(path, compiled, triton_key="t1", backend="b1", env=None):
    path.write_text(json.dumps({
        "environment": {"triton_key_parts": {"triton_key": triton_key, "backend": backend}, "triton_cache_env": env or {}},
        "jit_monitor": {"details": {"triton": {"compiled_keys": compiled}}}}))
    return str(path)


def entry(kernel, key, source, env=None):
    return {"kernel": kernel, "key": key, "source": source, **({"env": env} if env else {})}


COLD = [entry("_topk_topp_kernel", "k1", "s1"), entry("_topk_topp_kernel", "k2", "s2"),
        entry("_gather_block_tables_kernel", "k3", "s3"), entry("_penalties_kernel", "k4", "s4")]


@pytest.mark.parametrize("warm, triton_key, verdict", [
    (entry("_topk_topp_kernel", "k2", "s2"), "t1", "same key"),
    (entry("_gather_block_tables_kernel", "k9", "s9"), "t1", "source moved"),
    (entry("_gather_block_tables_kernel", "k9", "s3"), "t1", "options moved"),
    (entry("_gather_block_tables_kernel", "k9", "s3"), "t2", "process moved"),
    (entry("_gather_block_tables_kernel", "k9", "s3", env={"TRITON_F32_DEFAULT": "ieee"}), "t1", "process moved"),
    (entry("_gather_block_tables_kernel", "k9", "s3"), None, "options or process moved"),
    (entry("_bincount_kernel", "k8", "s8"), "t1", "not in first"),
    (entry("_penalties_kernel", "k7", None), "t1", "own part unknown"),
])
def test_each_kernel_the_second_start_compiled_gets_the_part_that_moved(tmp_path, warm, triton_key, verdict):
    first = drift.load(report(tmp_path / "cold.json", COLD))
    second = drift.load(report(tmp_path / "warm.json", [warm], triton_key=triton_key))
    assert drift.kernel_verdicts(first, second) == [(warm["kernel"], verdict, warm["key"])]


def test_the_process_parts_are_compared_first_and_a_missing_one_is_unknown(tmp_path, capsys):
    cold = report(tmp_path / "cold.json", COLD)
    warm_path = tmp_path / "warm.json"
    warm_path.write_text(json.dumps({"environment": {"triton_key_parts": {"triton_key": "t2"}},
                                     "jit_monitor": {"details": {"triton": {"compiled_keys": [
                                         entry("_topk_topp_kernel", "k5", "s1")]}}}}))
    assert drift.main([cold, str(warm_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:2] == ["triton_key", "differs"] and out[2].split()[:2] == ["backend", "unknown"]
    assert out[3].split()[:2] == ["environment", "unknown"]
    assert "1 @triton.jit kernels compiled by the second start" in out and out[-1].startswith("process moved")


def test_a_report_without_key_parts_compares_as_nothing_compiled_and_says_so(tmp_path, capsys):
    (tmp_path / "old.json").write_text(json.dumps({"environment": {}, "jit_monitor": {}}))
    old = drift.load(str(tmp_path / "old.json"))
    assert old == {"process": {}, "env": None, "compiled": []}
    cold = report(tmp_path / "cold.json", COLD)
    assert drift.kernel_verdicts(drift.load(cold), old) == []
    assert drift.main([cold, str(tmp_path / "old.json")]) == 0
    assert "the second report keeps no Triton key parts" in capsys.readouterr().out


def test_an_unreadable_report_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{")
    assert drift.main([str(tmp_path / "bad.json"), str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("triton_key_drift: ")
