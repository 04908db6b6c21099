"""The hot-path check (`--verify N`): after the seal, N random calls inside the plan's ranges.

Keys are what the warmup ran: each GEMM shape (M drawn in [1, max M of its step]),
each grouped GEMM weight (M_sum drawn among the multiples of its alignment up to its
largest M_sum), each attention layer key (a token count drawn in [1, the largest it
warmed], split into 1 to 8 sequences of random lengths). Calls go round-robin over the
keys, so each gets N / keys of them, through the same backend and scratch tensors as
the warmup. Every compile the sealed monitor sees is a warmup miss and is reported
with the call that caused it.
"""

from __future__ import annotations

import random
import time

from .backends.base import Unavailable

ATTN_FIELDS = ("kernel", "num_heads", "num_kv_heads", "head_size", "scale", "logits_soft_cap", "dtype", "is_causal")


def verify_keys(steps: list[dict], backend_name) -> list[dict]:
    """One entry per distinct kernel key among the warmed steps, with its range."""
    keys: dict = {}
    for step in steps:
        kind = step["kind"]
        family = kind
        backend = backend_name(family, step)
        if kind == "gemm":
            ident = (kind, backend, step.get("kernel"), step["n"], step["k"], tuple(step.get("block_size") or ()))
            hi = max(step["m_values"])
            name = f"{kind}-n{step['n']}-k{step['k']}"
        elif kind == "grouped_gemm":
            ident = (kind, backend, step.get("kernel"), step.get("weight"), step["num_groups"], step["n"], step["k"],
                     step.get("alignment"))
            hi = max(step["m_values"])
            name = f"{kind}-{step.get('weight')}-e{step['num_groups']}-n{step['n']}-k{step['k']}"
        elif kind == "attention":
            ident = (kind, backend) + tuple(step.get(f) for f in ATTN_FIELDS) + (tuple(step["sliding_window"]),)
            hi = int(step["num_tokens"])
            name = f"attention-h{step['num_heads']}-kv{step['num_kv_heads']}-d{step['head_size']}"
        else:
            continue
        entry = keys.setdefault(ident, {"name": name, "kind": kind, "backend": backend, "step": step, "max": 0})
        if hi > entry["max"]:
            entry["max"], entry["step"] = hi, step
    return list(keys.values())


def draw(key: dict, rng: random.Random):
    """One random call of a key: an M, an M_sum, or a list of sequence lengths."""
    if key["kind"] == "gemm":
        return rng.randint(1, key["max"])
    if key["kind"] == "grouped_gemm":
        align = int(key["step"].get("alignment") or 1)
        return align * rng.randint(1, max(1, key["max"] // align))
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
            if key["kind"] == "gemm":
                backend.gemm(key["step"], [value], lambda _n: None)
            elif key["kind"] == "grouped_gemm":
                backend.grouped_gemm(key["step"], [value], lambda _n: None)
            else:
                backend.attention(key["step"], [value], lambda _n: None)
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
    if key["kind"] == "attention":
        return f"t{sum(value)}x{len(value)}"
    return f"m{value}"
