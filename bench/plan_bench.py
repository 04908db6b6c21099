"""Wall time of `warmup plan` against a bare interpreter (issue 2's performance target).

Target: `warmup plan vllm` on the DeepSeek-V3 engine, yaml and json, and with
`full` DeepGEMM M-values, in at most 3x the time of `python3 -c pass` on the same
machine. Each command runs REPEAT times in a fresh process; we report the median
and the minimum (the minimum is the least noisy estimate of the cost).

    python3 bench/plan_bench.py [--repeat 15]
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

ENGINE = "deepseek-v3-fp8-tp8-h200"
FULL_PLAN = """name: vllm-full
extends: vllm
stages:
  - name: deep_gemm
    with: {mode: full}
"""


def time_command(argv: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    warmup = shutil.which("warmup") or sys.exit("install the package first: python3 -m pip install .")
    tmp = tempfile.mkdtemp()
    full_plan = os.path.join(tmp, "vllm-full.yaml")
    with open(full_plan, "w") as f:
        f.write(FULL_PLAN)
    py = sys.executable
    cases = [
        ("python3 -c pass", [py, "-c", "pass"]),
        ("python3 -c 'import yaml, jsonschema'", [py, "-c", "import yaml, jsonschema"]),
        ("warmup plan vllm (yaml)", [warmup, "plan", "vllm", "--engine", ENGINE]),
        ("warmup plan vllm (json)", [warmup, "plan", "vllm", "--engine", ENGINE, "-f", "json"]),
        ("warmup plan vllm-head (yaml)", [warmup, "plan", "vllm-head", "--engine", ENGINE]),
        ("warmup plan vllm, full M (yaml)", [warmup, "plan", full_plan, "--engine", ENGINE]),
        ("warmup plan vllm, full M (json)", [warmup, "plan", full_plan, "--engine", ENGINE, "-f", "json"]),
    ]
    results = [(name, time_command(argv, args.repeat)) for name, argv in cases]
    base = min(results[0][1])
    print(f"| command | median s | min s | min / bare python |\n|---|---|---|---|")
    for name, times in results:
        print(f"| `{name}` | {statistics.median(times):.3f} | {min(times):.3f} | {min(times) / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
