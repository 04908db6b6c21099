"""The hot-path check (`--verify N`): after the seal, N random calls inside the plan's ranges.

Keys are what the warmup ran: each GEMM shape (M drawn in [1, the step's declared
range]: `max_m` of an exact step, else its largest M), each grouped GEMM weight (M_sum
drawn among the multiples of its alignment up to its range), each attention layer key
(a token count drawn in [1, `max_tokens` of an exact step, else the largest it warmed],
split into 1 to 8 sequences of random lengths). An exact step warms one M per compile
key, so the check draws from the whole range its keys claim to cover. Calls go round-robin over the
keys, so each gets N / keys of them, through the same backend and scratch tensors as
the warmup. Every compile the sealed monitor sees is a warmup miss and is reported
with the call that caused it.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import asdict

from .backends.base import Unavailable
from .runner.trace import TraceConfig, percentile, run_trace


def verify_keys(steps: list, backend_name) -> list[dict]:
    """One entry per distinct kernel shape among the warmed steps and backend, with its range:
    the largest range a step of it declares (planner.plan.steps ``value_range``)."""
    keys: dict = {}
    for step in steps:
        backend = backend_name(step)
        entry = keys.setdefault((backend, step.shape_key()), {"name": step.slug(), "kind": step.kind,
                                                              "backend": backend, "step": step, "max": 0})
        if step.value_range() > entry["max"]:
            entry["max"], entry["step"] = step.value_range(), step
    return list(keys.values())


def draw(key: dict, rng: random.Random):
    """One random call of a key: an M, an M_sum (a multiple of the alignment), or an attention
    batch (a token count split into 1 to 8 sequences)."""
    step = key["step"]
    if step.family == "gemm":
        return rng.randint(1, key["max"])
    if step.family == "grouped_gemm":
        return step.alignment * rng.randint(1, max(1, key["max"] // step.alignment))
    total = rng.randint(1, key["max"])
    parts = rng.randint(1, min(8, total))
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if parts > 1 else []
    bounds = [0, *cuts, total]
    return [bounds[i + 1] - bounds[i] for i in range(parts)]


def hot_path_check(steps: list[dict], report, ctx, n: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    keys = verify_keys(steps, ctx.backend_name)
    result = {"calls": 0, "seed": seed, "keys": [], "post_seal_compiles": 0, "events": [], "failures": [],
              "wall_s": 0.0}
    if not keys:
        result["note"] = "no warmed GEMM or attention step to check"
        return result
    monitor = ctx.monitor
    events_before = len(monitor.post_seal_events)
    per_key = {k["name"]: 0 for k in keys}
    start = time.perf_counter()
    for i in range(n):
        key = keys[i % len(keys)]
        value = draw(key, rng)
        call_id = f"verify/{key['name']}/{_describe(key, value)}"
        monitor.begin_step(call_id)
        try:
            backend = ctx.backend(key["backend"])
            getattr(backend, key["step"].family)(key["step"], [value], lambda _n: None)
            per_key[key["name"]] += 1
        except Unavailable as e:
            result["failures"].append({"call": call_id, "error": str(e)})
        except Exception as e:  # noqa: BLE001 - in `error` mode a post-seal compile raises here
            result["failures"].append({"call": call_id, "error": f"{type(e).__name__}: {e}"})
        finally:
            monitor.end_step()
        result["calls"] += 1
    result["wall_s"] = round(time.perf_counter() - start, 3)
    events = monitor.post_seal_events[events_before:]
    result["events"] = events
    result["post_seal_compiles"] = len(events)
    result["keys"] = [{"name": k["name"], "kind": k["kind"], "backend": k["backend"], "max": k["max"],
                       "calls": per_key[k["name"]]} for k in keys]
    return result


def _describe(key: dict, value) -> str:
    if isinstance(value, list):  # an attention batch
        return f"t{sum(value)}x{len(value)}"
    return f"m{value}"


def trace_check(report, ctx, n: int, seed: int = 0, overrides: dict | None = None) -> dict:
    """`--verify-trace N`: N steps of the seeded serving trace (executor.runner.trace) on the runner
    the batch steps warmed, after the seal. Every post-seal event of the monitor during the trace
    is a warmup miss, counted per kernel family; first-step and p50/p99 step latencies (each step
    synchronized on CUDA). Filled into ``report.verify_trace`` as it goes (kept on Ctrl-C)."""
    config = TraceConfig(**{**(overrides or {}), "num_steps": n, "seed": seed})
    result = {"steps": 0, "seed": seed, "config": asdict(config), "compiles": 0, "compiles_by_family": {},
              "first_step_ms": None, "p50_ms": None, "p99_ms": None, "max_ms": None, "wall_s": 0.0,
              "kinds": {}, "latency_ms": [], "steps_with_compiles": [], "post_seal_events": [],
              "runner_stats": None, "error": None}
    report.verify_trace = result
    try:
        runner = ctx.get_runner()
        if ctx.engine is None:
            raise Unavailable("the serving trace needs the engine config")
    except Exception as e:  # noqa: BLE001 - unavailable or failed to start: the trace cannot run
        result["error"] = str(e) if isinstance(e, Unavailable) else \
            f"the model runner failed to start ({type(e).__name__}: {e})"
        return result
    sync = _cuda_sync(ctx.device)
    if sync is not None:
        sync()  # the warmup's queued work is not the first step's
    watch = _TraceWatch(ctx.monitor, result, runner)
    try:
        run_trace(runner, ctx.engine, config, watch.on_step, sync)
    except Exception as e:  # noqa: BLE001 - a failing step (in `error` mode: a post-seal compile) ends the trace
        result["error"] = f"trace step {len(watch.kinds)}: {type(e).__name__}: {e}"
    finally:
        watch.finish()
    return result


class _TraceWatch:
    """The JIT monitor around each step of the serving trace, and the trace's totals."""

    def __init__(self, monitor, result: dict, runner):
        self.monitor, self.result, self.runner = monitor, result, runner
        self.events_before = self.seen = len(monitor.post_seal_events)
        stats = getattr(runner, "stats", None)
        self.stats_before = dict(stats) if isinstance(stats, dict) else {}
        self.kinds: list[str] = []
        self.latencies: list[float] = []  # seconds
        self.start = time.perf_counter()
        monitor.begin_step("trace/step-0")

    def on_step(self, i: int, execute, latency: float) -> None:
        counts = self.monitor.end_step()
        events = self.monitor.post_seal_events
        new_events, self.seen = len(events) - self.seen, len(events)
        self.latencies.append(latency)
        self.result["latency_ms"].append(round(latency * 1e3, 3))
        self.kinds.append(execute.kind)
        if new_events or (counts is not None and counts.jit_misses):
            self.result["steps_with_compiles"].append({
                "step": i, "kind": execute.kind, "tokens": execute.total_num_scheduled_tokens,
                "requests": len(execute.requests), "latency_ms": round(latency * 1e3, 3),
                "events": new_events, "kernels": dict(counts.kernels) if counts is not None else {}})
        self.monitor.begin_step(f"trace/step-{i + 1}")

    def finish(self) -> None:
        self.monitor.end_step()
        events = self.monitor.post_seal_events[self.events_before:]
        families = _kernel_families()
        by_family = Counter(families.get(e.get("kernel"), "other") for e in events)
        self.result.update(steps=len(self.latencies), wall_s=round(time.perf_counter() - self.start, 3),
                           kinds=dict(Counter(self.kinds)), compiles=len(events),
                           compiles_by_family=dict(sorted(by_family.items())), post_seal_events=events)
        if self.latencies:
            ms = [x * 1e3 for x in self.latencies]
            self.result.update(first_step_ms=round(ms[0], 3), p50_ms=round(percentile(ms, 50), 3),
                               p99_ms=round(percentile(ms, 99), 3), max_ms=round(max(ms), 3))
        stats = getattr(self.runner, "stats", None)
        if isinstance(stats, dict):  # the trace's own counters (the reference runner's paths, graph replays)
            self.result["runner_stats"] = {k: v - self.stats_before.get(k, 0) for k, v in stats.items()
                                           if isinstance(v, (int, float))}


def _kernel_families() -> dict:
    """Kernel name -> family (the reference runner's kernels; anything else is "other")."""
    try:
        from .runner.kernels import KERNEL_FAMILIES
    except ImportError:  # no torch or triton here: a runner of another engine
        return {}
    return KERNEL_FAMILIES


def _cuda_sync(device):
    if not str(device).startswith("cuda"):
        return None
    import torch

    return torch.cuda.synchronize if torch.cuda.is_available() else None
