#!/usr/bin/env bash
# Issue 28, item 2 on the GPU: two `warmup execute` processes precompile into one cache at once (the
# ranks of one server, or two servers on one node, stand-ins: one GPU, CUDA_VISIBLE_DEVICES=0).
# For each family (DeepGEMM: bench/plans/deep-gemm-exact.yaml; Triton: the `triton` plan), both
# processes start together with --jobs $JOBS into one empty DG_JIT_CACHE_DIR / TRITON_CACHE_DIR;
# then a third process runs the same plan with --expect-cached --jobs 0 (every kernel must load).
# The verdicts (bench/precompile_race.py): each key compiled by exactly one process (compiled summed
# over A and B = distinct keys on the node), both racers end ok, the third compiles nothing.
#
# Needs: an NVIDIA GPU; DeepGEMM from vLLM's site where bench/vllm_gpu_setup.sh installed it
# (vllm/third_party/deep_gemm, imported as deep_gemm); without it the DeepGEMM race is reported
# unavailable and the Triton race still runs. Writes $OUT/race.tgz (reports, logs) and $OUT/race.json.
#   bash bench/precompile_race.sh [--dry-run]        (variables: JOBS 8, ENGINE, RACE_ROOT, OUT)
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
DRY=0; [ "${1:-}" = --dry-run ] && DRY=1
JOBS=${JOBS:-8}
ENGINE=${ENGINE:-llama-3.1-8b-fp8-h100}
W=${RACE_ROOT:-/tmp/warmup-race}
RES=$W/results
OUT=${OUT:-$W/out}
VLLM_SITE=${VLLM_SITE:-/tmp/vllm-site}
export PYTHONPATH="$PWD:$VLLM_SITE/vllm/third_party:$VLLM_SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
EX=(python3 -m executor.cli execute)

one() {  # one NAME WHO PLAN ARGS...: one process of a race, its report and log under $RES
    local name=$1 who=$2 plan=$3; shift 3
    local cmd=(env CUDA_VISIBLE_DEVICES=0 "${EX[@]}" "$plan" --engine "$ENGINE" --runner none --no-progress
               --report "$RES/$name.$who.json" "$@")
    if [ "$DRY" = 1 ]; then printf '+'; printf ' %q' "${cmd[@]}"; printf ' > %s\n' "$RES/$name.$who.log"; return; fi
    "${cmd[@]}" > "$RES/$name.$who.log" 2>&1
    echo "$name.$who rc $?" >> "$RES/rc.txt"
}

race() {  # race NAME PLAN: A and B at once into one empty cache, then C warm
    local name=$1 plan=$2
    [ "$DRY" = 1 ] || { rm -rf "$W/$name"; mkdir -p "$W/$name/dg" "$W/$name/triton"; }
    export DG_JIT_CACHE_DIR=$W/$name/dg TRITON_CACHE_DIR=$W/$name/triton
    local t0; t0=$(date +%s)
    one "$name" a "$plan" --jobs "$JOBS" &
    one "$name" b "$plan" --jobs "$JOBS" &
    wait
    one "$name" warm "$plan" --jobs 0 --expect-cached
    echo "[race] $name: $(($(date +%s) - t0)) s"
}

[ "$DRY" = 1 ] || { rm -rf "$RES"; mkdir -p "$RES" "$OUT"; }
python3 -c 'import deep_gemm' 2>&1 | tail -n 1 | sed 's/^/[race] import deep_gemm: /'
race dg bench/plans/deep-gemm-exact.yaml
race triton triton

# Issue 25, item 1 on the GPU: a Triton bundle built in one cache directory verifies with 0 compiles
# from another (bundle build packs fresh caches; verify installs into new temporary ones).
bundle() {
    local cmd=(env CUDA_VISIBLE_DEVICES=0 python3 -m executor.cli bundle "$@")
    if [ "$DRY" = 1 ]; then printf '+'; printf ' %q' "${cmd[@]}"; printf '\n'; return; fi
    "${cmd[@]}" >> "$RES/bundle.log" 2>&1
    echo "bundle $1 rc $?" >> "$RES/rc.txt"
}
unset DG_JIT_CACHE_DIR TRITON_CACHE_DIR
bundle build triton --engine "$ENGINE" --runner none --jobs "$JOBS" -o "$W/triton.warmup" --report "$RES/bundle-build.json"
bundle verify "$W/triton.warmup" --runner none --report "$RES/bundle-verify.json"
[ "$DRY" = 1 ] && exit 0
cat "$RES/rc.txt"
python3 bench/precompile_race.py "$RES" --json "$OUT/race.json"
tar czf "$OUT/race.tgz" -C "$W" results
