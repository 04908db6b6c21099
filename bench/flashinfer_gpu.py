"""FlashInfer's autotuner for real on an SM90 GPU, the way vLLM runs it at startup.

    source bench/flashinfer_setup.sh && python3 bench/flashinfer_gpu.py --out $OUT

The op: ``flashinfer.gemm.bmm_fp8(..., backend="auto")`` (custom op ``fp8_gemm``; on SM90 its
cuBLASLt runner, one tactic per cuBLASLt algorithm) at every distinct (N, K) of the engine's
FP8 linear layers, called once at the plan's num_tokens (max_num_batched_tokens, 8192 for the
shipped engines) inside ``flashinfer.autotuner.autotune(True, cache=FILE)``: FlashInfer
profiles each shape at the buckets it derives from 8192 (21 hybrid buckets).

Each run is a fresh process:

1. ``tune``: empty cache path; JIT build of the modules timed on its own; tuning timed; every
   tactic profiled recorded (``AutoTuner._profile_single_kernel`` wrapped); the cache file
   FlashInfer writes on leaving the context (``save_configs``: mkstemp in the same directory
   + os.replace, observed); numerics of the tuned op against a float32 torch reference.
2. ``load``: the same calls under ``autotune(True, cache=FILE)``: the file is loaded, nothing
   is profiled (asserted: 0 profiling calls, empty profiling cache, file unchanged).
3. ``exec1`` / ``exec2``: the executor's own step (``executor.run.execute`` on the plan's
   ``flashinfer_autotune`` step, backend ``executor.backends.flashinfer``) with a fresh cache
   file, then again in a new process: the second tunes nothing.

The parent writes $OUT/summary.json, $OUT/logs.txt and a copy of the cache file, and prints a
short summary. --phase runs one phase in this process (what the parent does for each).

Over 400 lines: a GPU script carried to the device alone: its set-up, the run and the checks in one file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = "/tmp/fi-bench"
PHASES = ("tune", "load", "exec1", "exec2")


def sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def plan_step(plan: str, engine_name: str):
    """(expanded plan, the flashinfer autotune step, the engine record) from the planner."""
    sys.path.insert(0, REPO)
    from planner.engine.config import load_engine
    from planner.plan.authored import load_plan
    from planner.plan.expand import expand

    engine = load_engine(engine_name)
    expanded = expand(load_plan(plan), engine)
    steps = [s for s in expanded.steps if s.kind == "autotune" and s.library == "flashinfer"]
    if not steps:
        raise SystemExit(f"plan {plan} has no flashinfer autotune step for {engine_name}")
    return expanded, steps[0], engine.facts  # the record the executor takes


# --- one phase, in this process ---------------------------------------------------------------

class Recorder:
    """Wraps the tuner and FlashInfer's JIT to record what happens (no behaviour change)."""

    def __init__(self, tuner):
        self.tuner = tuner
        self.profiles: list[dict] = []     # one per tactic profiled
        self.lookups = {"hit": 0, "miss": 0}
        self.jit: list[dict] = []          # one per JitSpec build() call
        self.replaces: list[tuple[str, str]] = []

    def install(self):
        import flashinfer.jit.core as core

        tuner, rec = self.tuner, self
        profile = tuner._profile_single_kernel
        search = tuner.search_cache

        def profiled(runner, inputs, tactic, *a, **kw):
            t = None
            try:
                t = profile(runner, inputs, tactic, *a, **kw)
                return t
            finally:
                a0 = inputs[0]
                rec.profiles.append({"runner": type(runner).__name__, "m": int(a0.shape[-2]),
                                     "k": int(a0.shape[-1]), "n": int(inputs[1].shape[-1]),
                                     "tactic": tactic if isinstance(tactic, (int, str)) else str(tactic),
                                     "ms": None if t is None or t == float("inf") else round(t, 5)})

        def searched(*a, **kw):
            out = search(*a, **kw)
            rec.lookups["hit" if out[0] else "miss"] += 1
            return out

        tuner._profile_single_kernel = profiled
        tuner.search_cache = searched
        for cls in (getattr(core, "JitSpecNvcc", None), getattr(core, "JitSpec", None)):
            if cls is not None and "build" in vars(cls):
                self._wrap_build(cls)
                break
        real_replace = os.replace

        def replace(src, dst, *a, **kw):
            rec.replaces.append((str(src), str(dst)))
            return real_replace(src, dst, *a, **kw)

        os.replace = replace
        return self

    def _wrap_build(self, cls):
        build, rec = cls.build, self

        def timed_build(spec, *a, **kw):
            so = spec.get_library_path() if hasattr(spec, "get_library_path") else None
            before = os.stat(so).st_mtime_ns if so is not None and os.path.exists(so) else None
            t0 = time.perf_counter()
            try:
                return build(spec, *a, **kw)
            finally:
                after = os.stat(so).st_mtime_ns if so is not None and os.path.exists(so) else None
                rec.jit.append({"module": getattr(spec, "name", "?"), "s": round(time.perf_counter() - t0, 3),
                                "compiled": after is not None and after != before})

        cls.build = timed_build


def tensors(torch, m: int, n: int, k: int, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(1, m, k, device="cuda", dtype=torch.bfloat16, generator=g) * 0.5).to(torch.float8_e4m3fn)
    b = (torch.randn(1, n, k, device="cuda", dtype=torch.bfloat16, generator=g) * 0.5).to(torch.float8_e4m3fn)
    return a, b.transpose(1, 2)


def numerics(torch, bmm_fp8, shapes, ms) -> list[dict]:
    """bmm_fp8 (tactic from the tuner) against float32 torch on the same FP8 inputs, scaled."""
    out = []
    torch.backends.cuda.matmul.allow_tf32 = False
    sa = torch.tensor(0.5, device="cuda", dtype=torch.float32)
    sb = torch.tensor(0.25, device="cuda", dtype=torch.float32)
    for n, k in shapes:
        for m in ms:
            a, b = tensors(torch, m, n, k, seed=m + n + k)
            got = bmm_fp8(a, b, sa, sb, dtype=torch.bfloat16, backend="auto").float()
            ref = torch.matmul(a.float(), b.float()) * (0.5 * 0.25)
            err = ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
            out.append({"n": n, "k": k, "m": m, "max_rel_err": round(err, 6), "ok": err < 2e-2})
            del a, b, got, ref
    return out


def cache_summary(path: str) -> dict:
    """Entries per (runner, N, K): bucket -> tactic, plus metadata."""
    with open(path) as f:
        data = json.load(f)
    meta = data.pop("_metadata", None)
    per: dict = {}
    import ast
    import re
    for key, value in data.items():
        if key.startswith("_"):
            continue
        runner, tactic = value
        try:  # str((custom_op, runner, nearest_profile, extras)); extras may hold torch dtypes
            op, runner_name, profile, _ = ast.literal_eval(re.sub(r"\btorch\.(\w+)", r"'torch.\1'", key))
        except (ValueError, SyntaxError):
            op, runner_name, profile = key, runner, ()
        m = profile[0][-2] if profile else None
        n = profile[1][-1] if len(profile) > 1 else None
        k = profile[0][-1] if profile else None
        per.setdefault(f"{op}/{runner_name}/N={n},K={k}", {})[m] = tactic
    return {"metadata": meta, "entries": sum(len(v) for v in per.values()),
            "per_shape": {s: dict(sorted(v.items())) for s, v in sorted(per.items())}}


def phase_library(args, which: str) -> dict:
    """`tune` (from an empty cache file) or `load` (from the one tune wrote): FlashInfer's own
    autotune context around one bmm_fp8 call per shape, then the numerics outside it."""
    t_start = time.perf_counter()
    res: dict = {"phase": which}
    torch, bmm_fp8, autotune, tuner, rec = import_library(res)
    build_jit_modules(res)
    _, step, engine = plan_step(args.plan, args.engine)
    sys.path.insert(0, REPO)
    from planner.engine.queries import fp8_shapes
    shapes = fp8_shapes(engine.model.linear)
    num_tokens = step.num_tokens
    res.update(step=step.to_dict(), shapes=[list(s) for s in shapes], num_tokens=num_tokens)
    path = prepare_cache(res, args.cache, fresh=which == "tune")
    tuning_run(res, torch, bmm_fp8, autotune, tuner, rec, shapes, num_tokens, path)
    tuner_outcome(res, tuner, rec, path)
    # Outside the context: the tuned (or loaded) tactic is used; check the numbers.
    rec.lookups = {"hit": 0, "miss": 0}
    res["numerics"] = numerics(torch, bmm_fp8, shapes, sorted({1, 100, 3000, num_tokens}))
    res["numerics_lookups"] = dict(rec.lookups)
    res["jit"] = rec.jit
    res["jit_compiled_modules"] = [j["module"] for j in rec.jit if j["compiled"]]
    res["wall_s"] = round(time.perf_counter() - t_start, 3)
    return res


def import_library(res: dict):
    """(torch, bmm_fp8, autotune, the tuner, its Recorder): the import timed, versions recorded."""
    import torch

    t0 = time.perf_counter()
    import flashinfer
    from flashinfer.autotuner import AutoTuner, autotune
    from flashinfer.gemm import bmm_fp8
    res["import_s"] = round(time.perf_counter() - t0, 3)
    res["versions"] = {"flashinfer": flashinfer.__version__, "torch": torch.__version__,
                       "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
                       "capability": ".".join(map(str, torch.cuda.get_device_capability()))}
    try:
        import tvm_ffi
        res["versions"]["tvm_ffi"] = tvm_ffi.__version__
    except Exception as e:  # noqa: BLE001
        res["versions"]["tvm_ffi"] = repr(e)
    tuner = AutoTuner.get()
    return torch, bmm_fp8, autotune, tuner, Recorder(tuner).install()


def build_jit_modules(res: dict) -> None:
    """The JIT modules the op and the tuner need, built (or found) before tuning, timed on their own."""
    t0 = time.perf_counter()
    from flashinfer.gemm.gemm_base import get_gemm_module
    from flashinfer.tllm_utils import get_trtllm_utils_module
    get_gemm_module()
    get_trtllm_utils_module()
    res["jit_s"] = round(time.perf_counter() - t0, 3)


def prepare_cache(res: dict, path: str, fresh: bool) -> str:
    if fresh and os.path.exists(path):
        os.unlink(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    res["cache_file"] = path
    res["cache_before"] = {"exists": os.path.exists(path), "sha256": sha256(path)}
    return path


def tuning_run(res, torch, bmm_fp8, autotune, tuner, rec, shapes, num_tokens: int, path: str) -> None:
    """One bmm_fp8 call per shape inside FlashInfer's autotune context (tunes, or loads `path`)."""
    inputs = {s: tensors(torch, num_tokens, s[0], s[1], seed=1) for s in shapes}
    one = torch.ones((), device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    rec.replaces.clear()
    t0 = time.perf_counter()
    per_shape_s = {}
    with torch.inference_mode(), autotune(True, cache=path):
        res["file_configs_loaded"] = len(getattr(tuner, "_file_configs", {}))
        for (n, k), (a, b) in inputs.items():
            ts = time.perf_counter()
            bmm_fp8(a, b, one, one, dtype=torch.bfloat16, backend="auto")
            torch.cuda.synchronize()
            per_shape_s[f"N={n},K={k}"] = round(time.perf_counter() - ts, 3)
        t_ctx = time.perf_counter()
    res["tune_s"] = round(t_ctx - t0, 3)            # the tuning run (calls inside the context)
    res["save_s"] = round(time.perf_counter() - t_ctx, 3)  # leaving the context: save_configs
    res["per_shape_s"] = per_shape_s


def tuner_outcome(res: dict, tuner, rec, path: str) -> None:
    """What the run left: how the cache file was written, the tuner's counts, tactics per bucket."""
    res["replaces"] = [(os.path.basename(s), d) for s, d in rec.replaces]
    res["atomic_write"] = any(d == os.path.abspath(path) and os.path.dirname(os.path.abspath(s)) ==
                              os.path.dirname(os.path.abspath(path)) for s, d in rec.replaces)
    res["stray_temp_files"] = [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".autotuner_")]
    res["profiling_calls"] = len(rec.profiles)
    res["profiling_cache_entries"] = len(tuner.profiling_cache)
    res["dirty_after"] = bool(getattr(tuner, "_dirty", False))
    res["stats"] = {"tuned_op_total_configs": dict(tuner.stats.tuned_op_total_configs),
                    "tuned_op_successful_configs": dict(tuner.stats.tuned_op_successful_configs),
                    "failed_tactics": {k: len(v) for k, v in tuner.stats.failed_tactics.items()}}
    res["tactics_per_bucket"] = tactics_per_bucket(rec.profiles)
    res["profiles"] = rec.profiles
    res["runners"] = sorted({p["runner"] for p in rec.profiles})
    res["cache_after"] = {"exists": os.path.exists(path), "sha256": sha256(path),
                          "bytes": os.path.getsize(path) if os.path.exists(path) else None}
    if os.path.exists(path):
        res["cache_content"] = cache_summary(path)


def tactics_per_bucket(profiles: list) -> dict:
    """shape -> bucket M -> tactics tried, failed, best / worst / tactic-0 times and the gain over tactic 0."""
    buckets: dict = {}
    for p in profiles:
        b = buckets.setdefault(f"N={p['n']},K={p['k']}", {}).setdefault(
            p["m"], {"tactics": 0, "failed": 0, "best_ms": None, "worst_ms": None, "tactic0_ms": None})
        b["tactics"] += 1
        if p["tactic"] == 0:
            b["tactic0_ms"] = p["ms"]  # cuBLASLt's first heuristic algorithm
        if p["ms"] is None:
            b["failed"] += 1
        else:
            b["best_ms"] = p["ms"] if b["best_ms"] is None else min(b["best_ms"], p["ms"])
            b["worst_ms"] = p["ms"] if b["worst_ms"] is None else max(b["worst_ms"], p["ms"])
    for per in buckets.values():
        for b in per.values():
            if b["best_ms"] and b["tactic0_ms"]:
                b["gain_vs_tactic0"] = round(b["tactic0_ms"] / b["best_ms"], 3)
    return {s: dict(sorted(v.items())) for s, v in buckets.items()}


def phase_executor(args, which: str) -> dict:
    t_start = time.perf_counter()
    sys.path.insert(0, REPO)
    from executor.run import Options, execute

    expanded, step, engine = plan_step(args.plan, args.engine)
    path = args.exec_cache
    if which == "exec1" and os.path.exists(path):
        os.unlink(path)
    one = expanded._replace(steps=(step,))
    # Record FlashInfer's JIT builds here too, to compare with what the executor's monitor counts.
    import flashinfer.jit.core as core
    builds = Recorder(None)
    builds._wrap_build(core.JitSpecNvcc if "build" in vars(core.JitSpecNvcc) else core.JitSpec)
    options = Options(runner="none", flashinfer_cache=path, jit_monitor="warn", device="cuda")
    report = execute(one, engine, options)
    data = report.to_dict()
    rec = data["steps"][0]
    return {"phase": which, "status": rec["status"], "error": rec.get("error"),
            "kernel_calls": rec.get("kernel_calls"), "wall_s_step": rec.get("wall_s"),
            "details": rec.get("details"), "jit": rec.get("jit"), "exit_code": report.exit_code(),
            "flashinfer_workspace": os.environ.get("FLASHINFER_WORKSPACE_BASE"),
            "jit_builds_seen_by_bench": builds.jit,
            "cache_sha256": sha256(path), "wall_s": round(time.perf_counter() - t_start, 3)}


# --- the parent -----------------------------------------------------------------------------------

def run_child(args, phase: str, log, timeout: float) -> dict:
    out_json = os.path.join(WORK, f"{phase}.json")
    if os.path.exists(out_json):
        os.unlink(out_json)
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--plan", args.plan,
           "--engine", args.engine, "--cache", args.cache, "--exec-cache", args.exec_cache,
           "--json", out_json]
    env = dict(os.environ)
    if phase == "exec1" and args.exec_cold_jit:
        # a JIT workspace of its own: the executor's step compiles FlashInfer's modules itself
        env["FLASHINFER_WORKSPACE_BASE"] = os.path.join(WORK, "ws-exec")
        shutil.rmtree(env["FLASHINFER_WORKSPACE_BASE"], ignore_errors=True)
    t0 = time.perf_counter()
    log.write(f"\n===== {phase}: {' '.join(cmd)}\n")
    log.flush()
    try:
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, env=env)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    wall = round(time.perf_counter() - t0, 3)
    try:
        with open(out_json) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {"phase": phase, "error": "no result (see logs.txt)"}
    res["rc"], res["process_wall_s"] = rc, wall
    return res


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--plan", default="vllm-head")
    ap.add_argument("--engine", default="llama-3.1-8b-fp8-h100")
    ap.add_argument("--cache", default=os.path.join(WORK, "cache", "autotune_configs.json"))
    ap.add_argument("--exec-cache", default=os.path.join(WORK, "exec-cache", "autotune_configs.json"))
    ap.add_argument("--phase", choices=PHASES)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--json")
    ap.add_argument("--no-exec-cold-jit", dest="exec_cold_jit", action="store_false",
                    help="exec1 reuses the JIT modules built by tune (default: exec1 builds its own)")
    ap.add_argument("--budget", type=float, default=370.0,
                    help="seconds for all phases: a phase gets what is left, and none starts with < 20 s")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    if args.phase:
        return run_phase_here(args)
    summary = run_phases(args)
    checks = summary["checks"] = check(summary["phases"])
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    print_summary(summary["phases"], checks)
    return 0 if all(checks.values()) else 1


def run_phase_here(args) -> int:
    """A child: one phase in this process, its result to --json."""
    try:
        res = (phase_library if args.phase in ("tune", "load") else phase_executor)(args, args.phase)
    except BaseException as e:  # noqa: BLE001 - the parent reports it
        import traceback
        traceback.print_exc()
        res = {"phase": args.phase, "error": f"{type(e).__name__}: {e}"}
    with open(args.json, "w") as f:
        json.dump(res, f, indent=1, default=str)
    return 0 if not res.get("error") else 1


def run_phases(args) -> dict:
    """The parent: each phase in a fresh process within the budget; summary.json after each."""
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(WORK, exist_ok=True)
    setup_log = os.environ.get("FI_SETUP_LOG", "/tmp/fi-setup.log")
    summary: dict = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "argv": sys.argv[1:],
                     "setup_log": open(setup_log).read() if os.path.exists(setup_log) else None,
                     "phases": {}}
    t_parent = time.perf_counter()
    with open(os.path.join(args.out, "logs.txt"), "w") as log:
        for phase in args.phases.split(","):
            left = args.budget - (time.perf_counter() - t_parent)
            if left < 20:
                summary["phases"][phase] = {"phase": phase, "error": f"not run: {left:.0f} s of the budget left"}
                continue
            res = run_child(args, phase, log, left)
            summary["phases"][phase] = res
            with open(os.path.join(args.out, "summary.json"), "w") as f:
                json.dump(summary, f, indent=1, default=str)
            if phase == "tune" and os.path.exists(args.cache):
                shutil.copy(args.cache, os.path.join(args.out, "autotune_configs.json"))
            if phase == "tune" and "error" in res:
                break
    return summary


def check(ph: dict) -> dict:
    t, l = ph.get("tune", {}), ph.get("load", {})
    e1, e2 = ph.get("exec1", {}), ph.get("exec2", {})
    return {
        "tune: profiled tactics": (t.get("profiling_calls") or 0) > 0,
        "tune: cache written atomically (mkstemp + os.replace in its directory)": bool(t.get("atomic_write")),
        "tune: numerics": bool(t.get("numerics")) and all(x["ok"] for x in t["numerics"]),
        "load: configs loaded": (l.get("file_configs_loaded") or 0) > 0,
        "load: 0 profiling calls": l.get("profiling_calls") == 0 and l.get("profiling_cache_entries") == 0,
        "load: cache file unchanged": bool(l.get("cache_before", {}).get("sha256"))
        and l.get("cache_before", {}).get("sha256") == l.get("cache_after", {}).get("sha256"),
        "load: numerics": bool(l.get("numerics")) and all(x["ok"] for x in l["numerics"]),
        "exec1: ok, tuned": e1.get("status") == "ok" and ((e1.get("details") or {}).get("tactics_profiled") or 0) > 0,
        "exec2: ok, 0 tactics profiled": e2.get("status") == "ok"
        and (e2.get("details") or {}).get("tactics_profiled") == 0,
    }


def _get(d, *keys):
    for key in keys:
        d = (d or {}).get(key) if isinstance(d, dict) else None
    return d


def print_summary(ph: dict, checks: dict) -> None:
    t = ph.get("tune", {})
    print(f"== flashinfer {_get(t, 'versions', 'flashinfer')} tvm_ffi {_get(t, 'versions', 'tvm_ffi')} "
          f"torch {_get(t, 'versions', 'torch')} cuda {_get(t, 'versions', 'cuda')} on {_get(t, 'versions', 'gpu')} "
          f"sm{_get(t, 'versions', 'capability')}")
    print(f"== op flashinfer.gemm.bmm_fp8 (fp8_gemm), shapes {t.get('shapes')} at num_tokens {t.get('num_tokens')}")
    for name, r in ph.items():
        print(phase_line(name, r))
    for shape, per in (t.get("tactics_per_bucket") or {}).items():
        print(f"  {shape} bucket:tactics(gain over tactic 0): "
              + " ".join(f"{m}:{v['tactics']}({v.get('gain_vs_tactic0')})" for m, v in per.items()))
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")


def phase_line(name: str, r: dict) -> str:
    error = f"{'error=' + str(r.get('error')) if r.get('error') else ''}"
    if name in ("tune", "load"):
        return (f"{name:5s} rc={r.get('rc')} wall={r.get('process_wall_s')}s import={r.get('import_s')}s "
                f"jit={r.get('jit_s')}s (compiled: {r.get('jit_compiled_modules')}) tune={r.get('tune_s')}s "
                f"save={r.get('save_s')}s profiled={r.get('profiling_calls')} tactics "
                f"loaded={r.get('file_configs_loaded')} entries runners={r.get('runners')} "
                f"cache={_get(r, 'cache_after', 'bytes')}B {_get(r, 'cache_content', 'entries')} entries {error}")
    d = r.get("details") or {}
    built = [j["module"] for j in r.get("jit_builds_seen_by_bench") or [] if j["compiled"]]
    return (f"{name:5s} rc={r.get('rc')} status={r.get('status')} wall={r.get('process_wall_s')}s "
            f"step={r.get('wall_s_step')}s tune={d.get('tune_s')}s tactics={d.get('tactics_profiled')} "
            f"profiles={d.get('profiles_tuned')} loaded={d.get('cache_entries_loaded')} "
            f"written={d.get('cache_written')} compiled={built} "
            f"monitor.flashinfer_jit={_get(r, 'jit', 'flashinfer_jit')} {error}")


if __name__ == "__main__":
    sys.exit(main())
