#!/usr/bin/env python3
"""A planted post-seal DeepGEMM miss, on the real library: the JIT monitor must report it.

    python3 bench/dg_post_seal_miss.py --out $OUT      (needs an SM90 GPU and DeepGEMM importable)

With a fresh DG_JIT_CACHE_DIR and the monitor in warn mode: warm ``fp8_gemm_nt`` for n=7168
k=2048 at M=1 (its kernel and the scales' transpose kernel compile), seal, then call M=MISS
(default 129: the model says a new kernel, kernel_model.deep_gemm.dense_keys). The monitor must
report exactly the new kernels with their cache entries, whatever the layout of this DeepGEMM
(2.5/2.6 or 2.8), and count them in its totals. Then a fresh process on the same cache with
``jit_monitor.seal(loads_ok=True)`` must compile nothing, and where the layout records loads
(2.8) count them. Writes $OUT/dg-post-seal-<version>.json; exit 0 when all of that held.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

N, K = 7168, 2048


def call_gemm(dg, torch, m: int) -> None:
    a = torch.empty(m, K, device="cuda", dtype=torch.float8_e4m3fn)
    a_s = torch.zeros(m, K // 128, device="cuda", dtype=torch.float32)
    w = torch.zeros(N, K, device="cuda", dtype=torch.float8_e4m3fn)
    w_s = torch.ones(N // 128, K // 128, device="cuda", dtype=torch.float32)
    out = torch.empty(m, N, device="cuda", dtype=torch.bfloat16)
    dg.fp8_gemm_nt((a, a_s), (w, w_s), out)
    torch.cuda.synchronize()


def step(monitor, name, fn):
    monitor.begin_step(name)
    try:
        fn()
    finally:
        counts = monitor.end_step()
    return counts.as_dict()


def first_process(miss: int) -> dict:
    from executor import jit_monitor
    from executor.caches import deep_gemm_install
    from kernel_model import deep_gemm as model

    import torch  # noqa: F401 - DeepGEMM imports it too
    install = deep_gemm_install.find_install()
    dg = __import__(install.module, fromlist=["_"])
    monitor = jit_monitor.Monitor("warn").install()
    warm = step(monitor, "warm/m1", lambda: call_gemm(dg, torch, 1))
    monitor.seal()
    miss_counts = step(monitor, f"verify/gemm-n{N}-k{K}/m{miss}", lambda: call_gemm(dg, torch, miss))
    keys = model.dense_keys([1, miss], N, K, torch.cuda.get_device_properties(0).multi_processor_count)
    return {"install": install._asdict(), "warm": warm, "miss": miss_counts,
            "events": monitor.post_seal_events, "model_new_kernel": len(keys) == 2,
            "layouts": sorted({e.layout for e in deep_gemm_install.scan(deep_gemm_install.writable_root())})}


def second_process(miss: int) -> dict:
    from executor import jit_monitor
    from executor.caches import deep_gemm_install

    import torch  # noqa: F401
    dg = __import__(deep_gemm_install.find_install().module, fromlist=["_"])
    monitor = jit_monitor.Monitor("warn").install()
    monitor.seal(loads_ok=True)
    counts = step(monitor, "cached", lambda: (call_gemm(dg, torch, 1), call_gemm(dg, torch, miss)))
    return {"cached": counts, "events": monitor.post_seal_events}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "out"))
    parser.add_argument("--miss", type=int, default=129)
    parser.add_argument("--phase", choices=("first", "second"))
    args = parser.parse_args()
    if args.phase:
        print(json.dumps((first_process if args.phase == "first" else second_process)(args.miss), default=str))
        return 0
    env = {**os.environ, "DG_JIT_CACHE_DIR": tempfile.mkdtemp(prefix="dg-miss-")}
    runs = [json.loads(subprocess.run([sys.executable, __file__, "--phase", phase, "--miss", str(args.miss)],
                                      env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
            for phase in ("first", "second")]
    return report(args.out, *runs)


def report(out: str, first: dict, second: dict) -> int:
    dg_events = [e for e in first["events"] if e["backend"] == "deep_gemm"]
    ok = (first["model_new_kernel"] and len(dg_events) == first["miss"]["deep_gemm_jit"] >= 1
          and not second["events"] and second["cached"]["deep_gemm_jit"] == 0)
    version = first["install"]["version"]
    result = {"ok": ok, "first": first, "second": second}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"dg-post-seal-{version}.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(f"DeepGEMM {version} ({first['install']['module']}, layouts {first['layouts']}): warm M=1 compiled "
          f"{first['warm']['deep_gemm_jit']}; post-seal miss reported {len(dg_events)} "
          f"({', '.join(e['cache_entry'] for e in dg_events)}); fresh process: compiled "
          f"{second['cached']['deep_gemm_jit']}, loaded {second['cached']['deep_gemm_loads']}: "
          f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
