"""Wall time of `warmup plan` against a bare interpreter (issue 2's performance target).

Target: `warmup plan vllm` on the DeepSeek-V3 engine, yaml and json, and with
`full` DeepGEMM M-values, in at most 3x the time of `python3 -c pass` on the same
machine. Each command runs REPEAT times in a fresh process; we report the median
and the minimum (the minimum is the least noisy estimate of the cost).

    python3 bench/plan_bench.py [--repeat 15] [--compile]

The interpreter's own modules start from bytecode; the planner's do only if they have
some. An installed planner does (`pip install .` compiles it), but an editable install
under PYTHONDONTWRITEBYTECODE compiles the planner's source on every run (about 18 ms
here). The first line says which case was measured; --compile byte-compiles the planner
for the run (checked-hash .pyc files, removed afterwards), as an install would.
"""

from __future__ import annotations

import argparse
import compileall
import glob
import importlib.util
import os
import py_compile
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


PACKAGES = ("planner", "kernel_model")  # what `warmup plan` imports of this project


def planner_sources() -> tuple[list[str], list[str]]:
    """The packages `warmup plan` imports (this interpreter finds the same ones) and their modules."""
    packages = [os.path.dirname(importlib.util.find_spec(name).origin) for name in PACKAGES]
    return packages, [f for package in packages for f in glob.glob(os.path.join(package, "**", "*.py"), recursive=True)]


def bytecode_state(sources: list[str]) -> str:
    cached = sum(os.path.exists(importlib.util.cache_from_source(f)) for f in sources)
    state = f"planner bytecode ({', '.join(PACKAGES)}): {cached} of {len(sources)} modules have a .pyc"
    if cached < len(sources) and sys.flags.dont_write_bytecode:
        state += " (PYTHONDONTWRITEBYTECODE: the others compile from source on every run)"
    return state


def compile_planner(packages: list[str], sources: list[str]) -> list[str]:
    """Byte-compile the planner's packages as an install would; returns the .pyc files that are new."""
    new = [pyc for pyc in map(importlib.util.cache_from_source, sources) if not os.path.exists(pyc)]
    # checked-hash: a .pyc is used only while its source is unchanged, whatever the mtimes
    for package in packages:
        compileall.compile_dir(package, quiet=1, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    return new


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--compile", action="store_true",
                        help="byte-compile the planner for the run, as an installed package is")
    args = parser.parse_args()
    warmup = shutil.which("warmup") or sys.exit("install the package first: python3 -m pip install .")
    packages, sources = planner_sources()
    written = compile_planner(packages, sources) if args.compile else []
    try:
        print(bytecode_state(sources) + (" (--compile)" if args.compile else "") + "\n")
        return run(warmup, args.repeat)
    finally:
        for pyc in written:
            os.remove(pyc)


def run(warmup: str, repeat: int) -> int:
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
    results = [(name, time_command(argv, repeat)) for name, argv in cases]
    base = min(results[0][1])
    print(f"| command | median s | min s | min / bare python |\n|---|---|---|---|")
    for name, times in results:
        print(f"| `{name}` | {statistics.median(times):.3f} | {min(times):.3f} | {min(times) / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
