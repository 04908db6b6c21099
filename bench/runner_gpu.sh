#!/usr/bin/env bash
# The reference runner on a GPU, in one device call: its tests, then the serving-trace proofs.
#
#   bash bench/runner_gpu.sh          # from the repository root; results under $OUT (default ./out)
#   QUICK=1 bash bench/runner_gpu.sh  # tests, one warm and one cold run, short traces
#
# 1. pytest tests/executor/runner           (the kernel tests run natively in bf16 here)
# 2. cold: bench/trace_proof.py --no-warmup, 200 trace steps, each engine with a fresh Triton cache
# 3. warm: plans/reference.yaml, then 500 trace steps, each engine with a fresh Triton cache,
#    precompiled by the default --jobs (the CPU cores); then the dense engine again with
#    --jobs 1 (every variant compiles in the main process, as before precompilation)
# 4. the #40746 class: runner-llama-3.1-8b-fp8-ngram1 (1 draft token) with the pre-#40746
#    variant of the plan (2-token prompts, no runner_kernels stage), 200 steps
# 5. the plan without its runner_kernels stage (dense, fresh cache, 500 steps): the misses that
#    stage covers
#
# Writes $OUT/runner-summary.txt and $OUT/runner-results.tgz (logs and JSON reports).
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
WORK=$(mktemp -d /tmp/runner_gpu.XXXXXX)
RES=$WORK/runner
mkdir -p "$RES"
SUMMARY=$OUT/runner-summary.txt
: > "$SUMMARY"
QUICK=${QUICK:-0}
say() { echo "$*" | tee -a "$SUMMARY"; }
pack() { tar czf "$OUT/runner-results.tgz" -C "$WORK" runner 2>/dev/null; }
stamp() { date +%s.%N; }

DENSE=llama-3.1-8b-fp8-h100
MOE=qwen3-30b-a3b-fp8-h100
DENSE_SPEC=tests/fixtures/engines/runner-llama-3.1-8b-fp8-ngram1.yaml
MOE_SPEC=tests/fixtures/engines/runner-qwen3-30b-a3b-fp8-ngram2.yaml
label() { basename "$1" .yaml; }

# proof NAME ARGS...: one trace_proof run with its own Triton cache (unless CACHE is set).
proof() {
    local name=$1; shift
    local t0 rc
    t0=$(stamp)
    TRITON_CACHE_DIR=${CACHE:-$WORK/cache-$name} python3 bench/trace_proof.py "$@" --json "$RES/$name.json" \
        > "$RES/$name.log" 2>&1
    rc=$?
    say "$(printf '%-34s rc=%s wall=%6.1fs' "$name" "$rc" "$(awk "BEGIN{print $(stamp) - $t0}")")"
    grep -E "^(==|   )" "$RES/$name.log" | head -n 40 | tee -a "$SUMMARY"
    [ "$rc" = 0 ] || tail -n 30 "$RES/$name.log"
}

say "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
say "== $(python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)')"

# 1. Tests.
t0=$(stamp)
TRITON_CACHE_DIR=$WORK/cache-tests timeout 240 python3 -m pytest -q -p no:cacheprovider tests/executor/runner \
    > "$RES/pytest.log" 2>&1
say "$(printf '%-34s rc=%s wall=%6.1fs  %s' pytest-runner $? "$(awk "BEGIN{print $(stamp) - $t0}")" "$(tail -n 1 "$RES/pytest.log")")"
grep -E "FAILED|Error" "$RES/pytest.log" | head -n 20 | tee -a "$SUMMARY"
pack

if [ "$QUICK" = 1 ]; then
    proof "$(label $MOE_SPEC)-cold" --engine $MOE_SPEC --no-warmup --steps 40
    proof "$(label $DENSE)-warm" --engine $DENSE --plan plans/reference.yaml --steps 100 --expect-zero
    pack
    exit 0
fi

# 2. Cold.
for eng in $DENSE $MOE $DENSE_SPEC $MOE_SPEC; do
    proof "$(label $eng)-cold" --engine "$eng" --no-warmup --steps 200
    pack
done

# 3. Warm, one at a time.
for eng in $DENSE $MOE $DENSE_SPEC $MOE_SPEC; do
    proof "$(label $eng)-warm" --engine "$eng" --plan plans/reference.yaml --steps 500 --expect-zero
    pack
done
proof "$DENSE-warm-jobs1" --engine $DENSE --plan plans/reference.yaml --steps 500 --expect-zero --jobs 1
pack

# 4. The #40746 class (the warm run's Triton cache: only in-memory misses count).
CACHE=$WORK/cache-$(label $DENSE_SPEC)-warm proof "$(label $DENSE_SPEC)-pre-40746" --engine $DENSE_SPEC \
    --plan tests/fixtures/plans/reference-pre-40746.yaml --steps 200
pack

# 5. Ablation: the runner_kernels stage.
proof "$DENSE-no-runner-kernels" --engine $DENSE \
    --plan tests/fixtures/plans/reference-no-runner-kernels.yaml --steps 500
pack
say "== done $(date -u +%Y-%m-%dT%H:%M:%SZ)"
