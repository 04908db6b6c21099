#!/usr/bin/env bash
# Every GPU test and benchmark of the project, in one device call (about 8 minutes on an H200):
# the executor's acceptance runs and GPU tests below, then bench/runner_gpu.sh (the reference
# runner's tests and serving-trace proofs).
#
#   bash bench/gpu_all.sh            # from the repository root; results under $OUT (default ./out)
#   PARTS=executor bash bench/gpu_all.sh   # or PARTS=runner: one half only
#
# 1. warmup execute triton, Llama-3.1-8B FP8 and Qwen3-30B-A3B FP8 (max_num_batched_tokens 8192):
#    a cold Triton cache and no tuned tables, then the same directories warm; --verify 2000 each
# 2. the vllm plan on this machine (no DeepGEMM, no FlashInfer): those steps are `unavailable`
# 3. failures: an oversized step (CUDA OOM) and an injected exception, with --on-error continue;
#    a Ctrl-C (SIGINT) in the middle of a cold run (exit 130, report written); a sparse plan
#    (16 GEMM calls) checked with --verify
# 4. pytest -m gpu tests/executor             the kernel tests and the executor's GPU tests
#
# Everything goes to $OUT/results.tgz (logs, JSON reports, the JIT-miss log) plus
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
PARTS=${PARTS:-"executor runner"}  # EX="... execute --dry-run" checks this script without a GPU

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

say "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
say "== $(python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "|", torch.cuda.get_device_name(), "sm", torch.cuda.get_device_properties(0).multi_processor_count)')"
say "== deep_gemm: $(python3 -c 'import deep_gemm' 2>&1 | tail -n1 | cut -c1-60)  flashinfer: $(python3 -c 'import flashinfer' 2>&1 | tail -n1 | cut -c1-60)"

if [[ " $PARTS " == *" executor "* ]]; then
# 1. Acceptance: cold, then warm, per engine.
for eng in llama-3.1-8b-fp8-h100 qwen3-30b-a3b-fp8-h100; do
    export TRITON_CACHE_DIR=$WORK/triton-cache-$eng
    export WARMUP_KERNEL_CONFIG_DIR=$WORK/kernel-configs-$eng
    run "$eng-cold" 0 $EX triton --engine "$eng" --verify 2000 --report "$RES/$eng-cold.json" \
        --jit-log "$RES/post-seal-compiles.jsonl"
    run "$eng-warm" 0 $EX triton --engine "$eng" --verify 2000 --report "$RES/$eng-warm.json" \
        --jit-log "$RES/post-seal-compiles.jsonl"
done

# 2. The vllm plan without DeepGEMM / FlashInfer: unavailable, reported, exit 1; nothing crashes.
export TRITON_CACHE_DIR=$WORK/triton-cache-llama-3.1-8b-fp8-h100
run vllm-plan 1 $EX vllm --engine qwen3-30b-a3b-fp8-h100 --runner none --report "$RES/vllm-plan.json"

# 3. Failures: an oversized step (CUDA OOM) and an injected exception; continue, then stop.
export WARMUP_KERNEL_CONFIG_DIR=$WORK/kernel-configs-errors
ERR=(bench/plans/errors.yaml --engine bench/engines/llama-3.1-8b-fp8-oom-check.yaml
     --inject-failure triton_gemm/gemm-n4096-k4096)
run errors-continue 1 $EX "${ERR[@]}" --on-error continue --report "$RES/errors-continue.json"

# Ctrl-C in the middle of a cold run (12 s into a ~30 s run): exit 130 and the report is still written.
# --foreground: without it, coreutils timeout signals its whole process group and on the device
# machine the python process died of the SIGINT before its handler ran (measured 2026-11-22).
export TRITON_CACHE_DIR=$WORK/triton-cache-sigint WARMUP_KERNEL_CONFIG_DIR=$WORK/kernel-configs-sigint
run sigint 130 timeout --foreground --preserve-status -s INT 12 $EX triton --engine llama-3.1-8b-fp8-h100 --report "$RES/sigint.json"

# A sparse plan (16 GEMM calls, the tables of the Llama run): does --verify find a variant it missed?
# Informational (any exit code): 0 when those calls happened to load every variant, 1 otherwise.
export TRITON_CACHE_DIR=$WORK/triton-cache-llama-3.1-8b-fp8-h100
export WARMUP_KERNEL_CONFIG_DIR=$WORK/kernel-configs-llama-3.1-8b-fp8-h100
run sparse-buckets any $EX bench/plans/sparse-buckets.yaml --engine llama-3.1-8b-fp8-h100 --verify 2000 \
    --report "$RES/sparse-buckets.json" --jit-log "$RES/sparse-buckets.jsonl"

# 4. GPU tests (kernels and executor), last: the acceptance runs above matter most in a short lease.
unset TRITON_CACHE_DIR WARMUP_KERNEL_CONFIG_DIR
[ -n "${SKIP_PYTEST:-}" ] || run pytest-gpu 0 timeout 240 python3 -m pytest -q -m gpu tests/executor -p no:cacheprovider

# One line per report: what the acceptance reads.
python3 - "$RES" <<'EOF' | tee -a "$SUMMARY"
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    r = json.load(open(path))
    v = r.get("verify") or {}
    stages = " | ".join(f"{s['stage']}: {s['run']} run, {s['kernel_calls']} calls, {s['compiled']} compiled, "
                        f"{s['disk_loads']} disk, {s['wall_s']:.1f}s" for s in r["stages"])
    bad = "; ".join(f"{s['status']} {s['id']}: {(s['error'] or '')[:90]}" for s in r["steps"]
                    if s["status"] in ("failed", "unavailable"))
    print(f"{os.path.basename(path)}: {r['status']} exit={r['exit_code']} wall={r['wall_s']:.1f}s counts={r['counts']}")
    print(f"   {stages}")
    if v:
        print(f"   verify: {v['calls']} calls over {len(v['keys'])} keys, {v['post_seal_compiles']} post-seal compiles, "
              f"{len(v['failures'])} failures, {v['wall_s']:.1f}s")
        for e in v["events"][:3]:
            print(f"     post-seal {e['step']}: {e['kernel']} {(e.get('repr') or '')[:150]}")
    if bad:
        print(f"   {bad[:600]}")
EOF
pack
fi

# 5. The reference runner: its GPU tests and the serving-trace proofs (issue 5).
[[ " $PARTS " == *" runner "* ]] && bash bench/runner_gpu.sh
ls -la "$OUT"
