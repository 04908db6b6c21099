#!/usr/bin/env bash
# Issue 17's proof on the GPU machine: stock vLLM vs vLLM + the warmup-planner plugin.
# STATUS: NOT YET RUN (written without a GPU; the CPU tests in tests/vllm_plugin cover the logic).
#
# Needs vLLM 0.25.0 installed by bench/vllm_gpu_setup.sh (three carried parts; see its header),
# in the same warm machine:    bash bench/vllm_plugin_gpu.sh      (results under $OUT/vllm_plugin)
#
# For each model (Llama-3.1-8B FP8 block-128, Qwen3-30B-A3B FP8: tests/fixtures/hf/*.json) and each
# arm (stock, plugin), twice: from an empty VLLM_CACHE_ROOT (cold) and again on it (warm). Each run
# records time to ready, the first request's latency, and the compiles by kind after ready during a
# 500-request offline trace (bench/vllm_plugin_trace.py); the plugin's per-stage warmup walls are in
# its report (WARMUP_PLAN_REPORT). Targets (issue 17): 0 compiles after ready with the plugin; cold
# ready at most stock's cold, warm at most stock's warm. Record the table in bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/vllm_gpu_setup.sh env   # sets PYTHONPATH to the vLLM install (from /work/main's bench/)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
# The plugin is found through its entry point: the checkout's metadata must be on the path.
# (no network there: if hatchling is missing this fails, and the plugin arm then runs stock; check
# that its stderr shows "warmup-planner: plan vllm-0.25" lines before trusting its numbers.)
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "WARNING: editable install failed"
RESULTS=${OUT:-/tmp}/vllm_plugin
mkdir -p "$RESULTS"
MODELS="llama-3.1-8b-instruct-fp8-block qwen3-30b-a3b-fp8"
for model in $MODELS; do
  for arm in stock plugin; do
    cache=$(mktemp -d /tmp/vllm-cache-XXXX)     # empty VLLM_CACHE_ROOT: the cold run
    for temp in cold warm; do
      dir="$RESULTS/$model/$arm-$temp"; mkdir -p "$dir"
      plan=""; [ "$arm" = plugin ] && plan=vllm-0.25
      env VLLM_CACHE_ROOT="$cache" WARMUP_PLAN="$plan" \
          WARMUP_PLAN_REPORT="$dir/plan_report.json" WARMUP_JIT_LOG="$dir/plugin_jit.jsonl" \
          timeout 540 python3 bench/vllm_plugin_trace.py --config "tests/fixtures/hf/$model.json" \
            --arm "$arm" --out "$dir" > "$dir/stdout.txt" 2> "$dir/stderr.txt" \
        || echo "FAILED $model $arm $temp (rc $?): $(tail -3 "$dir/stderr.txt")" | tee -a "$RESULTS/failures.txt"
    done
    rm -rf "$cache"
  done
done
python3 - "$RESULTS" <<'PY'
import glob, json, os, sys
rows = [json.load(open(p)) | {"run": os.path.relpath(os.path.dirname(p), sys.argv[1])}
        for p in sorted(glob.glob(os.path.join(sys.argv[1], "*", "*", "result.json")))]
for r in rows:
    print(r["run"], "ready", r["ready_s"], "first", r["first_request_s"], "compiles", r["monitor"].get("post_seal"))
PY
