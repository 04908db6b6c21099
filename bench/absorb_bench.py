"""Issue 38's target: one command from a log to a reviewed diff, under a second on the CPU machine.

Times, as a user runs them (fresh `warmup` processes), `warmup absorb LOG --plan P --engine E -o
overlay.yaml` followed by `warmup diff P overlay.yaml --engine E`, over the recorded stock vLLM
0.25 log of Qwen3-30B-A3B (tests/fixtures/logs), and prints the median and worst of N runs:

    python3 bench/absorb_bench.py [--runs 10] [--log LOG] [--plan vllm-0.25] [--engine qwen3-30b-a3b-fp8-h100]

A benchmark, not a test: the machine's load decides the numbers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOG = os.path.join(ROOT, "tests", "fixtures", "logs", "vllm-0.25-qwen3-moe-stock.server.log")


def warmup() -> list:
    """The installed `warmup`, else this checkout's CLI through the running Python."""
    found = shutil.which("warmup")
    return [found] if found else [sys.executable, "-m", "planner.cli"]


def one_run(args, out_dir: str) -> tuple[float, float]:
    overlay = os.path.join(out_dir, "overlay.yaml")
    start = time.perf_counter()
    subprocess.run([*warmup(), "absorb", args.log, "--plan", args.plan, "--engine", args.engine, "-o", overlay],
                   check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    middle = time.perf_counter()
    diff = subprocess.run([*warmup(), "diff", args.plan, overlay, "--engine", args.engine, "--no-color"],
                          stdout=subprocess.DEVNULL, cwd=ROOT)
    end = time.perf_counter()
    if diff.returncode not in (0, 1):
        raise SystemExit(f"warmup diff failed (exit {diff.returncode})")
    return middle - start, end - middle


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--log", default=LOG)
    parser.add_argument("--plan", default="vllm-0.25")
    parser.add_argument("--engine", default="qwen3-30b-a3b-fp8-h100")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out_dir:
        runs = [one_run(args, out_dir) for _ in range(args.runs)]
    totals = [a + d for a, d in runs]
    print(f"absorb -> diff over {args.runs} runs ({os.path.basename(args.log)}, {args.plan}, {args.engine}): "
          f"median {statistics.median(totals):.3f} s (absorb {statistics.median(a for a, _ in runs):.3f} s, "
          f"diff {statistics.median(d for _, d in runs):.3f} s), worst {max(totals):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
