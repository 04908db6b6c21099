#!/usr/bin/env python3
"""Distinct DeepGEMM kernels per shape, from the SM90 model (kernel_model/deep_gemm.py).

    python3 bench/deep_gemm_keys.py [--engine NAME ...] [--keys]

For each DeepGEMM shape of each engine (default: DeepSeek-V3 TP8 and Qwen3-30B-A3B FP8): the
kernels that dense M = 1..max_num_batched_tokens compile, and for the grouped GEMM the kernels
of the M_sums each vLLM formula produces (v0.11, and main at 017e9f4448b7: plans/vllm-head.yaml,
"HEAD" in the output) and of v0.11's warmup range (block_m .. MAX_M). Also the calls each mode
plans, and the kernels that vLLM's `relax` M-values miss (dense; grouped, (h): 017e9f4448b7's
relaxed M_sums against all its formula produces). No GPU; bench/deep_gemm_gpu.py checks the
same numbers on one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from planner.engine.config import load_engine  # noqa: E402
from planner.plan.authored import load_plan  # noqa: E402
from planner.plan.expand import expand  # noqa: E402

ENGINES = ("deepseek-v3-fp8-tp8-h200", "qwen3-30b-a3b-fp8-h100")


def deep_gemm_steps(plan: str, engine: str, mode: str) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(f"name: keys\nextends: {plan}\nstages: [{{name: deep_gemm, with: {{mode: {mode}}}}}]\n")
    try:
        steps = expand(load_plan(f.name), load_engine(engine)).steps
    finally:
        os.unlink(f.name)
    return {s.id.split("/", 1)[1]: s for s in steps if s.stage == "deep_gemm"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", action="append", help="engine name or path (repeatable)")
    parser.add_argument("--keys", action="store_true", help="also list each kernel's key and first M")
    args = parser.parse_args()
    for engine in args.engine or ENGINES:
        relax = deep_gemm_steps("vllm", engine, "relax")
        v011 = deep_gemm_steps("vllm", engine, "exact")
        head = deep_gemm_steps("vllm-head", engine, "exact")
        head_relax = deep_gemm_steps("vllm-head", engine, "relax")
        print(f"\n{engine}")
        print(f"  {'step':36} {'kernels':>7} {'calls: exact':>12} {'relax':>6} {'relax misses':>12}"
              "   grouped kernels: v0.11 M_sums / HEAD M_sums / block_m..MAX_M")
        for step_id, s in v011.items():
            if s.kind == "gemm":
                missed = set(s.compile_keys) - set(relax[step_id].compile_keys)
                print(f"  {step_id:36} {len(s.compile_keys):>7} {len(s.m_values):>12} "
                      f"{len(relax[step_id].m_values):>6} {len(missed):>12}")
            else:  # 017e9f4448b7's relaxed M_sums against every M_sum its formula produces
                missed = set(head[step_id].compile_keys) - set(head_relax[step_id].compile_keys)
                print(f"  {step_id:36} {len(s.compile_keys):>7} {len(s.m_values):>12} "
                      f"{len(relax[step_id].m_values):>6} {len(missed):>9} (h)   {len(s.compile_keys)} / "
                      f"{len(head[step_id].compile_keys)} / {len(relax[step_id].compile_keys)}")
            if args.keys:
                for key, m in zip(s.compile_keys, s.m_values):
                    print(f"      M={m:<6} {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
