#!/usr/bin/env python3
"""The table and the verdicts of the vLLM start-up proof, from the runs on disk.

    python3 bench/vllm_startup_summary.py RUNS_DIR [--tsv FILE] [--json FILE --runs NAME...]

RUNS_DIR is bench/vllm_startup_proof.sh's per-model directory (/tmp/warmup-proof/runs/<model>):
one directory per run (stock-cold, plugin-cold, plugin-warm, stock-warm), each with run.json
(written by the proof script: rc, wall, timeout, caches) and result.json (bench/vllm_plugin_trace.py,
or in server mode bench/vllm_serve_trace.py: the same keys where they mean the same, "mode":
"server"). Prints one line per run and the proof's checks, each only from runs that exist:

- cold start: stock-cold ready / plugin-cold ready >= 2 (ready: process start to the LLM built;
  in server mode, to the first 200 from /health);
- after ready: the plugin runs compile nothing over the trace (Triton, DeepGEMM, torch.compile,
  FlashInfer, as this project's JIT monitor counts them after the seal; in server mode as vLLM's
  own JIT monitor and the server log report them), nor does any cache gain a kernel;
- KV cache: each plugin run's GPU blocks within 1% of stock-warm's (the stock run of the same
  temperature beside it);
- server mode only: every HTTP request of the plugin runs answered 200 (vLLM's JIT monitor in
  error mode fails the requests of a compile after ready), and no file new in any of the arm's
  cache directories after ready. The stock runs' requests are shown beside them.

--tsv writes every run's row; --json writes the rows of the runs named by --runs (a part's summary)
with the checks. Needs nothing beyond Python.
"""

from __future__ import annotations

import argparse
import json
import os

RUNS = ("stock-cold", "plugin-cold", "plugin-warm", "stock-warm", "bundle-build", "bundle-cold")
# The plugin report's compile kinds (vllm_bridge/warmup/phases.py KINDS, from the families the monitor counts;
# tests/bench/test_vllm_startup_bench.py holds them equal): this script runs with Python alone.
KINDS = ("triton", "deep_gemm", "torch_compile", "flashinfer")
COLUMNS = ("run", "rc", "wall_s", "tp", "ready_s", "llm_init_s", "kv_blocks", "first_request_s", "max_step_s",
           "trace_s", *KINDS, "events", "cache_kernels", "rank_events", "node_compiled", "node_keys", "node_failed", "startup_compiles",
           "startup_dynamo_frames",
           "plugin_active", "model_runner", "mode", "http_ok", "http_failed", "http_p99_s", "jit_monitor_mode",
           "jit_lines_after_ready",
           "cache_files_after_ready", "builder_opens", "bundle_from", "error")


def run_names(runs_dir: str) -> list[str]:
    """The parts in RUNS order, each followed by its repeats (PART_N) found in `runs_dir`."""
    found = os.listdir(runs_dir) if os.path.isdir(runs_dir) else []
    return [n for part in RUNS for n in [part, *sorted(f for f in found if repeat_of(f) == part and f != part)]]


def repeat_of(name: str) -> str:
    """The part a run directory is of: 'stock-warm' for 'stock-warm_2'."""
    head, _, tail = name.rpartition("_")
    return head if head and tail.isdigit() else name


def load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def row(runs_dir: str, name: str) -> dict | None:
    run = load(os.path.join(runs_dir, name, "run.json"))
    result = load(os.path.join(runs_dir, name, "result.json"))
    if run is None and result is None:
        return None
    run, result = run or {}, result or {}
    compiles = result.get("compiles_after_ready") or {}
    error = run.get("skipped") or result.get("error") or (run.get("stderr_tail") or "").strip().splitlines()[-1:]
    if isinstance(error, list):
        error = error[0] if error and run.get("rc") else None
    return {"run": name, "rc": run.get("rc"), "wall_s": run.get("wall_s"), "ready_s": result.get("ready_s"),
            "llm_init_s": result.get("llm_init_s"), "kv_blocks": (result.get("kv_cache") or {}).get("num_gpu_blocks"),
            "first_request_s": result.get("first_request_s"),
            "max_step_s": (result.get("engine_steps") or {}).get("max_s"), "trace_s": result.get("trace_s"),
            **{k: compiles.get(k) for k in KINDS}, "events": compiles.get("events"),
            "tp": result.get("tensor_parallel_size"), **after_ready_elsewhere(result), **node_keys(result),
            "plugin_active": result.get("plugin_active"), "model_runner": result.get("model_runner"),
            **server_fields(result), **proof_fields(run), "error": error}


def proof_fields(run: dict) -> dict:
    """A run's proof settings: for bundle-cold (issue 43 item 5) the building roots its tripwire
    watched, the attempts it recorded on them and where the bundle came from; for every run whether
    its engine core was forked (issue 54) and, for the plugin arm, what torch.compile did after ready
    (issue 53: "compile" counts a missed graph, "eager", the plugin's default, runs it unseen)."""
    opens = run.get("builder_opens")
    return {"builder_roots": run.get("builder_roots"), "builder_opens": None if opens in (None, "") else int(opens),
            "bundle_from": run.get("bundle_from"), "engine_core_fork": run.get("engine_core_fork") == "1",
            "torch_compile_after_ready": run.get("torch_compile_after_ready") or None}


def server_fields(result: dict) -> dict:
    """A server-mode run's own columns: its HTTP requests, what vLLM's JIT monitor wrote after ready
    (lines: in error mode one compile is logged more than once), the files its caches gained."""
    http = result.get("http") or {}
    files = (result.get("cache_new_after_ready") or {}).get("files")
    return {"mode": result.get("mode", "offline"), "http_requests": http.get("requests"), "http_ok": http.get("ok"),
            "http_failed": http.get("failed"), "http_p99_s": (http.get("latency_s") or {}).get("p99"),
            "jit_lines_after_ready": (result.get("vllm_jit_monitor") or {}).get("lines_after_ready"),
            "jit_monitor_mode": (result.get("vllm_jit_monitor") or {}).get("mode"),
            "cache_files_after_ready": None if files is None else sum(files.values()),
            "greedy_alone_sha256": (http.get("greedy_alone") or {}).get("sha256")}


def after_ready_elsewhere(result: dict) -> dict:
    """Compiles after ready that the harness's own monitor cannot see (tensor-parallel ranks are
    other processes): kernels new in the arm's caches, and the events of the ranks' plugin monitors."""
    cache = result.get("cache_new_after_ready")
    ranks = result.get("rank_events_after_ready")
    return {"cache_kernels": None if cache is None else sum((cache.get("kernels") or {}).values()),
            "rank_events": None if ranks is None else sum(r.get("events") or 0 for r in ranks)}


def node_keys(result: dict) -> dict:
    """The node's precompile: keys compiled, summed over the ranks, and the distinct keys the ranks
    shared (each key once across the node when the two agree)."""
    ranks = [r for r in result.get("ranks") or [] if r.get("claims")]
    if not ranks:
        return {"node_compiled": None, "node_keys": None, "node_failed": None, "startup_compiles": None,
                "startup_dynamo_frames": None}
    return {"node_compiled": sum(r["claims"].get("compiled") or 0 for r in ranks),
            "node_keys": max(r["claims"].get("node_keys") or 0 for r in ranks),
            # a failed job compiled (or tried to) a key that another rank then compiled again
            "node_failed": sum(r.get("failed") or 0 for r in ranks),
            # kernels compiled (Triton, DeepGEMM, FlashInfer, the pool) apart from the torch.compile
            # frames Dynamo traced: vLLM 0.25 traces its model on every start, stock warm included
            # ("Dynamo bytecode transform time" in both logs), and then loads the compiled graphs
            "startup_compiles": sum(n for r in ranks for kind, n in (r.get("startup_compiles") or {}).items()
                                    if kind != "torch_compile"),
            "startup_dynamo_frames": sum((r.get("startup_compiles") or {}).get("torch_compile") or 0
                                         for r in ranks)}


def checks(rows: dict) -> list[dict]:
    out = []

    def done(name):
        r = rows.get(name)
        return r if r and r.get("ready_s") is not None else None

    stock, plugin = done("stock-cold"), done("plugin-cold")
    if stock and plugin:
        ratio = stock["ready_s"] / plugin["ready_s"]
        out.append({"check": "cold start >= 2x faster", "pass": ratio >= 2.0,
                    "detail": f"stock-cold {stock['ready_s']:.1f} s / plugin-cold {plugin['ready_s']:.1f} s = {ratio:.2f}x"})
    else:
        out.append({"check": "cold start >= 2x faster", "pass": None, "detail": "needs stock-cold and plugin-cold"})
    ran = [name for name in ("plugin-cold", "plugin-warm") if done(name) and rows[name].get("trace_s") is not None]
    if ran:
        parts, total = [], 0
        for name in ran:
            counts = {k: rows[name].get(k) for k in KINDS}
            elsewhere = {k: rows[name].get(k) for k in ("cache_kernels", "rank_events")}
            total += sum(v or 0 for v in (*counts.values(), *elsewhere.values()))
            parts.append(f"{name}: " + ", ".join(f"{k} {v}" for k, v in {**counts, **elsewhere}.items())
                         + f" (monitor events {rows[name].get('events')}: compiles and first launches)")
        out.append({"check": "0 compiles after ready (plugin)", "pass": total == 0, "detail": "; ".join(parts)})
    else:
        out.append({"check": "0 compiles after ready (plugin)", "pass": None, "detail": "needs a plugin run with its trace"})
    out.append(kv_check(rows, done))
    out.append(node_check(rows))
    out.append(bundle_check(rows))
    if any(r and r.get("mode") == "server" for r in rows.values()):
        out += server_checks(rows, done)
        out.append(outputs_check(rows))
    plugins = [name for name in ("plugin-cold", "plugin-warm") if done(name)]
    inactive = [n for n in plugins if rows[n].get("plugin_active") is not True]
    inactive += [n for n in ("stock-cold", "stock-warm") if done(n) and rows[n].get("plugin_active")]
    if inactive:
        out.append({"check": "plugin active only in the plugin arm", "pass": False,
                    "detail": "wrong arm state in " + ", ".join(inactive) + ": these numbers do not count"})
    return out


def kv_check(rows: dict, done) -> dict:
    """Issue 23's target: each plugin run's GPU blocks within 1% of a warm stock boot's (no compile of
    ours inside vLLM's memory profile). The stock run of the same cache temperature is shown beside
    it: a cold process of either arm holds a little more memory than a warm one (with FlashInfer on
    the H100: 25-26 blocks in both arms, bench/RESULTS.md part U), which is not the plugin's."""
    name = "KV cache = stock-warm's (within 1%)"
    ref = done("stock-warm")
    plugins = [n for n in ("plugin-cold", "plugin-warm") if done(n)]
    if not ref or not plugins:
        return {"check": name, "pass": None, "detail": "needs stock-warm and a plugin run"}

    def side(n: str) -> str:
        same = done(n.replace("plugin", "stock"))
        return f"{n} {rows[n]['kv_blocks']}" + (f" (stock at its temperature {same['kv_blocks']})" if same else "")
    ok = all(abs(rows[n]["kv_blocks"] - ref["kv_blocks"]) <= 0.01 * ref["kv_blocks"] for n in plugins)
    return {"check": name, "pass": ok,
            "detail": f"stock-warm {ref['kv_blocks']} blocks; " + ", ".join(side(n) for n in plugins)}


def server_checks(rows: dict, done) -> list[dict]:
    """Issue 34's proof as users run it: the plugin's server answers every request with vLLM's JIT
    monitor in error mode (its activation line says so: a plugin that skipped vLLM's warmup method
    would leave it off, and every request would pass for nothing), and its caches gain no file
    after ready."""
    plugins = [n for n in ("plugin-cold", "plugin-warm") if done(n) and rows[n].get("http_requests") is not None]
    stocks = [n for n in ("stock-cold", "stock-warm") if done(n) and rows[n].get("http_requests") is not None]
    http_name = "server: every HTTP request ok (plugin; vLLM's JIT monitor in error mode)"
    cache_name = "server: no new file in any cache directory after ready (plugin)"
    if not plugins:
        return [{"check": http_name, "pass": None, "detail": "needs a plugin run in server mode with its requests"},
                {"check": cache_name, "pass": None, "detail": "needs a plugin run in server mode with its requests"}]

    def http(n: str) -> str:
        r = rows[n]
        return (f"{n} {r['http_ok']} ok, {r['http_failed']} failed of {r['http_requests']} "
                f"(JIT monitor: {r.get('jit_monitor_mode') or 'not activated'})")
    shown = "; shown: " + ", ".join(http(n) for n in stocks) if stocks else ""
    files = {n: rows[n].get("cache_files_after_ready") for n in plugins}
    ok = all(rows[n]["http_ok"] == rows[n]["http_requests"] and rows[n].get("jit_monitor_mode") == "error"
             for n in plugins)
    return [{"check": http_name, "pass": ok,
             "detail": "; ".join(http(n) for n in plugins) + shown},
            {"check": cache_name, "pass": all(v == 0 for v in files.values()),
             "detail": ", ".join(f"{n} {v} files" for n, v in files.items())}]


def outputs_check(rows: dict) -> dict:
    """Issue 54: a start-up change must not change outputs. Every run of a series (either arm, the
    engine core forked or not) gives its greedy and seeded requests sent alone the same tokens."""
    name = "the same greedy and seeded tokens in every run (requests alone; engine core forked or not)"
    by_digest: dict = {}
    for n, r in sorted(rows.items()):
        if r and r.get("greedy_alone_sha256"):
            by_digest.setdefault(r["greedy_alone_sha256"], []).append(n + (" (fork)" if r.get("engine_core_fork") else ""))
    runs = sum(len(v) for v in by_digest.values())
    if runs < 2:
        return {"check": name, "pass": None, "detail": "needs two server runs with greedy or seeded requests alone"}
    return {"check": name, "pass": len(by_digest) == 1,
            "detail": "; ".join(f"{d}: {', '.join(v)}" for d, v in by_digest.items())}


def node_check(rows: dict) -> dict:
    """Tensor parallelism: the ranks' precompile compiled each key once across the node."""
    r = rows.get("plugin-cold")
    if not r or r.get("node_keys") is None or not r.get("tp") or r["tp"] < 2:
        return {"check": "node compiles = distinct keys", "pass": None, "detail": "needs a plugin-cold run with TP > 1"}
    failed = r.get("node_failed") or 0
    return {"check": "node compiles = distinct keys", "pass": r["node_compiled"] == r["node_keys"] and not failed,
            "detail": f"plugin-cold, {r['tp']} ranks: {r['node_compiled']} compiled across the ranks, "
                      f"{r['node_keys']} distinct keys, {failed} pool jobs failed"}


def repeats(rows: dict, part: str) -> list[dict]:
    """The finished runs of a part and of its repeats (PART, PART_1, PART_2, ...)."""
    return [r for n, r in sorted(rows.items()) if repeat_of(n) == part and r and r.get("ready_s") is not None]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def bundle_check(rows: dict) -> dict:
    """Issue 35's target: fresh caches plus the bundle ready within 1.0x stock-warm's (medians of
    the repeats) and no kernel compiled from process start to the end of the trace (every rank's
    plugin count and the caches after ready); issue 43's: the building machine's caches hidden from
    every bundle-cold run and no attempt on them recorded (bench/tripwire). The torch.compile frames Dynamo traces are shown, not
    counted: stock warm traces them too, and their graphs load from the cache."""
    name = "bundle-cold: median ready <= 1.0x stock-warm's, 0 compiles, no building cache opened"
    bundles, refs = repeats(rows, "bundle-cold"), repeats(rows, "stock-warm")
    if not bundles or not refs:
        return {"check": name, "pass": None, "detail": "needs bundle-cold and stock-warm"}
    b, ref = median([r["ready_s"] for r in bundles]), median([r["ready_s"] for r in refs])
    ratio = b / ref
    after = sum(r.get(k) or 0 for r in bundles for k in (*KINDS, "cache_kernels", "rank_events"))
    start = sum(r.get("startup_compiles") or 0 for r in bundles)
    opens = [r.get("builder_opens") for r in bundles]
    unseen = all(o == 0 for o in opens) and all(r.get("builder_roots") for r in bundles)
    ok = ratio <= 1.0 and start == 0 and after == 0 and unseen
    each = ", ".join(f"{r['ready_s']:.1f}" for r in bundles)
    return {"check": name, "pass": ok,
            "detail": f"bundle-cold {b:.1f} s (median of {len(bundles)}: {each}) / "
                      f"stock-warm {ref:.1f} s (median of {len(refs)}) = {ratio:.2f}x; kernel compiles to ready {start} "
                      f"(torch.compile frames traced by Dynamo: {[r.get('startup_dynamo_frames') for r in bundles]}, "
                      f"as in every vLLM start), after ready {after}; building caches hidden and watched: "
                      f"{'yes' if all(r.get('builder_roots') for r in bundles) else 'NO'}, attempts on them {opens}; "
                      f"bundle from {sorted({str(r.get('bundle_from')) for r in bundles})}"}


def line(r: dict) -> str:
    def f(v, fmt="{}"):
        return "-" if v is None else fmt.format(v)

    text = (f"{r['run']:<12} rc {f(r['rc'])}  ready {f(r['ready_s'], '{:.1f}')} s  KV {f(r['kv_blocks'])} blocks  "
            f"first request {f(r['first_request_s'], '{:.3f}')} s  longest step {f(r['max_step_s'], '{:.3f}')} s  "
            f"compiles after ready: " + ", ".join(f"{k} {f(r[k])}" for k in KINDS)
            + f", cache kernels {f(r.get('cache_kernels'))}, rank events {f(r.get('rank_events'))}"
            + f"  plugin {'on' if r['plugin_active'] else 'off'}")
    if r.get("mode") == "server":
        text += (f"  [server] HTTP {f(r.get('http_ok'))} ok / {f(r.get('http_failed'))} failed "
                 f"(p99 {f(r.get('http_p99_s'), '{:.2f}')} s), vLLM JIT monitor "
                 f"lines after ready {f(r.get('jit_lines_after_ready'))}, cache files new after ready "
                 f"{f(r.get('cache_files_after_ready'))}")
    if r.get("error"):
        text += f"  [{str(r['error'])[:160]}]"
    return text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs_dir")
    parser.add_argument("--tsv")
    parser.add_argument("--json")
    parser.add_argument("--runs", nargs="*", default=[])
    args = parser.parse_args()
    rows = {name: r for name in run_names(args.runs_dir) if (r := row(args.runs_dir, name)) is not None}
    results = checks(rows)
    for r in rows.values():
        print(line(r))
    for c in results:
        verdict = {True: "PASS", False: "FAIL", None: "n/a "}[c["pass"]]
        print(f"{verdict} {c['check']}: {c['detail']}")
    if args.tsv:
        with open(args.tsv, "w") as f:
            f.write("\t".join(COLUMNS) + "\n")
            for r in rows.values():
                f.write("\t".join("" if r.get(c) is None else str(r.get(c)) for c in COLUMNS) + "\n")
    if args.json:
        part = {"runs": {n: {"row": rows.get(n), "run": load(os.path.join(args.runs_dir, n, "run.json"))}
                         for n in args.runs},
                "checks": results}
        with open(args.json, "w") as f:
            json.dump(part, f, indent=1)


if __name__ == "__main__":
    main()
