"""`warmup execute` writes nothing to the process environment beyond its run (issue 36 item 5):
what the run sets (executor/cli.py run_environment) is scoped and restored (scoped_environ)."""

from __future__ import annotations

import argparse
import os
import sys

import pytest

from executor.cli import run_environment
from executor.environ import scoped_environ


def args(**given) -> argparse.Namespace:
    base = {"kernel_config_dir": None, "device": None, "dry_run": False}
    return argparse.Namespace(**{**base, **given})


def test_each_name_is_restored_as_it_was(monkeypatch):
    monkeypatch.setenv("WARMUP_TEST_SET", "caller")
    monkeypatch.delenv("WARMUP_TEST_UNSET", raising=False)
    with scoped_environ({"WARMUP_TEST_SET": "run", "WARMUP_TEST_UNSET": "run"}):
        assert (os.environ["WARMUP_TEST_SET"], os.environ["WARMUP_TEST_UNSET"]) == ("run", "run")
    assert os.environ["WARMUP_TEST_SET"] == "caller" and "WARMUP_TEST_UNSET" not in os.environ
    with pytest.raises(KeyboardInterrupt), scoped_environ({"WARMUP_TEST_SET": "run"}):
        raise KeyboardInterrupt  # a run that ends in Ctrl-C restores it too
    assert os.environ["WARMUP_TEST_SET"] == "caller"


def test_the_run_sets_the_table_folder_and_the_interpreter_only_where_asked(monkeypatch, tmp_path):
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert run_environment(args()) == {}  # CUDA, the caller's table folder
    assert run_environment(args(device="cpu", kernel_config_dir=str(tmp_path))) == {
        "WARMUP_KERNEL_CONFIG_DIR": str(tmp_path), "TRITON_INTERPRET": "1"}
    assert run_environment(args(dry_run=True)) == {}  # a dry run imports no Triton
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert run_environment(args(device="cpu")) == {}  # the caller's own mode
