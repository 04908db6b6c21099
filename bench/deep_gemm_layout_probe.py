#!/usr/bin/env python3
"""What one DeepGEMM build writes to its JIT cache, call by call (a fact-finding probe).

    DG_JIT_CACHE_DIR=/tmp/dg python3 bench/deep_gemm_layout_probe.py --out probe.json

Calls ``fp8_gemm_nt`` (n7168 k2048) at a few M and one ``m_grouped_fp8_gemm_nt_contiguous``
with whatever ``import deep_gemm`` finds, and records after each call the cache entries that
appeared (every file in them, with sizes) and how long the call took. Used to learn the cache
layout of each DeepGEMM version users have (vLLM 0.25.0 vendors 2.5.0, 0.33.0 vendors 2.8.1;
upstream 2.6.1 is what kernel_model/deep_gemm.py was first checked against).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

import deep_gemm

N, K = 7168, 2048
M_VALUES = (1, 16, 17, 33, 65, 129, 257, 1537)


def tree(root: str) -> dict[str, list]:
    """Every file under root's entries: {entry: [[relative path, size], ...]}."""
    out = {}
    cache = os.path.join(root, "cache")
    for entry in sorted(os.listdir(cache)) if os.path.isdir(cache) else ():
        files = []
        for dirpath, _, names in os.walk(os.path.join(cache, entry)):
            for name in sorted(names):
                path = os.path.join(dirpath, name)
                files.append([os.path.relpath(path, cache), os.path.getsize(path)])
        out[entry] = files
    return out


def fp8(rows: int, cols: int, groups: int | None = None):
    shape = (rows, cols) if groups is None else (groups, rows, cols)
    data = torch.randn(shape, device="cuda").to(torch.float8_e4m3fn)
    return data


def dense_call(m: int) -> None:
    a, sa = fp8(m, K), torch.ones(m, K // 128, device="cuda")
    b, sb = fp8(N, K), torch.ones(N // 128, K // 128, device="cuda")
    d = torch.empty(m, N, device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt((a, sa), (b, sb), d)


def grouped_call(groups: int = 4, m_per_group: int = 128, n: int = 4096, k: int = 7168) -> None:
    m = groups * m_per_group
    a, sa = fp8(m, k), torch.ones(m, k // 128, device="cuda")
    b, sb = fp8(n, k, groups), torch.ones(groups, n // 128, k // 128, device="cuda")
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    layout = torch.arange(groups, device="cuda", dtype=torch.int32).repeat_interleave(m_per_group)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, sb), d, layout)


def record(calls: list, name: str, fn, root: str) -> None:
    before = tree(root)
    t0 = time.perf_counter()
    try:
        fn()
        torch.cuda.synchronize()
        error = None
    except Exception as exc:  # a probe: record what this version does, go on
        error = f"{type(exc).__name__}: {exc}"[:400]
    after = tree(root)
    new = {e: f for e, f in after.items() if e not in before}
    calls.append({"call": name, "wall_s": round(time.perf_counter() - t0, 3), "error": error, "new_entries": new})
    print(f"{name}: {len(new)} new entries {sorted(new)} {error or ''}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    root = os.environ["DG_JIT_CACHE_DIR"]
    calls: list = []
    for m in M_VALUES:
        record(calls, f"fp8_gemm_nt m{m} n{N} k{K}", lambda m=m: dense_call(m), root)
    record(calls, "m_grouped_fp8_gemm_nt_contiguous 4x128 n4096 k7168", grouped_call, root)
    meta = {}
    for entry, files in tree(root).items():
        for rel, _ in files:
            if rel.endswith("meta.json"):
                with open(os.path.join(root, "cache", rel)) as f:
                    meta[entry] = f.read()[:2000]
    report = {"version": getattr(deep_gemm, "__version__", "?"), "file": deep_gemm.__file__,
              "cache_root_listing": sorted(os.listdir(root)), "calls": calls, "meta_json": meta}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
