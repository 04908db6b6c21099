#!/usr/bin/env python3
"""DeepGEMM on the GPU: numerics, and the ground truth of which M compiles a new kernel.

    python3 bench/deep_gemm_gpu.py --out $OUT [--quick] [--workers 8] [--dry-run]

Needs an SM90 GPU, torch and DeepGEMM importable as ``deep_gemm`` (the model is of
deepseek-ai/DeepGEMM 54e2261, v2.6.1). ``--dry-run`` needs neither: it prints the jobs and
the model's predictions.

(a) Numerics: one ``fp8_gemm_nt`` and one ``m_grouped_fp8_gemm_nt_contiguous`` on random
data (1x128 activation scales and 128x128 weight scales, the executor's quantizers) against
a float64 torch reference. The activation scales go in row-major, as vLLM's warmup passes
them: on SM90 DeepGEMM makes them MN-major and TMA-aligned itself
(``get_mn_major_tma_aligned_tensor``, a JIT ``transpose_fp32`` kernel per K).

(b) Ground truth, per shape of the DeepSeek-V3 TP8 and Qwen3-30B-A3B FP8 engines: with a fresh
``DG_JIT_CACHE_DIR`` per worker process, call every M in increasing order (dense: 1..
max_num_batched_tokens; grouped: every multiple of 128 up to v0.11's MAX_M, which holds every
M_sum either vLLM formula produces). DeepGEMM's compiler (csrc/jit/compiler.hpp) writes one
directory ``cache/kernel.<name>.<hash>`` (kernel.cu, kernel.cubin) per kernel, so a call
that adds a ``kernel.sm90_*`` directory compiled a GEMM kernel; its kernel.cu holds the
template arguments, which are parsed back into the model's key format. With
``DG_PRINT_CONFIGS=1`` DeepGEMM prints the configuration it picks for each M (layout,
stages, the modelled cycle count), which is compared with the model for every M. Reported
per shape: the M-values that compiled a kernel against the model's first M of each key,
the kernels' keys against the model's, and every per-M configuration mismatch.
``--quick``: three shapes instead of all (about 50 kernels).

Writes $OUT/deep_gemm_gpu.json (OUT from --out, else $OUT, else ./out) and prints a summary.
Exit status 0 when the model matched everywhere and numerics passed, 1 otherwise. 10 workers
on 16 cores compile in parallel (about 4 s per kernel with NVCC).

Its result on an H100 with DeepGEMM 2.6.1 (bench/RESULTS.md part D): the model matched every kernel
and every per-M configuration of all 13 shapes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from executor.caches import deep_gemm_install  # noqa: E402
from kernel_model import deep_gemm as model  # noqa: E402
from planner.engine.config import load_engine  # noqa: E402
from planner.plan.expr import round_up  # noqa: E402
from planner.plan.stages.deep_gemm import dense_shapes, moe_weights  # noqa: E402

ENGINES = ("deepseek-v3-fp8-tp8-h200", "qwen3-30b-a3b-fp8-h100")
ALIGN = 128
QUICK = {("deepseek-v3-fp8-tp8-h200", "dense", 7168, 2048), ("deepseek-v3-fp8-tp8-h200", "grouped", 7168, 256),
         ("qwen3-30b-a3b-fp8-h100", "dense", 5120, 2048)}
CONFIG_LINE = re.compile(
    r"GemmDesc\(gemm_type=(\d+), kernel_type=\d+, m=(\d+), n=(\d+), k=(\d+), num_groups=(\d+).*?"
    r"Layout\(swap_ab=\d+, block_m=(\d+), block_n=(\d+), block_k=\d+, cluster_m=(\d+), cluster_n=(\d+)\).*?"
    r"num_stages=(\d+)\).*?LaunchConfig\(num_sms=(\d+).*?num_cycles=(-?\d+)\)")


# --- jobs and the model's predictions ---------------------------------------------------

def make_jobs(quick: bool, seed: int = 0) -> list[dict]:
    jobs = []
    for name in ENGINES:
        facts = load_engine(name).facts
        tokens = facts.scheduler.max_num_batched_tokens
        for (n, k), layers in dense_shapes(facts, ALIGN).items():
            jobs.append({"engine": name, "kind": "dense", "n": n, "k": k, "num_groups": 1, "layers": layers,
                         "ms": list(range(1, tokens + 1))})
        dp_tokens = tokens * facts.parallel.data_parallel_size
        for (weight, e, n, k, top_k), _ in moe_weights(facts, ALIGN).items():
            max_m = round_up(min(dp_tokens, 32768) * top_k + e * (ALIGN - 1), ALIGN)
            jobs.append({"engine": name, "kind": "grouped", "weight": weight, "n": n, "k": k, "num_groups": e,
                         "top_k": top_k, "ms": list(range(ALIGN, max_m + 1, ALIGN))})
    if quick:
        jobs = [j for j in jobs if (j["engine"], j["kind"], j["n"], j["k"]) in QUICK]
        rng = random.Random(seed)
        for job in jobs:  # Qwen3's shape: the model's representatives first, then 256 random M
            if job["engine"] == "qwen3-30b-a3b-fp8-h100":
                reps = list(model_keys(job, job["ms"], 132).values())
                job["ms"] = reps + rng.sample([m for m in job["ms"] if m not in reps], 256)
                job["order"] = "representatives, then random"
    for i, job in enumerate(jobs):
        job["id"] = i
        job.setdefault("order", "ascending")
    return jobs


def model_keys(job: dict, ms, num_sms: int) -> dict:
    """key -> first M in call order."""
    if job["kind"] == "dense":
        return model.dense_keys(ms, job["n"], job["k"], num_sms)
    return model.grouped_contiguous_keys(ms, job["n"], job["k"], job["num_groups"], num_sms)


def model_layout(job: dict, m: int, num_sms: int) -> tuple:
    if job["kind"] == "dense":
        return tuple(model.dense_layout(m, job["n"], job["k"], num_sms))
    return tuple(model.grouped_contiguous_layout(m, job["n"], job["k"], num_sms))


# --- reading DeepGEMM's cache -----------------------------------------------------------

def kernel_dirs(cache_dir: str) -> set[str]:
    """Complete kernel entries, in every DeepGEMM layout (executor.caches.deep_gemm_install: 2.5/2.6
    and 2.8)."""
    return {entry.dirname for entry in deep_gemm_install.scan(cache_dir)}


def key_from_source(path: str) -> str | None:
    """The model's key format, from the template arguments in a generated kernel.cu."""
    with open(path) as f:
        return model.key_from_source(f.read())


# --- the worker: one process, one cache dir, some jobs ----------------------------------

def worker(payload: tuple) -> list[dict]:
    cache_dir, log_path, jobs = payload
    os.environ["DG_JIT_CACHE_DIR"] = cache_dir
    os.environ["DG_PRINT_CONFIGS"] = "1"
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)  # DeepGEMM prints its configs with std::cout
    import deep_gemm
    import torch

    num_sms = deep_gemm.get_num_sms()
    results = []
    for job in jobs:
        results.append(run_job(job, cache_dir, log_path, num_sms, deep_gemm, torch))
        r = results[-1]
        print(f"job {r['id']} {r['engine']} {r['kind']} n{r['n']} k{r['k']}: {r['observed_kernels']} kernels "
              f"(model {r['model_kernels']}), keys {'match' if r['keys_match'] else 'DIFFER'}, "
              f"{r['config_mismatches']} config mismatches, {r['wall_s']} s", file=sys.stderr, flush=True)
    return results


def run_job(job, cache_dir, log_path, num_sms, dg, torch) -> dict:
    n, k, e = job["n"], job["k"], job["num_groups"]
    top = max(job["ms"])
    dev = "cuda"
    a = torch.empty(top, k, device=dev, dtype=torch.float8_e4m3fn)
    a_s = torch.zeros(top, k // 128, device=dev, dtype=torch.float32)
    out = torch.empty(top, n, device=dev, dtype=torch.bfloat16)
    if job["kind"] == "dense":
        w = torch.zeros(n, k, device=dev, dtype=torch.float8_e4m3fn)
        w_s = torch.ones((n + 127) // 128, k // 128, device=dev, dtype=torch.float32)
        call = lambda m: dg.fp8_gemm_nt((a[:m], a_s[:m]), (w, w_s), out[:m])  # noqa: E731
    else:
        w = torch.zeros(e, n, k, device=dev, dtype=torch.float8_e4m3fn)
        w_s = torch.ones(e, (n + 127) // 128, k // 128, device=dev, dtype=torch.float32)
        ids = (torch.arange(top // ALIGN, dtype=torch.int32) % e).repeat_interleave(ALIGN).to(dev)
        call = lambda m: dg.m_grouped_fp8_gemm_nt_contiguous((a[:m], a_s[:m]), (w, w_s), out[:m], ids[:m])  # noqa: E731
    log_start = os.path.getsize(log_path)
    seen = kernel_dirs(cache_dir)
    new_gemm, new_other, compile_s = {}, {}, 0.0
    t0 = time.perf_counter()
    for i, m in enumerate(job["ms"]):
        start = time.perf_counter()
        call(m)
        now = kernel_dirs(cache_dir)
        if now != seen:
            compile_s += time.perf_counter() - start
            for d in sorted(now - seen):
                src = os.path.join(cache_dir, "cache", d, "kernel.cu")
                name = deep_gemm_install.parse_entry(d)[1]
                if name.startswith("sm90_"):
                    new_gemm.setdefault(m, []).append(key_from_source(src) or d)
                else:
                    new_other.setdefault(m, []).append(name)
            seen = now
        if i % 256 == 255:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    del a, a_s, out, w, w_s
    torch.cuda.empty_cache()
    return compare(job, num_sms, new_gemm, new_other, read_configs(log_path, log_start, job), compile_s, wall)


def read_configs(log_path: str, start: int, job: dict) -> dict:
    """m -> (block_m, block_n, cluster_m, cluster_n, stages, cycles, num_sms) printed for this job."""
    gemm_type = "0" if job["kind"] == "dense" else "1"
    out = {}
    with open(log_path, errors="replace") as f:
        f.seek(start)
        for line in f:
            match = CONFIG_LINE.search(line)
            if match and match.group(1) == gemm_type and (int(match.group(3)), int(match.group(4))) == (
                    job["n"], job["k"]):
                g = [int(x) for x in match.groups()]
                out[g[1]] = (g[5], g[6], g[7], g[8], g[9], g[11], g[10])
    return out


def compare(job, num_sms, new_gemm, new_other, configs, compile_s, wall) -> dict:
    predicted = model_keys(job, job["ms"], num_sms)               # key -> first M in call order
    observed = {key: m for m, keys in new_gemm.items() for key in keys}
    config_mismatch, checked = [], 0
    for m in job["ms"]:
        got = configs.get(m)
        if got is None:
            continue
        checked += 1
        want = model_layout(job, m, num_sms)
        if got[:6] != want or got[6] != num_sms:
            config_mismatch.append({"m": m, "deep_gemm": got[:6], "model": want})
    return {
        **{k: job[k] for k in ("id", "engine", "kind", "n", "k", "num_groups", "order") if k in job},
        **({"weight": job["weight"]} if "weight" in job else {}),
        "calls": len(job["ms"]), "m_range": [min(job["ms"]), max(job["ms"])],
        "model_kernels": len(predicted), "observed_kernels": sum(len(v) for v in new_gemm.values()),
        "model_new_kernel_ms": sorted(predicted.values()), "observed_new_kernel_ms": sorted(new_gemm),
        "keys_match": predicted == observed,
        "keys_only_in_model": sorted(set(predicted) - set(observed)),
        "keys_only_observed": sorted(set(observed) - set(predicted)),
        "other_kernels": new_other,  # transpose_fp32: expected at the first call of each new K
        "configs_checked": checked, "config_mismatches": len(config_mismatch),
        "config_mismatch_examples": config_mismatch[:20],
        "compile_s": round(compile_s, 2), "wall_s": round(wall, 2),
    }


# --- numerics ------------------------------------------------------------------------------

def numerics(dg, torch) -> dict:
    from executor.kernels.reference import (dequantize_block, dequantize_per_token_group,
                                            quantize_fp8_block, quantize_fp8_per_token_group)

    def diff(x, y):  # DeepGEMM's calc_diff: 1 - cosine-like similarity, in float64
        x, y = x.double(), y.double()
        return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())

    torch.manual_seed(0)
    out = {}
    m, n, k = 257, 7168, 2048
    a_q, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    w_q, w_s = quantize_fp8_block(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    dg.fp8_gemm_nt((a_q, a_s.contiguous()), (w_q, w_s.contiguous()), d)
    torch.cuda.synchronize()
    ref = dequantize_per_token_group(a_q, a_s) @ dequantize_block(w_q, w_s).T
    out["fp8_gemm_nt"] = {"m": m, "n": n, "k": k, "diff": diff(d, ref),
                          "max_abs_err": float((d.double() - ref).abs().max()), "ref_max": float(ref.abs().max())}

    e, n, k = 8, 512, 7168
    counts = [int(torch.randint(1, 300, ()).item()) for _ in range(e)]
    rows = [round_up(c, ALIGN) for c in counts]
    m_sum = sum(rows)
    x = torch.zeros(m_sum, k, device="cuda", dtype=torch.bfloat16)
    ids = torch.full((m_sum,), -1, device="cuda", dtype=torch.int32)
    start = 0
    for g, (c, r) in enumerate(zip(counts, rows)):
        x[start:start + c] = torch.randn(c, k, device="cuda", dtype=torch.bfloat16)
        ids[start:start + c] = g
        start += r
    a_q, a_s = quantize_fp8_per_token_group(x)
    w_q, w_s = quantize_fp8_block(torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16))
    d = torch.empty(m_sum, n, device="cuda", dtype=torch.bfloat16)
    dg.m_grouped_fp8_gemm_nt_contiguous((a_q, a_s.contiguous()), (w_q, w_s.contiguous()), d, ids)
    torch.cuda.synchronize()
    a_deq = dequantize_per_token_group(a_q, a_s)
    valid = ids >= 0
    ref = torch.zeros(m_sum, n, device="cuda", dtype=torch.float64)
    for g in range(e):
        sel = ids == g
        ref[sel] = a_deq[sel] @ dequantize_block(w_q[g], w_s[g]).T
    out["m_grouped_fp8_gemm_nt_contiguous"] = {
        "m_sum": m_sum, "n": n, "k": k, "num_groups": e, "rows_per_group": counts,
        "diff": diff(d[valid], ref[valid]), "max_abs_err": float((d[valid].double() - ref[valid]).abs().max()),
        "ref_max": float(ref.abs().max())}
    for r in out.values():
        r["ok"] = r["diff"] < 1e-3
    return out


# --- main ------------------------------------------------------------------------------------

def environment(dg, torch) -> dict:
    props = torch.cuda.get_device_properties(0)
    info = {"deep_gemm_version": getattr(dg, "__version__", None), "deep_gemm_path": os.path.dirname(dg.__file__),
            "torch": torch.__version__, "cuda": torch.version.cuda, "device": props.name,
            "num_sms_device": props.multi_processor_count, "num_sms_deep_gemm": dg.get_num_sms(),
            "capability": list(torch.cuda.get_device_capability(0)), "model_version": model.VERSION,
            "env": {k: v for k, v in os.environ.items() if k.startswith("DG_")}}
    try:
        from importlib.metadata import version
        info["deep_gemm_dist_version"] = version("deep_gemm")
    except Exception as exc:  # noqa: BLE001 - informational only
        info["deep_gemm_dist_version"] = f"unknown ({type(exc).__name__})"
    try:
        nvcc = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
        info["nvcc"] = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    except Exception as exc:  # noqa: BLE001
        info["nvcc"] = f"unknown ({type(exc).__name__})"
    return info


def write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def summary_lines(results: list[dict]) -> list[str]:
    lines = [f"{'engine':26} {'shape':34} {'calls':>6} {'model':>5} {'seen':>5} {'keys':>5} {'cfg bad':>8} {'compile s':>9}"]
    for r in results:
        shape = f"{r['kind']} " + (f"{r['weight']} e{r['num_groups']} " if r["kind"] == "grouped" else "") + \
            f"n{r['n']} k{r['k']}"
        lines.append(f"{r['engine']:26} {shape:34} {r['calls']:>6} {r['model_kernels']:>5} {r['observed_kernels']:>5} "
                     f"{'ok' if r['keys_match'] else 'DIFF':>5} {r['config_mismatches']:>8} {r['compile_s']:>9}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "out"))
    parser.add_argument("--quick", action="store_true", help="three shapes, not all")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--dry-run", action="store_true", help="no GPU: print the jobs and the model's predictions")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    jobs = make_jobs(args.quick)
    result_path = os.path.join(args.out, "deep_gemm_gpu.json")

    if args.dry_run:
        rows = [{**{k: j[k] for k in ("id", "engine", "kind", "n", "k", "num_groups", "order")},
                 "calls": len(j["ms"]), "model_kernels": len(model_keys(j, j["ms"], 132)),
                 "model_new_kernel_ms": list(model_keys(j, j["ms"], 132).values())} for j in jobs]
        for r in rows:
            print(f"{r['engine']:26} {r['kind']:8} n{r['n']:<6} k{r['k']:<6} calls {r['calls']:>6}  "
                  f"kernels {r['model_kernels']:>3}  first M {r['model_new_kernel_ms'][:8]}")
        write_json(result_path, {"dry_run": True, "model_version": model.VERSION, "jobs": rows})
        return 0

    import deep_gemm
    import torch

    t0 = time.perf_counter()
    report = {"environment": environment(deep_gemm, torch), "quick": args.quick}
    work = tempfile.mkdtemp(prefix="deep_gemm_gpu.")
    os.environ["DG_JIT_CACHE_DIR"] = os.path.join(work, "numerics")
    report["numerics"] = numerics(deep_gemm, torch)
    print(json.dumps(report["numerics"], indent=1), flush=True)

    # Spread the jobs over workers, largest first, each worker with its own cache dir.
    workers = max(1, min(args.workers, len(jobs)))
    buckets = [[] for _ in range(workers)]
    for job in sorted(jobs, key=lambda j: -len(model_keys(j, j["ms"], report["environment"]["num_sms_deep_gemm"]))):
        min(buckets, key=lambda b: sum(len(model_keys(j, j["ms"], 132)) for j in b)).append(job)
    payloads = [(os.path.join(work, f"cache{i}"), os.path.join(work, f"configs{i}.log"), b)
                for i, b in enumerate(buckets) if b]
    with mp.get_context("spawn").Pool(len(payloads)) as pool:
        results = sorted((r for rs in pool.map(worker, payloads) for r in rs), key=lambda r: r["id"])
    report["jobs"] = results
    report["summary"] = {
        "kernels_model": sum(r["model_kernels"] for r in results),
        "kernels_observed": sum(r["observed_kernels"] for r in results),
        "shapes_matching": sum(r["keys_match"] for r in results), "shapes": len(results),
        "configs_checked": sum(r["configs_checked"] for r in results),
        "config_mismatches": sum(r["config_mismatches"] for r in results),
        "numerics_ok": all(r["ok"] for r in report["numerics"].values()),
        "wall_s": round(time.perf_counter() - t0, 1)}
    write_json(result_path, report)
    print("\n".join(summary_lines(results)))
    print(json.dumps(report["summary"]))
    shutil.rmtree(work, ignore_errors=True)
    s = report["summary"]
    ok = s["numerics_ok"] and s["shapes_matching"] == s["shapes"] and s["config_mismatches"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
