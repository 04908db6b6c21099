#!/usr/bin/env bash
# Issue 38's GPU proof, not run yet: a plugin run with a plan that leaves a stage out makes
# compiles after ready; `warmup absorb` turns its logs into an overlay; a rerun with the overlay
# compiles nothing after ready. Written on the CPU machine; its CPU parts (absorb, check, diff)
# are tested by tests/planner/test_absorb.py on the recorded logs.
#
#   STEP=miss   the plugin arm (server mode, cold caches) with PLAN_OUT_STAGE (default
#               tests/fixtures/logs/vllm-0.25-plugin-no-sampler.yaml: vllm-0.25-plugin less its
#               sampler stage) and vLLM's JIT monitor in mode warn, so that the misses are logged,
#               not failed; then `warmup absorb` of its server.log and plugin_jit.jsonl writes
#               $ROOT/absorb/overlay.yaml, `warmup check --logs` must fail (exit 1) on the plan
#               and pass on the overlay, and `warmup diff` reviews it.
#   STEP=rerun  the plugin arm again from cold caches with WARMUP_PLAN=the overlay and the
#               monitor in mode error (bench/vllm_startup_proof.sh's default for the plugin arm);
#               pass: every request answered, vLLM's monitor logged nothing after ready, the
#               plugin's JIT log is empty, and `warmup absorb` of the new logs finds 0 compiles.
#
# Device calls (after bench/vllm_gpu_setup.sh's install calls 1-3 of the server mode, as in
# bench/vllm_startup_proof.sh's header; each timeout_s 600, made within 30 s of the last, since
# the second reads the overlay the first left in /tmp):
#   A carry []   MODE=server WITH_FLASHINFER=1 STEP=miss bash bench/absorb_gpu_proof.sh
#   B carry []   MODE=server WITH_FLASHINFER=1 STEP=rerun bash bench/absorb_gpu_proof.sh
# MODEL=qwen for Qwen3-30B-A3B (then fused_moe_kernel is the other family: vLLM's tuned tables
# come from the installed vLLM, WARMUP_VLLM_MOE_CONFIGS below). Results come back under $OUT:
# absorb-<step>.txt (absorb's table, check's and diff's output), absorb-<step>.json, the overlay,
# and the run's server.log / plugin_jit.jsonl.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
REPO=$(pwd)
STEP=${STEP:?STEP=miss or STEP=rerun}
export MODE=${MODE:-server} WITH_FLASHINFER=${WITH_FLASHINFER:-1} MODEL=${MODEL:-llama}
ROOT=${PROOF_ROOT:-/tmp/warmup-proof}
OUT=${OUT:-$ROOT/out}
WORK=$ROOT/absorb
PLAN_OUT_STAGE=${PLAN_OUT_STAGE:-$REPO/tests/fixtures/logs/vllm-0.25-plugin-no-sampler.yaml}
VLLM_SITE=${VLLM_SITE:-/tmp/vllm-site}
mkdir -p "$WORK" "$OUT"
case "$MODEL" in llama) NAME=llama-3.1-8b-instruct-fp8-block ;; qwen) NAME=qwen3-30b-a3b-fp8 ;; *) NAME=$MODEL ;; esac
SERIES=$NAME$([ "$WITH_FLASHINFER" = 1 ] && echo "-fi")$([ "$MODE" = server ] && echo "-serve")
RUN=$ROOT/runs/$SERIES/plugin-cold
# vLLM's tuned fused_moe tables, from the vLLM that serves (planner/tables/vllm_moe.py)
export WARMUP_VLLM_MOE_CONFIGS=${WARMUP_VLLM_MOE_CONFIGS:-$VLLM_SITE/vllm/model_executor/layers/fused_moe/configs}

engine() {  # the engine the server ran, as vLLM resolves the proof's `vllm serve` flags
    [ -f "$WORK/engine.yaml" ] && return 0
    PYTHONPATH=$VLLM_SITE${PYTHONPATH:+:$PYTHONPATH} python3 -m planner.cli engine --from-vllm -o "$WORK/engine.yaml" -- \
        "$ROOT/models/$NAME" --load-format dummy --skip-tokenizer-init --max-model-len 4096 \
        --gpu-memory-utilization 0.85 --tensor-parallel-size 1 \
        || { echo "absorb proof: warmup engine --from-vllm failed" >&2; return 1; }
}

absorb() {  # absorb PLAN TAG: the run's logs against PLAN; table, JSON and the overlay under $WORK
    local plan=$1 tag=$2 logs=("$RUN/server.log")
    [ -s "$RUN/plugin_jit.jsonl" ] && logs+=("$RUN/plugin_jit.jsonl")
    cp "${logs[@]}" "$WORK/" 2>/dev/null
    {
        echo "== warmup absorb ${logs[*]} --plan $plan"
        python3 -m planner.cli absorb "${logs[@]}" --plan "$plan" --engine "$WORK/engine.yaml" -o "$WORK/overlay-$tag.yaml"
        python3 -m planner.cli absorb "${logs[@]}" --plan "$plan" --engine "$WORK/engine.yaml" -f json > "$OUT/absorb-$tag.json"
        echo "== warmup check $plan --logs (exit 1 while a miss is uncovered)"
        python3 -m planner.cli check "$plan" --engine "$WORK/engine.yaml" --logs "${logs[@]}"; echo "exit $?"
        echo "== warmup check the overlay --logs"
        python3 -m planner.cli check "$WORK/overlay-$tag.yaml" --engine "$WORK/engine.yaml" --logs "${logs[@]}"; echo "exit $?"
        echo "== warmup diff $plan overlay"
        python3 -m planner.cli diff "$plan" "$WORK/overlay-$tag.yaml" --engine "$WORK/engine.yaml" --no-color; echo "exit $?"
    } 2>&1 | tee "$OUT/absorb-$tag.txt"
    cp "$WORK/overlay-$tag.yaml" "$OUT/"
}

case "$STEP" in
    miss)
        PLUGIN_PLAN=$PLAN_OUT_STAGE PLUGIN_JIT_MONITOR=warn PARTS=plugin-cold bash bench/vllm_startup_proof.sh
        engine && absorb "$PLAN_OUT_STAGE" miss
        cp "$WORK/overlay-miss.yaml" "$WORK/overlay.yaml"
        ;;
    rerun)
        [ -f "$WORK/overlay.yaml" ] || { echo "no $WORK/overlay.yaml: run STEP=miss first, on this machine" >&2; exit 2; }
        PLUGIN_PLAN=$WORK/overlay.yaml PARTS=plugin-cold bash bench/vllm_startup_proof.sh
        engine && absorb "$WORK/overlay.yaml" rerun
        python3 - "$OUT/absorb-rerun.json" "$RUN/result.json" <<'EOF'
import json, sys
absorbed, result = (json.load(open(p)) for p in sys.argv[1:])
compiles = absorbed["summary"]["compiles"]
http = result.get("http") or {}
checks = {"0 compiles after ready (absorb of vLLM's log and the plugin's)": compiles == 0,
          "vLLM's monitor: nothing after ready": (result.get("vllm_jit_monitor") or {}).get("lines_after_ready") == 0,
          "every request answered": http.get("ok") == http.get("sent") if http else None}
for name, ok in checks.items():
    print(("PASS" if ok else "n/a" if ok is None else "FAIL"), name)
sys.exit(0 if all(ok is not False for ok in checks.values()) else 1)
EOF
        ;;
    *) echo "STEP=$STEP: miss or rerun" >&2; exit 2 ;;
esac
