#!/usr/bin/env python3
"""Issue 53's GPU matrix: every model of bench/matrix.yaml served in `vllm serve` with the plugin and
vLLM's JIT monitor in error mode, one row per model.

    python3 bench/vllm_matrix.py calls [--budget-s 585] [--only NAME,...]   # the device calls, printed
    python3 bench/vllm_matrix.py run --models NAME,... [--parts plugin-cold] [--budget-s 585] [--dry-run]
    python3 bench/vllm_matrix.py table DIR... [--matrix bench/matrix.yaml]    # markdown rows

`run`, on the GPU machine after bench/vllm_gpu_setup.sh's installs (its `fi` part, `mla` for an MLA
model), serves each model in turn through bench/vllm_startup_proof.sh (MODE=server, WITH_FLASHINFER=1:
vLLM as `pip install vllm==0.25.0` brings it; TP from the matrix) and stops before the call's budget
ends: a model that would not fit is left for the next call and said. Each run's files come back under
$OUT as the proof script packs them (<series>.<part>.tar.gz).

`table` reads run directories (the proof script's /tmp/warmup-proof/runs/<series>, or the unpacked
tarballs: any directory holding <part>/result.json) and writes one markdown row per series: ready, the
HTTP requests answered, compiles after ready (vLLM's JIT monitor and the cache directories), engine
deaths, plan steps that failed, kernels that ran a generic Triton variant after ready, and the KV cache
against stock cold where that run is there. Needs Python and PyYAML.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MATRIX = os.path.join(HERE, "matrix.yaml")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf")
RUN_ESTIMATE_S = 230  # a cold plugin serve and its 300 requests on an H200 (part AF: 108-193 s to ready)


def load_matrix(path: str = MATRIX) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        models = (yaml.safe_load(f) or {}).get("models") or []
    for entry in models:
        if not os.path.isfile(os.path.join(FIXTURES, entry["model"] + ".json")):
            raise SystemExit(f"{path}: {entry['model']}: no tests/fixtures/hf/{entry['model']}.json")
    return models


def spec(entry: dict) -> str:
    """The row's speculative decoding as the proof script's SPEC (<method>:<k>), or ''."""
    s = entry.get("speculative")
    return f"{s['method']}:{int(s.get('num_speculative_tokens', 1))}" if s else ""


def series(entry: dict) -> str:
    """The proof script's series name of a server run with FlashInfer (bench/vllm_startup_proof.sh)."""
    tp = int(entry.get("tp", 1))
    return entry["model"] + ("" if tp == 1 else f"-tp{tp}") + (f"-{spec(entry).replace(':', '')}" if spec(entry)
                                                               else "") + "-fi-serve"


def row_key(entry: dict) -> tuple:
    """A matrix row: the model, its tensor-parallel size and its speculative decoding."""
    return entry["model"], int(entry.get("tp", 1)), spec(entry)


def is_mla(model: str) -> bool:
    with open(os.path.join(FIXTURES, model + ".json"), encoding="utf-8") as f:
        config = json.load(f)
    return bool(config.get("text_config", config).get("kv_lora_rank"))


# --- calls: the device calls that serve the matrix ------------------------------------------------------

def calls(models: list[dict], budget_s: float) -> list[list[dict]]:
    """The models in calls of at most `budget_s` (RUN_ESTIMATE_S a model), one machine kind per call
    (a TP 2 model needs nvidia-h200-x2) and one speculative config (one `run` command), in the
    matrix's order."""
    out: list[list[dict]] = []
    for entry in models:
        last = out[-1] if out else None
        fits = last and len(last) * RUN_ESTIMATE_S + RUN_ESTIMATE_S <= budget_s
        if fits and row_key(last[0])[1:] == row_key(entry)[1:]:
            last.append(entry)
        else:
            out.append([entry])
    return out


def print_calls(models: list[dict], budget_s: float) -> None:
    for group in calls(models, budget_s):
        tp = int(group[0].get("tp", 1))
        kind = "nvidia-h200" if tp == 1 else f"nvidia-h200-x{tp}"
        names = ",".join(e["model"] for e in group)
        mla = any(is_mla(e["model"]) for e in group)
        print(f"# {kind}, after the installs (core; ext; py plugin fi{' mla' if mla else ''}): {names}")
        print(f"python3 bench/vllm_matrix.py run --models {names}" + (f" --tp {tp}" if tp != 1 else "")
              + (f" --spec {spec(group[0])}" if spec(group[0]) else ""))


# --- run: on the GPU machine -----------------------------------------------------------------------------

def run(models: list[dict], parts: str, budget_s: float, dry_run: bool) -> int:
    start = time.time()
    failed = 0
    for i, entry in enumerate(models):
        left = budget_s - (time.time() - start)
        if left < RUN_ESTIMATE_S and not dry_run:
            rest = ", ".join(e["model"] for e in models[i:])
            print(f"[matrix] {left:.0f} s left in this call: not run here: {rest}", flush=True)
            return failed
        env = {"MODE": "server", "WITH_FLASHINFER": "1", "MODEL": entry["model"], "TP": str(entry.get("tp", 1)),
               "PARTS": parts, "CALL_START": str(int(start)), "BUDGET_S": str(int(budget_s)), "SPEC": spec(entry)}
        command = ["bash", os.path.join(HERE, "vllm_startup_proof.sh")] + (["--dry-run"] if dry_run else [])
        print(f"[matrix] {entry['model']} (tp {env['TP']}): " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
              + " " + " ".join(command), flush=True)
        done = subprocess.run(command, env={**os.environ, **env}, cwd=ROOT)
        failed += done.returncode != 0
    return failed


# --- table: one row per model --------------------------------------------------------------------------

def find_runs(dirs: list[str]) -> dict:
    """{row_key: {part: path}} of every <part>/result.json under the directories, by the model
    directory, tensor-parallel size and speculative config the run itself names; of two runs of a
    part, the later one."""
    found: dict = {}
    for top in dirs:
        for path, _subdirs, files in sorted(os.walk(top)):
            if "result.json" not in files:
                continue
            r = load_json(os.path.join(path, "result.json"))
            model = os.path.basename(str(r.get("model_dir") or "").rstrip("/"))
            sc = r.get("speculative_config") or {}
            key = (model, int(r.get("tensor_parallel_size") or 1),
                   f"{sc['method']}:{int(sc['num_speculative_tokens'])}" if sc else "")
            part = os.path.basename(path)
            earlier = found.get(key, {}).get(part)
            if earlier is None or (r.get("script_start") or 0) >= (load_json(os.path.join(earlier, "result.json"))
                                                                   .get("script_start") or 0):
                found.setdefault(key, {})[part] = path
    return found


def load_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def failed_steps(part_dir: str) -> list[str]:
    report = load_json(os.path.join(part_dir, "plan_report.json"))
    return [s["id"] for s in report.get("steps") or [] if s.get("status") == "failed"]


def engine_died(result: dict) -> int:
    """1 where vLLM's engine died before the last request was answered (its death at the driver's
    SIGINT, after the requests, is the stop, not a death)."""
    died = ((result.get("log_marks") or {}).get("engine dead") or {}).get("t")
    ends = [p["end"] for p in result.get("phases") or [] if str(p.get("name", "")).startswith(("HTTP requests",
                                                                                              "first request"))]
    return int(died is not None and (not ends or died <= max(ends)))


def facts(part_dir: str) -> dict:
    """One run's row: what result.json (bench/vllm_serve_trace.py) and the plan report say."""
    r = load_json(os.path.join(part_dir, "result.json"))
    http = r.get("http") or {}
    monitor = (r.get("compiles_after_ready") or {}).get("events")
    files = (r.get("cache_new_after_ready") or {}).get("files")
    ours = r.get("rank_events_after_ready")
    return {"ready_s": None if r.get("ready_s") is None else round(r["ready_s"], 1),
            "ok": http.get("ok"), "failed": http.get("failed"), "jit_after_ready": monitor,
            "plugin_after_ready": None if ours is None else sum(int(e.get("events") or 0) for e in ours), "files_after_ready": None if files is None else sum(files.values()),
            "engine_deaths": engine_died(r),
            "kv_tokens": (r.get("kv_cache") or {}).get("kv_cache_size_tokens"),
            "failed_steps": failed_steps(part_dir), "generic_runs": r.get("generic_variant_runs") or [],
            "error": r.get("error")}


def cell(value, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def table(dirs: list[str], models: list[dict]) -> list[str]:
    runs = find_runs(dirs)
    rows = ["| model | covers | aside | ready (plugin cold) | HTTP ok / failed | compiles after ready "
            "(vLLM's monitor / the plugin's / new cache files) | engine deaths | failed plan steps | generic variant runs | KV tokens "
            "(plugin / stock cold) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for entry in models:
        parts = runs.get(row_key(entry))
        if not parts or "plugin-cold" not in parts:
            continue
        f = facts(parts["plugin-cold"])
        stock = facts(parts["stock-cold"]) if "stock-cold" in parts else {}
        tp = int(entry.get("tp", 1))
        rows.append(" | ".join([
            f"| {entry['model']}{'' if tp == 1 else f' (TP {tp})'}{f' ({spec(entry)})' if spec(entry) else ''}", ", ".join(entry.get("covers") or []),
            "yes" if entry.get("aside") else "no", cell(f["ready_s"], " s") if f["ready_s"] is not None
            else f"not ready ({f['error']})", f"{cell(f['ok'])} / {cell(f['failed'])}",
            f"{cell(f['jit_after_ready'])} / {cell(f['plugin_after_ready'])} / {cell(f['files_after_ready'])}", str(f["engine_deaths"]),
            ", ".join(f["failed_steps"]) or "0", ", ".join(f["generic_runs"]) or "0",
            f"{cell(f['kv_tokens'])} / {cell(stock.get('kv_tokens'))} |"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calls", help="print the device calls that serve the matrix")
    c.add_argument("--budget-s", type=float, default=585.0)
    c.add_argument("--only", help="comma-separated models of the matrix")
    r = sub.add_parser("run", help="serve models of the matrix, one after the other (on the GPU machine)")
    r.add_argument("--models", required=True, help="comma-separated models of the matrix")
    r.add_argument("--tp", type=int, default=1, help="the tensor-parallel size of the matrix rows to run")
    r.add_argument("--spec", default="", help="the speculative decoding of the matrix rows to run (<method>:<k>)")
    r.add_argument("--parts", default="plugin-cold", help="the proof script's PARTS for each model")
    r.add_argument("--budget-s", type=float, default=585.0)
    r.add_argument("--dry-run", action="store_true")
    t = sub.add_parser("table", help="markdown rows from run directories")
    t.add_argument("dirs", nargs="+")
    for p in (c, r, t):
        p.add_argument("--matrix", default=MATRIX)
    args = parser.parse_args()
    models = load_matrix(args.matrix)
    if args.command == "calls":
        only = set(args.only.split(",")) if args.only else None
        print_calls([m for m in models if only is None or m["model"] in only], args.budget_s)
    elif args.command == "run":
        names = args.models.split(",")
        chosen = [m for name in names for m in models if row_key(m) == (name, args.tp, args.spec)]
        missing = sorted(set(names) - {m["model"] for m in chosen})
        if missing:
            raise SystemExit(f"not in {args.matrix} at TP {args.tp}{f' with {args.spec}' if args.spec else ''}: "
                             f"{', '.join(missing)}")
        sys.exit(1 if run(chosen, args.parts, args.budget_s, args.dry_run) else 0)
    else:
        print("\n".join(table(args.dirs, models)))


if __name__ == "__main__":
    main()
