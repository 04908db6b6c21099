#!/usr/bin/env python3
"""Serving-trace proof: warm the reference runner with a plan (or not), seal, replay a trace.

    python3 bench/trace_proof.py --engine llama-3.1-8b-fp8-h100 --plan plans/reference.yaml \
        --steps 500 --json out/llama-warm.json
    python3 bench/trace_proof.py --engine llama-3.1-8b-fp8-h100 --no-warmup --steps 150 --json out/llama-cold.json

In one process: build the ReferenceRunner, then `executor.run.execute` the plan on it
(GEMM and attention steps on the Triton backend, batch and cudagraph steps on this
runner, each batch stage inside its warmup_scope) with `verify_trace`: the JIT monitor
is sealed and N steps of the seeded serving trace (executor.runner.trace) run on the
same runner, as `warmup execute --verify-trace N` does. With `--jobs N` (default: the CPU
cores) the plan's compile keys are compiled in N worker processes started first thing,
before this process imports torch and builds the runner, as a serving engine would start
them before loading its weights; `timeline` in the report says when the pool started, when
the runner was ready and when the warmup ended. `--no-warmup` executes an empty
plan: the seal comes first and every compile lands in the trace. Reports every Triton
compile after the seal with its kernel family and specialization, the first-step and
p50/p99 step latencies, and the wall time of each warmup stage. Exit status 0, or 1
when a warmup step or the trace failed, or with --expect-zero when anything compiled
during the trace.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from executor import run  # noqa: E402 - imports neither torch nor triton
from executor.precompile import default_jobs  # noqa: E402
from executor.runner.trace import TraceConfig, percentile  # noqa: E402
from planner.engine.config import load_engine  # noqa: E402
from planner.plan.authored import load_plan  # noqa: E402
from planner.plan.expand import expand  # noqa: E402
from planner.plan.expanded import ExpandedPlan  # noqa: E402

FAMILIES = ("attention", "gemm", "sampler", "bitmask", "kv_write", "inputs", "rejection_sampler", "other")


def family(kernel: str) -> str:
    from executor.runner.kernels import KERNEL_FAMILIES  # imports torch: only once the trace ran

    return KERNEL_FAMILIES.get(kernel, "other")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--plan", help="plan to execute before the trace (name or path)")
    g.add_argument("--no-warmup", action="store_true", help="seal right away: every compile lands in the trace")
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--device", default="cuda")
    p.add_argument("--arrival-rate", type=float, default=TraceConfig.arrival_rate)
    p.add_argument("--prompt-median", type=int, default=TraceConfig.prompt_median)
    p.add_argument("--output-median", type=int, default=TraceConfig.output_median)
    p.add_argument("--jobs", "-j", type=int, default=default_jobs(),
                   help="precompile worker processes (default: the CPU cores, at most 32; 0 or 1: none)")
    p.add_argument("--json", help="write the report here")
    p.add_argument("--expect-zero", action="store_true", help="exit 1 when the trace compiled anything")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    engine_obj = load_engine(args.engine)
    engine = engine_obj.facts  # the record the executor takes
    if args.plan:
        expanded = expand(load_plan(args.plan), engine_obj)
    else:  # no steps: sealed right away
        expanded = ExpandedPlan(plan=None, engine=engine.name, planner_version="", digest=None, inputs={},
                                steps=())
    options = run.Options(device=args.device, jit_monitor="warn", verify_trace=args.steps, verify_seed=args.seed,
                          jobs=args.jobs,
                          trace_config={"arrival_rate": args.arrival_rate, "prompt_median": args.prompt_median,
                                        "output_median": args.output_median})
    timeline = {"plan_ready_s": round(time.perf_counter() - t0, 3)}
    pre = run.start_precompile(expanded, engine, options) if args.plan and args.jobs > 1 else None
    timeline["precompile_started_s"] = round(time.perf_counter() - t0, 3)
    report, runner = start_runner(args, engine, timeline, t0)
    result = run.execute(expanded, engine, options, runner=runner, precompiler=pre)  # the runner stays ours
    report["timeline"] = timeline
    report["precompile"] = result.precompile
    if result.interrupted:
        runner.close()
        print("interrupted", file=sys.stderr)
        return 130
    if args.plan:
        report["warmup"] = warmup_summary(result, expanded)
        # execute's own start-up (backends, Triton's per-process costs), then the stages
        startup = (result.startup or {}).get("wall_s") or 0.0
        timeline["warmup_done_s"] = round(timeline["runner_ready_s"] + startup + report["warmup"]["total_s"], 3)
        report["plan_digest"] = expanded.digest
    report["graph_sizes"] = list(runner.graphs.sizes) if runner.graphs else []
    report["trace"] = summarize_trace(result.verify_trace)
    runner.close()
    return finish(args, report, result)


def start_runner(args, engine, timeline: dict, t0: float):
    """(the report's header, the reference runner): torch is imported here, after the pool started."""
    import torch

    from executor.runner import ReferenceRunner

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else None
    report = {"engine": engine.name, "plan": args.plan, "steps": args.steps, "seed": args.seed,
              "num_layers": args.num_layers, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "device": torch.cuda.get_device_name() if sync else args.device,
              "versions": {"torch": torch.__version__, "triton": _triton_version()},
              "speculative": engine.speculative._asdict()}
    start = time.perf_counter()
    runner = ReferenceRunner(engine, device=args.device, seed=args.seed, num_layers=args.num_layers)
    if sync:
        sync()
    report["runner_init_s"] = round(time.perf_counter() - start, 3)
    timeline["runner_ready_s"] = round(time.perf_counter() - t0, 3)
    return report, runner


def finish(args, report: dict, result) -> int:
    """Print and write the report; the exit code: 1 on a failed step, a trace error, or (--expect-zero) a compile."""
    print_summary(report)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    failed = [r for r in result.steps if r.status == "failed"]
    for r in failed:
        print(f"warmup step {r.id} failed: {r.error}", file=sys.stderr)
    if report["trace"]["error"]:
        print(f"trace failed: {report['trace']['error']}", file=sys.stderr)
    if failed or report["trace"]["error"]:
        return 1
    return 1 if args.expect_zero and report["trace"]["compiles"]["total"] else 0


BATCH_KINDS = ("prefill", "sample", "decode", "cleanup")  # the model runner's steps (planner.plan.steps)


def warmup_summary(result, expanded) -> dict:
    """Per stage of the executed plan: kinds, statuses, wall time, JIT misses and compiles, kernels."""
    kinds: dict = {}
    for step in expanded.steps:
        kinds.setdefault(step.stage, set()).add(step.kind)
    stages = []
    for stage in result.stage_order:
        records = [r for r in result.steps if r.stage == stage]
        jits = [r.jit or {} for r in records]
        kernels = Counter()
        for j in jits:
            kernels.update(j.get("kernels", {}))
        stages.append({"stage": stage, "kinds": sorted(kinds[stage]), "steps": len(records),
                       "status": dict(Counter(r.status for r in records)),
                       "wall_s": round(result.stage_wall.get(stage, 0.0), 3),
                       "jit_misses": sum(j.get("jit_misses", 0) for j in jits),
                       "compiled": sum(j.get("compiled", 0) for j in jits),
                       "kernels": dict(kernels),
                       "step_walls_s": {r.id: r.wall_s for r in records},
                       "precompile_wait_s": round(sum((r.precompile or {}).get("wait_s", 0.0)
                                                      for r in records), 3)})
    batch = [s for s in stages if set(s["kinds"]) <= set(BATCH_KINDS)]
    return {"stages": stages, "total_s": round(sum(result.stage_wall.values()), 3),
            "batch_stages_s": round(sum(s["wall_s"] for s in batch), 3)}


def summarize_trace(t: dict) -> dict:
    """The report's trace section from executor.verify.trace_check's result (`verify_trace`)."""
    lat = t["latency_ms"]
    events = [e for e in t["post_seal_events"] if e.get("event") == "kernel JIT compilation"]
    by_family = Counter(family(e.get("kernel", "?")) for e in events)
    per_step = [{"step": s["step"], "kind": s["kind"], "tokens": s["tokens"], "requests": s["requests"],
                 "latency_s": round(s["latency_ms"] / 1e3, 4), "kernels": s["kernels"]}
                for s in t["steps_with_compiles"] if s["kernels"]]  # steps with Triton JIT misses
    compile_steps = {s["step"] for s in per_step}
    quiet = [x for i, x in enumerate(lat) if i not in compile_steps]
    stats = t["runner_stats"] or {}
    return {
        "num_steps": len(lat),
        "kinds": t["kinds"],
        "first_step_ms": round(lat[0], 2) if lat else None,
        "first_10_steps_ms": [round(x, 2) for x in lat[:10]],
        "p50_ms": round(percentile(lat, 50), 3),
        "p99_ms": round(percentile(lat, 99), 3),
        "max_ms": round(max(lat), 2) if lat else None,
        "p50_ms_steps_without_compiles": round(percentile(quiet, 50), 3),
        "p50_ms_after_step_50": round(percentile(lat[50:], 50), 3),
        "compiles": {"total": len(events), **{f: by_family.get(f, 0) for f in FAMILIES}},
        "steps_with_compiles": per_step,
        "compile_events": [{"step": e.get("step"), "kernel": e.get("kernel"), "family": family(e.get("kernel", "?")),
                            "key": e.get("key")} for e in events],
        "other_post_seal_events": [e for e in t["post_seal_events"] if e.get("event") != "kernel JIT compilation"],
        "runner_stats": stats,  # the trace's own
        "graph_replays": stats.get("decode_graph", 0),  # every graph replay is a decode_graph step
        "graph_captures_after_seal": stats.get("graph_captures", 0),
        "error": t["error"],
    }


def print_summary(r: dict) -> None:
    t = r["trace"]
    print(f"== {r['engine']} on {r['device']}, plan {r['plan'] or '(none: cold)'}, {t['num_steps']} trace steps")
    if "warmup" in r:
        w = r["warmup"]
        for s in w["stages"]:
            print(f"   warmup {s['stage']:<22} {s['wall_s']:8.2f} s  {s['jit_misses']:3d} JIT misses  {s['kinds']}")
        print(f"   warmup total {w['total_s']:.2f} s (batch stages {w['batch_stages_s']:.2f} s)")
        pre = r.get("precompile") or {}
        print(f"   timeline {r.get('timeline')}; precompile {pre.get('status')}: {pre.get('jobs')} jobs, "
              f"{pre.get('workers')} workers, start {pre.get('start_s')} s, spawned {pre.get('spawned_s')} s, "
              f"first worker ready {pre.get('first_worker_ready_s')} s, wall {pre.get('wall_s')} s, "
              f"busy {pre.get('busy_s')} s, close {pre.get('close_s')} s")
    print(f"   trace: first step {t['first_step_ms']} ms, p50 {t['p50_ms']} ms, p99 {t['p99_ms']} ms, "
          f"max {t['max_ms']} ms; p50 of steps without compiles {t['p50_ms_steps_without_compiles']} ms")
    print(f"   compiles after seal: {t['compiles']}")
    for s in t["steps_with_compiles"][:20]:
        print(f"     step {s['step']:4d} {s['kind']:<8} {s['requests']:4d} reqs {s['tokens']:5d} tokens "
              f"{s['latency_s'] * 1e3:9.1f} ms  {s['kernels']}")
    print(f"   kinds {t['kinds']}, runner {t['runner_stats']}, graph replays {t['graph_replays']}, "
          f"captures after seal {t.get('graph_captures_after_seal')}")


def _triton_version() -> str:
    try:
        import triton
        return triton.__version__
    except ImportError:
        return "none"


if __name__ == "__main__":
    sys.exit(main())
