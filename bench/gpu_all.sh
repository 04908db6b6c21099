#!/usr/bin/env bash
# Every GPU test and benchmark of the project, one script; parts run in one device call each
# (a call has 10 minutes):
#
#   PARTS="tables executor deepgemm" bash bench/gpu_all.sh    # call 1 (about 8 minutes on an H100)
#   PARTS="flashinfer runner pytest" bash bench/gpu_all.sh    # call 2
#   bash bench/gpu_all.sh                                      # everything, where time allows
#
# tables     `warmup execute triton-tune` for Llama-3.1-8B and Qwen3-30B-A3B FP8: tunes the
#            block-FP8 GEMM tables into plans/kernel-configs (loads them when they are there);
#            $OUT/kernel-configs.tgz brings them back to be committed
# executor   issue 9's before/after from one run: the `triton` plan as it was (every M, the GEMM
#            calls compile in the main process: bench/plans/triton-full.yaml --jobs 1) and exact
#            (`triton`, --jobs 16), each with an empty Triton cache then warm, --verify 2000; the
#            vllm plan where DeepGEMM/FlashInfer are missing; failures (OOM, injected error,
#            Ctrl-C); the sparse-buckets plan that left M=1209 cold
# deepgemm   where `import deep_gemm` works (DEEP_GEMM_SETUP names a script to source first):
#            bench/deep_gemm_gpu.py (numerics, which M compiles a kernel), then the vllm plan's
#            DeepGEMM stage through the executor for DeepSeek-V3 TP8 and Qwen3-30B-A3B in relax
#            (a fresh DG_JIT_CACHE_DIR), full and exact, --verify 2000; the cache prepared by one
#            process and used by a fresh one; two processes warming one fresh directory at once
# flashinfer where FlashInfer's wheels are carried (.whl-fi, bench/flashinfer_setup.sh):
#            bench/flashinfer_gpu.py (tune, then load in a fresh process)
# runner     bench/runner_gpu.sh: the reference runner's tests and serving-trace proofs
# probe      bench/worker_start_probe.py: what a precompile worker's start-up costs (imports,
#            CUDA utils, cuInit x16, an offline compile and its launcher), $RES/worker-probe.log
# pytest     pytest -m gpu tests/executor
# dgversions issue 18: for each DeepGEMM in $DG_VERSIONS (default "2.5.0 2.6.1 2.8.1": the copies vLLM 0.25.0
#            and 0.33.0 vendor, and upstream 2.6.1 built there; carry .dg, made by `bash bench/deep_gemm_setup.sh prepare`): the ground truth
#            (bench/deep_gemm_gpu.py: which M compiles a kernel, against the model; DG_QUICK=1: 3 shapes)
#            and a planted post-seal miss the monitor must report (bench/dg_post_seal_miss.py)
# bundle-build   issue 18, call 1 (DG_VERSION, default 2.5.0, at DG_ROOT, default /tmp/dg): `warmup bundle
#            build` of DeepSeek-V3 TP8's exact DeepGEMM stage and of the triton plan on Llama-3.1-8B into
#            $OUT/bundles, then the in-place baseline: each plan cold, then warm, in one cache dir
# bundle-verify  issue 18, call 2 (bundles carried in $BUNDLES, default .bundles; DG_ROOT default
#            /tmp/dg-elsewhere: another install path): verify each bundle, install it into fresh caches,
#            run the plan warm with --verify 2000; a truncated and a foreign file must be refused (exit 2)
#
# Logs, JSON reports and the JIT-miss logs go to $OUT/results.tgz, one line per run to
# $OUT/summary.txt, re-packed after each run so that a timeout still returns what ran.
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
WORK=$(mktemp -d /tmp/gpu_all.XXXXXX)
RES=$WORK/results
mkdir -p "$RES"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
EX=${EX:-"python3 -m executor.cli execute"}
BUNDLE=${BUNDLE:-"python3 -m executor.cli bundle"}
PARTS=${PARTS:-"tables executor deepgemm flashinfer runner pytest"}  # EX="... --dry-run": check without a GPU
JOBS=${JOBS:-16}
part() { [[ " $PARTS " == *" $1 "* ]]; }

say() { echo "$*" | tee -a "$SUMMARY"; }
pack() { tar czf "$OUT/results.tgz" -C "$WORK" results 2>/dev/null; }

# run NAME EXPECTED_RC COMMAND...: log to results/NAME.log, one summary line, the log's tail.
run() {
    local name=$1 expect=$2; shift 2
    local t0 t1 rc
    t0=$(date +%s.%N)
    "$@" > "$RES/$name.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    local verdict=ok
    [ "$expect" = any ] && verdict="(informational)"
    [ "$expect" = any ] || [ "$rc" = "$expect" ] || verdict="UNEXPECTED (wanted rc=$expect)"
    say "$(printf '%-28s rc=%-3s wall=%6.1fs  %s' "$name" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" "$verdict")"
    tail -n 22 "$RES/$name.log"
    echo
    pack
}

[ -n "${DEEP_GEMM_SETUP:-}" ] && [ -f "$DEEP_GEMM_SETUP" ] && source "$DEEP_GEMM_SETUP"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
say "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
say "== $(python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "|", torch.cuda.get_device_name(), "sm", torch.cuda.get_device_properties(0).multi_processor_count)')"
say "== deep_gemm: $(python3 -c 'import deep_gemm' 2>&1 | tail -n1 | cut -c1-60)  flashinfer: $(python3 -c 'import flashinfer' 2>&1 | tail -n1 | cut -c1-60)"

if part tables; then
# 0. The tuned tables of the two engines (into the packaged plans/kernel-configs of this copy).
for eng in llama-3.1-8b-fp8-h100 qwen3-30b-a3b-fp8-h100; do
    TRITON_CACHE_DIR=$WORK/triton-cache-tune run "tune-$eng" 0 $EX triton-tune --engine "$eng" --runner none \
        --report "$RES/tune-$eng.json"
done
tar czf "$OUT/kernel-configs.tgz" plans/kernel-configs
fi

if part executor; then
# 1. Before and after, per engine: each mode with an empty Triton cache, then warm.
for eng in llama-3.1-8b-fp8-h100 qwen3-30b-a3b-fp8-h100; do
    for mode in before after; do
        if [ $mode = before ]; then plan=bench/plans/triton-full.yaml; jobs=1; else plan=triton; jobs=$JOBS; fi
        export TRITON_CACHE_DIR=$WORK/triton-cache-$mode-$eng
        for temp in cold warm; do
            run "$eng-$mode-$temp" 0 $EX "$plan" --engine "$eng" --jobs "$jobs" --verify 2000 \
                --report "$RES/$eng-$mode-$temp.json" --jit-log "$RES/post-seal-compiles.jsonl"
        done
    done
done

# 2. The vllm plan where DeepGEMM or FlashInfer is missing: unavailable, reported, exit 1; no crash.
if ! python3 -c "import deep_gemm, flashinfer" 2>/dev/null; then
    export TRITON_CACHE_DIR=$WORK/triton-cache-after-llama-3.1-8b-fp8-h100
    run vllm-plan 1 $EX vllm --engine qwen3-30b-a3b-fp8-h100 --runner none --report "$RES/vllm-plan.json"
fi

# 3. Failures: an oversized step (CUDA OOM) and an injected exception; continue, then stop.
export WARMUP_KERNEL_CONFIG_DIR=$WORK/kernel-configs-errors
ERR=(bench/plans/errors.yaml --engine bench/engines/llama-3.1-8b-fp8-oom-check.yaml
     --inject-failure triton_gemm/gemm-n4096-k4096)
run errors-continue 1 $EX "${ERR[@]}" --on-error continue --report "$RES/errors-continue.json"
unset WARMUP_KERNEL_CONFIG_DIR

# Ctrl-C in the middle of a cold brute-force run: exit 130 and the report is still written.
# --foreground: without it, coreutils timeout signals its whole process group and on the device
# machine the python process died of the SIGINT before its handler ran (bench/RESULTS.md part B).
export TRITON_CACHE_DIR=$WORK/triton-cache-sigint
run sigint 130 timeout --foreground --preserve-status -s INT 12 $EX bench/plans/triton-full.yaml \
    --engine llama-3.1-8b-fp8-h100 --jobs 1 --report "$RES/sigint.json"

# The sparse plan (16 GEMM calls) with the tuned tables: --verify names the variants it left cold
# (M=1209: bench/RESULTS.md part E; tests/executor/test_exact_keys.py explains it).
export TRITON_CACHE_DIR=$WORK/triton-cache-sparse
run sparse-buckets any $EX bench/plans/sparse-buckets.yaml --engine llama-3.1-8b-fp8-h100 --jobs 1 --verify 2000 \
    --report "$RES/sparse-buckets.json" --jit-log "$RES/sparse-buckets.jsonl"
unset TRITON_CACHE_DIR
fi

if part deepgemm && python3 -c "import deep_gemm" 2>/dev/null; then
# 4. DeepGEMM: numerics and the per-M ground truth, then the executor on the vllm plan's stage.
[ -n "${DG_SKIP_GROUND_TRUTH:-}" ] || run deep-gemm-ground-truth 0 python3 bench/deep_gemm_gpu.py --out "$RES" ${DG_QUICK:+--quick}
for eng in deepseek-v3-fp8-tp8-h200 qwen3-30b-a3b-fp8-h100; do
    export TRITON_CACHE_DIR=$WORK/triton-cache-dg-$eng
    # exact into a fresh DG_JIT_CACHE_DIR; then a fresh process (the serving process's stand-in)
    # on the prepared cache must compile nothing, and --verify draws M over the whole range.
    export DG_JIT_CACHE_DIR=$WORK/dg-cache-exact-$eng
    run "dg-$eng-exact" 0 $EX bench/plans/deep-gemm-exact.yaml --engine "$eng" --runner none --jobs "$JOBS" \
        --report "$RES/dg-$eng-exact.json" --jit-log "$RES/dg-post-seal.jsonl"
    run "dg-$eng-exact-again" 0 $EX bench/plans/deep-gemm-exact.yaml --engine "$eng" --runner none --jobs "$JOBS" \
        --verify 2000 --report "$RES/dg-$eng-exact-again.json" --jit-log "$RES/dg-post-seal.jsonl"
    # vLLM's relax into another fresh cache (its compiles in workers, one job per kernel), then full.
    export DG_JIT_CACHE_DIR=$WORK/dg-cache-relax-$eng TRITON_CACHE_DIR=$WORK/triton-cache-dg-relax-$eng
    for mode in relax full; do
        run "dg-$eng-$mode" 0 $EX bench/plans/deep-gemm-$mode.yaml --engine "$eng" --runner none --jobs "$JOBS" \
            --report "$RES/dg-$eng-$mode.json" --jit-log "$RES/dg-post-seal.jsonl"
    done
    ls "$DG_JIT_CACHE_DIR/cache" | sed 's/\.[0-9a-f]*$//' | sort | uniq -c | tee -a "$SUMMARY"
done
# Two processes warm one fresh directory at the same time; then every entry must be complete
# and a third process must compile nothing.
export DG_JIT_CACHE_DIR=$WORK/dg-cache-shared
for i in 1 2; do
    $EX bench/plans/deep-gemm-exact.yaml --engine qwen3-30b-a3b-fp8-h100 --runner none --jobs 4 \
        --report "$RES/dg-shared-$i.json" > "$RES/dg-shared-$i.log" 2>&1 &
done
wait
run dg-shared-entries 0 python3 - "$DG_JIT_CACHE_DIR" <<'PY'
import os, sys
cache = os.path.join(sys.argv[1], "cache")
entries = sorted(os.listdir(cache))
bad = [e for e in entries if not os.path.isfile(os.path.join(cache, e, "kernel.cubin"))
       or os.path.getsize(os.path.join(cache, e, "kernel.cubin")) == 0]
tmp = os.path.join(sys.argv[1], "tmp")
left = os.listdir(tmp) if os.path.isdir(tmp) else []
print(f"{len(entries)} entries, {len(bad)} incomplete: {bad[:5]}; tmp leftovers: {left[:5]}")
sys.exit(1 if bad or not entries else 0)
PY
run dg-shared-third 0 $EX bench/plans/deep-gemm-exact.yaml --engine qwen3-30b-a3b-fp8-h100 --runner none --jobs 1 \
    --report "$RES/dg-shared-third.json"
unset DG_JIT_CACHE_DIR TRITON_CACHE_DIR
fi

# DeepGEMM as vLLM vendors it, on PYTHONPATH (bench/deep_gemm_setup.sh), said in the summary.
dg_setup() { source bench/deep_gemm_setup.sh > "$WORK/dg-setup.log" 2>&1; local rc=$?; say "$(cat "$WORK/dg-setup.log")"; return $rc; }

if part dgversions; then
# 9. Issue 18: every DeepGEMM users have, one after the other (each in a subshell: its own PYTHONPATH).
for v in ${DG_VERSIONS:-2.5.0 2.6.1 2.8.1}; do
    (
        DG_VERSION=$v dg_setup || exit 0
        export DG_JIT_CACHE_DIR=$WORK/dg-versions-$v
        run "dg-ground-truth-$v" any python3 bench/deep_gemm_gpu.py --out "$RES/dg-$v" ${DG_QUICK:+--quick}
        run "dg-post-seal-miss-$v" 0 python3 bench/dg_post_seal_miss.py --out "$RES"
    )
done
fi

# The two plans of the bundle proof: name, plan, engine, runner.
BUNDLE_PLANS=("dsv3-dg bench/plans/deep-gemm-exact.yaml deepseek-v3-fp8-tp8-h200 none"
              "llama-triton triton llama-3.1-8b-fp8-h100 reference")

if part bundle-build; then
# 10. Issue 18, call 1: build the bundles, and the in-place warm baseline they are compared with.
DG_VERSION=${DG_VERSION:-2.5.0} dg_setup
mkdir -p "$OUT/bundles"
for spec in "${BUNDLE_PLANS[@]}"; do
    read -r name plan eng runner <<< "$spec"
    run "bundle-build-$name" 0 $BUNDLE build "$plan" --engine "$eng" --runner "$runner" --jobs "$JOBS" \
        -o "$OUT/bundles/$name.warmup"
    run "bundle-inspect-$name" 0 $BUNDLE inspect "$OUT/bundles/$name.warmup"
    export DG_JIT_CACHE_DIR=$WORK/inplace-$name/dg TRITON_CACHE_DIR=$WORK/inplace-$name/triton
    for temp in cold warm; do
        run "inplace-$name-$temp" 0 $EX "$plan" --engine "$eng" --runner "$runner" --jobs "$JOBS" --verify 2000 \
            --report "$RES/inplace-$name-$temp.json"
    done
    unset DG_JIT_CACHE_DIR TRITON_CACHE_DIR
done
ls -la "$OUT/bundles" | tee -a "$SUMMARY"
fi

if part bundle-verify; then
# 11. Issue 18, call 2: another machine, another install path.
DG_VERSION=${DG_VERSION:-2.5.0} DG_ROOT=${DG_ROOT:-/tmp/dg-elsewhere} dg_setup
B=${BUNDLES:-.bundles}
for spec in "${BUNDLE_PLANS[@]}"; do
    read -r name plan eng runner <<< "$spec"
    run "bundle-verify-$name" 0 $BUNDLE verify "$B/$name.warmup" --runner "$runner" \
        --report "$RES/bundle-verify-$name.json"
    export DG_JIT_CACHE_DIR=$WORK/installed/dg TRITON_CACHE_DIR=$WORK/installed/triton
    run "bundle-install-$name" 0 $BUNDLE install "$B/$name.warmup" --flashinfer-cache "$WORK/installed/fi.json"
    run "bundle-warm-$name" 0 $EX "$plan" --engine "$eng" --runner "$runner" --jobs "$JOBS" --verify 2000 \
        --report "$RES/bundle-warm-$name.json"
    unset DG_JIT_CACHE_DIR TRITON_CACHE_DIR
done
head -c 200000 "$B/dsv3-dg.warmup" > "$WORK/truncated.warmup"
run bundle-truncated 2 $BUNDLE install "$WORK/truncated.warmup" --deep-gemm-cache "$WORK/refused/dg" \
    --triton-cache "$WORK/refused/triton"
run bundle-foreign 2 $BUNDLE install bench/gpu_all.sh --deep-gemm-cache "$WORK/refused/dg"
run bundle-refused-nothing-written 0 test ! -e "$WORK/refused/dg/cache"
fi

if part flashinfer && [ -d .whl-fi ]; then
# 5. FlashInfer's autotuner: tune into an empty cache, then load it in a fresh process.
source bench/flashinfer_setup.sh
run flashinfer 0 python3 bench/flashinfer_gpu.py --out "$RES"
fi

if part pytest; then
# 6. GPU tests (kernels and executor).
[ -n "${SKIP_PYTEST:-}" ] || run pytest-gpu 0 timeout 240 python3 -m pytest -q -m gpu tests/executor -p no:cacheprovider
fi

# 7. What a precompile worker's start-up and first job cost, part by part.
part probe && run worker-probe 0 python3 bench/worker_start_probe.py

# 8. The reference runner: its GPU tests and the serving-trace proofs (issue 5).
part runner && bash bench/runner_gpu.sh

# One line per report: what the acceptance reads.
python3 - "$RES" <<'EOF' | tee -a "$SUMMARY"
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    r = json.load(open(path))
    if "stages" not in r:
        continue  # not a warmup report (bench/deep_gemm_gpu.py, flashinfer)
    v = r.get("verify") or {}
    pre = r.get("precompile") or {}
    stages = " | ".join(f"{s['stage']}: {s['run']} run, {s['kernel_calls']} calls, {s['compiled']} compiled, "
                        f"{s['disk_loads']} disk, {s['wall_s']:.1f}s" for s in r["stages"])
    bad = "; ".join(f"{s['status']} {s['id']}: {(s['error'] or '')[:90]}" for s in r["steps"]
                    if s["status"] in ("failed", "unavailable"))
    print(f"{os.path.basename(path)}: {r['status']} exit={r['exit_code']} wall={r['wall_s']:.1f}s counts={r['counts']}")
    print(f"   {stages}")
    if pre.get("status") == "ran":
        print(f"   precompile: {pre['jobs']} jobs in {pre['workers']} workers, {pre['busy_s']}s of jobs in "
              f"{pre['wall_s']}s (x{pre['speedup']}), first worker ready at {pre['first_worker_ready_s']}s; "
              f"startup {(r.get('startup') or {}).get('wall_s')}s")
    if v:
        print(f"   verify: {v['calls']} calls over {len(v['keys'])} keys, {v['post_seal_compiles']} post-seal compiles, "
              f"{len(v['failures'])} failures, {v['wall_s']:.1f}s")
        for e in v["events"][:3]:
            print(f"     post-seal {e['step']}: {e['kernel']} {(e.get('repr') or '')[:150]}")
    if bad:
        print(f"   {bad[:600]}")
EOF
pack
ls -la "$OUT"
