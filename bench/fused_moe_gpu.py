#!/usr/bin/env python3
"""Issue 24 item 5 on the GPU: the fused_moe stage, run through vLLM's own launcher, compiles the
plan's keys and nothing else, and a second run compiles nothing.

    python3 bench/fused_moe_gpu.py --out DIR [--engine qwen3-30b-a3b-fp8-h100] [--plan vllm-0.25] [--pass cold|warm]

Needs vLLM 0.25.0 importable and this project's plugin wheel installed (bench/vllm_gpu_setup.sh
parts core, ext, py and plugin: the wheel's entry points register the `vllm_triton` backend; the
checkout on PYTHONPATH alone has none), `source bench/vllm_gpu_setup.sh env`, and a GPU; the tuned tables are the installed vLLM's (planner.tables.vllm_moe finds them without
importing vLLM). Only the plan's fused_moe steps run, through `executor.run.execute` with the
`vllm_triton` backend as the plugin configures it (no pool, no runner), into TRITON_CACHE_DIR.
Pass `cold` (an empty cache): Triton compiles per step must equal the step's distinct compile
keys; then the same steps again in the same process: 0 compiles. Pass `warm` (a new process, the
same cache): 0 compiles. Writes DIR/fused_moe-<pass>.json; prints one line per check.
Without a GPU only --help and --dry-run (which plans and lists the steps) run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def fused_moe_plan(plan: str, engine_name: str):
    from planner.api import expand, load_engine
    from planner.plan.authored import load_plan

    engine = load_engine(engine_name)
    expanded = expand(load_plan(plan), engine)
    steps = [s for s in expanded.steps if getattr(s, "kernel", None) == "fused_moe_kernel"]
    return expanded._replace(steps=steps), engine


def run_once(expanded, engine):
    from executor.context import Options
    from executor.run import execute
    from vllm_bridge.releases import RELEASES

    release = RELEASES["0.25.0"]
    options = Options(on_error="continue", runner="none", jobs=0, jit_monitor="warn",
                      backend_settings={"vllm_triton": {"module": release.sampler_module}})
    started = time.time()
    report = execute(expanded, engine.facts, options)
    rows = report.stages()
    return {"wall_s": round(time.time() - started, 2), "status": report.status(),
            "compiled": sum(r.get("compiled") or 0 for r in rows),
            "disk_loads": sum(r.get("disk_loads") or 0 for r in rows),
            "failed": [r.error for r in report.steps if r.status != "ok"],
            "stages": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--engine", default="qwen3-30b-a3b-fp8-h100")
    parser.add_argument("--plan", default="vllm-0.25")
    parser.add_argument("--pass", dest="temp", choices=("cold", "warm"), default="cold")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    expanded, engine = fused_moe_plan(args.plan, args.engine)
    keys = sorted({k for s in expanded.steps for k in s.compile_keys})
    out = {"engine": args.engine, "plan": args.plan, "pass": args.temp, "steps": [s.id for s in expanded.steps],
           "keys": len(keys), "not_modelled": [g["family"] for g in expanded.not_modelled],
           "triton_cache": os.environ.get("TRITON_CACHE_DIR")}
    print(f"{args.engine}: {len(expanded.steps)} fused_moe steps, {len(keys)} distinct keys")
    if not args.dry_run:
        out["first"] = run_once(expanded, engine)
        checks = {"cold": ("compiled == planned keys", out["first"]["compiled"] == len(keys)),
                  "warm": ("0 compiled from the cache", out["first"]["compiled"] == 0)}
        name, ok = checks[args.temp]
        out["again"] = run_once(expanded, engine)
        out["checks"] = {name: ok, "no failed step": not out["first"]["failed"],
                         "0 compiled the second time in one process": out["again"]["compiled"] == 0}
        for check, passed in out["checks"].items():
            print(f"{'PASS' if passed else 'FAIL'} {check} (first: {out['first']['compiled']} compiled, "
                  f"{out['first']['disk_loads']} from disk, {out['first']['wall_s']} s)")
    with open(os.path.join(args.out, f"fused_moe-{args.temp}.json"), "w") as f:
        json.dump(out, f, indent=1, default=str)
    sys.exit(0)


if __name__ == "__main__":
    main()
