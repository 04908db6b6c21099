#!/usr/bin/env python3
"""Serving-trace proof: warm the reference runner with a plan (or not), seal, replay a trace.

    python3 bench/trace_proof.py --engine llama-3.1-8b-fp8-h100 --plan plans/reference.yaml \
        --steps 500 --json out/llama-warm.json
    python3 bench/trace_proof.py --engine llama-3.1-8b-fp8-h100 --no-warmup --steps 150 --json out/llama-cold.json

In one process: build the ReferenceRunner, optionally execute the plan's steps on it
(through executor.run's step handlers: GEMM and attention steps on the Triton backend,
batch and cudagraph steps on this runner), seal the JIT monitor (executor.jit_monitor),
then run N steps of the seeded serving trace (executor.runner.trace). Reports every
Triton compile after the seal with its kernel family and specialization, the first-step
and p50/p99 step latencies, and the wall time of each warmup stage. Exit status 0, or
1 with --expect-zero when anything compiled during the trace.
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

from executor.jit_monitor import Monitor  # noqa: E402
from executor.runner.kernels import KERNEL_FAMILIES  # noqa: E402
from executor.runner.trace import TraceConfig, percentile, run_trace  # noqa: E402
from planner.engine import load_engine  # noqa: E402
from planner.expand import expand  # noqa: E402
from planner.plan import load_plan  # noqa: E402

FAMILIES = ("attention", "gemm", "sampler", "bitmask", "kv_write", "inputs", "rejection_sampler", "other")
BATCH_KINDS = ("prefill", "decode", "cleanup", "sample")


def family(kernel: str) -> str:
    return KERNEL_FAMILIES.get(kernel, "other")


def main(argv=None) -> int:
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
    p.add_argument("--json", help="write the report here")
    p.add_argument("--expect-zero", action="store_true", help="exit 1 when the trace compiled anything")
    args = p.parse_args(argv)

    import torch

    from executor.runner import ReferenceRunner

    engine_obj = load_engine(args.engine)
    engine = engine_obj.data
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else None
    monitor = Monitor("warn").install()
    report = {"engine": engine["name"], "plan": args.plan, "steps": args.steps, "seed": args.seed,
              "num_layers": args.num_layers, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "device": torch.cuda.get_device_name() if sync else args.device,
              "versions": {"torch": torch.__version__, "triton": _triton_version()},
              "speculative": engine["speculative"]}

    start = time.perf_counter()
    runner = ReferenceRunner(engine, device=args.device, seed=args.seed, num_layers=args.num_layers)
    if sync:
        sync()
    report["runner_init_s"] = round(time.perf_counter() - start, 3)

    if args.plan:
        expanded = expand(load_plan(args.plan), engine_obj)
        report["warmup"] = warmup(runner, expanded, engine, monitor, args.device, sync)
        report["plan_digest"] = expanded["digest"]
    monitor.seal()
    report["graph_sizes"] = list(runner.graphs.sizes) if runner.graphs else []
    before = dict(runner.stats, graph_replays=runner.graphs.replays if runner.graphs else 0)

    per_step: list[dict] = []

    def on_step(i, execute, latency):
        counts = monitor.end_step()
        if counts is not None and counts.jit_misses:
            per_step.append({"step": i, "kind": execute["kind"], "tokens": execute["total_num_scheduled_tokens"],
                             "requests": len(execute["requests"]), "latency_s": round(latency, 4),
                             "kernels": dict(counts.kernels)})
        monitor.begin_step(f"trace/step-{i + 1}")

    monitor.begin_step("trace/step-0")
    trace = run_trace(runner, engine, TraceConfig(num_steps=args.steps, seed=args.seed, arrival_rate=args.arrival_rate,
                                                     prompt_median=args.prompt_median, output_median=args.output_median), on_step, sync)
    monitor.end_step()
    report["trace"] = summarize_trace(trace, per_step, monitor, runner, before)
    graphs_before = len(report["graph_sizes"])
    report["trace"]["graph_captures_after_seal"] = (len(runner.graphs.sizes) if runner.graphs else 0) - graphs_before
    runner.close()
    monitor.uninstall()

    print_summary(report)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 1 if args.expect_zero and report["trace"]["compiles"]["total"] else 0


def warmup(runner, expanded: dict, engine: dict, monitor, device: str, sync) -> dict:
    """Every step of the plan through executor.run's handlers, with this runner; per-stage wall time."""
    from executor import run

    ctx = run.Context(run.Options(device=device, jit_monitor="warn"), engine, run.Progress(enabled=False), monitor)
    ctx._runner = runner  # the handlers drive this runner, which outlives the warmup
    stages, total_start = [], time.perf_counter()
    for stage, steps in run.stages_of(expanded["steps"]):
        start, kernels, records = time.perf_counter(), Counter(), []
        scope = runner.warmup_scope() if all(s["kind"] in BATCH_KINDS for s in steps) else _null_scope()
        with scope:
            for step in steps:
                record = run.run_step(step, ctx)
                run._release(ctx, step)
                if record["status"] == "failed":
                    raise RuntimeError(f"warmup step {step['id']} failed: {record['error']}")
                kernels.update((record.get("jit") or {}).get("kernels", {}))
                records.append(record)
        if sync:
            sync()
        stages.append({"stage": stage, "kinds": sorted({s["kind"] for s in steps}), "steps": len(steps),
                       "status": dict(Counter(r["status"] for r in records)),
                       "wall_s": round(time.perf_counter() - start, 3),
                       "jit_misses": sum((r.get("jit") or {}).get("jit_misses", 0) for r in records),
                       "compiled": sum((r.get("jit") or {}).get("compiled", 0) for r in records),
                       "kernels": dict(kernels)})
    batch = [s for s in stages if set(s["kinds"]) <= set(BATCH_KINDS)]
    return {"stages": stages, "total_s": round(time.perf_counter() - total_start, 3),
            "batch_stages_s": round(sum(s["wall_s"] for s in batch), 3)}


class _null_scope:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def summarize_trace(trace: dict, per_step: list, monitor, runner, before: dict) -> dict:
    lat = trace["latency_s"]
    events = [e for e in monitor.post_seal_events if e.get("event") == "kernel JIT compilation"]
    by_family = Counter(family(e.get("kernel", "?")) for e in events)
    compile_steps = {s["step"] for s in per_step}
    quiet = [x for i, x in enumerate(lat) if i not in compile_steps]
    return {
        "num_steps": len(lat),
        "kinds": dict(Counter(trace["kinds"])),
        "first_step_ms": round(lat[0] * 1e3, 2),
        "first_10_steps_ms": [round(x * 1e3, 2) for x in lat[:10]],
        "p50_ms": round(percentile(lat, 50) * 1e3, 3),
        "p99_ms": round(percentile(lat, 99) * 1e3, 3),
        "max_ms": round(max(lat) * 1e3, 2),
        "p50_ms_steps_without_compiles": round(percentile(quiet, 50) * 1e3, 3),
        "p50_ms_after_step_50": round(percentile(lat[50:], 50) * 1e3, 3),
        "compiles": {"total": len(events), **{f: by_family.get(f, 0) for f in FAMILIES}},
        "steps_with_compiles": per_step,
        "compile_events": [{"step": e.get("step"), "kernel": e.get("kernel"), "family": family(e.get("kernel", "?")),
                            "key": e.get("key")} for e in events],
        "other_post_seal_events": [e for e in monitor.post_seal_events if e.get("event") != "kernel JIT compilation"],
        "runner_stats": {k: v - before.get(k, 0) for k, v in runner.stats.items()},  # the trace's own
        "graph_replays": (runner.graphs.replays if runner.graphs else 0) - before["graph_replays"],
    }


def print_summary(r: dict) -> None:
    t = r["trace"]
    print(f"== {r['engine']} on {r['device']}, plan {r['plan'] or '(none: cold)'}, {t['num_steps']} trace steps")
    if "warmup" in r:
        w = r["warmup"]
        for s in w["stages"]:
            print(f"   warmup {s['stage']:<22} {s['wall_s']:8.2f} s  {s['jit_misses']:3d} JIT misses  {s['kinds']}")
        print(f"   warmup total {w['total_s']:.2f} s (batch stages {w['batch_stages_s']:.2f} s)")
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
