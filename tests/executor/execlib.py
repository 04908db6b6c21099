"""Helpers for the executor tests: run `warmup execute` in-process or in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TINY = os.path.join(HERE, "data", "tiny-moe.yaml")
TINY_PLAN = os.path.join(HERE, "data", "tiny-triton.yaml")
# The triton plan before exact mode (autotune, every M, listed token counts): more steps per kind.
TUNED_PLAN = os.path.join(HERE, "data", "triton-tuned.yaml")


def run_cli(args: list[str], capsys=None) -> tuple[int, str, str]:
    """`warmup execute ...` in this process: (exit code, stdout, stderr)."""
    from executor.cli import main

    try:
        code = main(["execute", *args])
    except SystemExit as e:  # argparse usage errors
        code = e.code
    out, err = capsys.readouterr() if capsys is not None else ("", "")
    return code, out, err


def run_subprocess(args: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    return subprocess.run([sys.executable, "-m", "executor.cli", "execute", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def load_report(path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def by_id(report: dict) -> dict:
    return {s["id"]: s for s in report["steps"]}
