"""Helpers for the executor tests: run `warmup execute` in-process or in a subprocess; name a
kernel config (no torch, no Triton)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kernel_model.gemm_tables import CONFIG_KEYS

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


def config_key(config) -> tuple[int, ...]:
    """Hashable form of a kernel config, in CONFIG_KEYS order (test ids, set members, JSON rows)."""
    return tuple(int(config[key]) for key in CONFIG_KEYS)
