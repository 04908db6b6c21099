#!/usr/bin/env bash
# The vLLM start-up proof on the GPU machine: vLLM 0.25.0 + this project's plugin against stock
# vLLM 0.25.0, from cold caches and warm, one process per run (bench/vllm_plugin_trace.py), or in
# server mode (MODE=server) one `vllm serve` per run driven over HTTP (bench/vllm_serve_trace.py).
# Tested here without a GPU (dry-run, and end to end against a stand-in vLLM package); its GPU runs
# are in bench/RESULTS.md (offline mode from part S, server mode from part X).
#
# Claims it measures (bench/vllm_startup_summary.py prints PASS / FAIL / n/a for each):
#   1. cold start: stock-cold's time to ready / plugin-cold's >= 2 (process start to LLM() built;
#      MODE=server: to the first 200 from /health);
#   2. after ready: the plugin runs compile nothing (Triton, DeepGEMM, torch.compile, FlashInfer)
#      over a 500-request offline trace (MODE=server: 300 HTTP requests, every one answered with
#      vLLM's JIT monitor in error mode, and no file new in the arm's caches after ready);
#   3. KV cache: the plugin runs' GPU blocks equal a warm stock boot's.
#
# Needs: vLLM 0.25.0 and the plugin installed by bench/vllm_gpu_setup.sh on the same warm machine
# (its parts core, ext, py, plugin: `check` must pass), an SM 9.0 GPU (H100, H200). Model:
# Llama-3.1-8B-Instruct FP8 block-128 (tests/fixtures/hf/llama-3.1-8b-instruct-fp8-block.json) on
# dummy weights; MODEL=qwen for Qwen3-30B-A3B FP8 (a separate series of calls, only where time remains).
#
# Device calls, in order, each with timeout_s 600 and made within 30 s of the last (the machine and
# its /tmp go back 30 s after a call; a fresh machine needs the three install calls again; the runs
# of a later call reuse the caches of earlier calls, which is what makes a run warm):
#   1 carry [".vllm/core"]                bash bench/vllm_gpu_setup.sh install core
#   2 carry [".vllm/ext"]                 bash bench/vllm_gpu_setup.sh check core && bash bench/vllm_gpu_setup.sh install ext
#   3 carry [".vllm/py", ".vllm/plugin"]  export CALL_START=$(date +%s); bash bench/vllm_gpu_setup.sh check core ext && bash bench/vllm_gpu_setup.sh install py plugin && PARTS="plugin-cold" bash bench/vllm_startup_proof.sh
#   4 carry []                            PARTS="stock-cold" bash bench/vllm_startup_proof.sh
#   5 carry []                            PARTS="plugin-warm stock-warm" bash bench/vllm_startup_proof.sh
# (stock-cold gets a call of its own: stock's cold start of this model takes most of a call, 395.8 s
# in bench/RESULTS.md part S, and its trace follows it; the install in call 3 counts against that
# call's budget through CALL_START.) The script runs `bash bench/vllm_gpu_setup.sh check`
# first and stops if a part is gone. Qwen3-30B-A3B: the same three runs with MODEL=qwen, in a lease
# of its own if the 30 minutes a machine is held are spent (then the installs again first).
# Then here, with matplotlib (pip install matplotlib), from the files that came back:
#   tar xzf llama-3.1-8b-instruct-fp8-block.stock-cold.tar.gz; tar xzf ...plugin-cold.tar.gz
#   python3 bench/plot_startup_timeline.py stock-cold/result.json plugin-cold/result.json -o timeline.png
# Dry run, anywhere (prints every command with its environment, runs none):
#   PARTS="plugin-cold plugin-warm stock-cold stock-warm" bash bench/vllm_startup_proof.sh --dry-run
#
# Server mode (MODE=server; issue 34: the proof as users run it): the same parts, arms, caches and
# rules, but each run is `python3 -m vllm.entrypoints.cli.main serve MODEL_DIR` (what the `vllm`
# console script runs) with vLLM's defaults: an API server process and its engine-core process
# (VLLM_ENABLE_V1_MULTIPROCESSING is removed, not set to 0), the offline run's LLM() arguments as
# flags, and vLLM's own JIT monitor in error mode in the plugin arm (--jit-monitor-mode error: a
# compile after warmup fails the requests it serves; the stock arm keeps vLLM's default, warn, which
# logs each such compile: stock 0.25 compiles its top-k/top-p sampler kernel after ready). Ready is the first 200 from GET /health, timed from
# just before the server's Popen; then REQUESTS (default 300) completions over HTTP, 16 at a time,
# mixed lengths and sampling; then SIGINT to the server's process group (SIGKILL after 20 s).
# A series of its own (<model>[-tp<TP>][-fi]-serve: runs, caches, bundles). It needs the py part
# built since SERVER_DEPS joined it (bench/vllm_gpu_setup.sh: uvicorn, watchfiles, ...; `check py`
# says MISSING on an older install: `bash bench/vllm_gpu_setup.sh part py` rebuilds it here). Device
# calls for Llama with FlashInfer, each timeout_s 600 (call 3 carries 25.1 + 0.4 + 12.9 MiB and the repo):
#   1 carry [".vllm/core"]                           bash bench/vllm_gpu_setup.sh install core
#   2 carry [".vllm/ext"]                            bash bench/vllm_gpu_setup.sh check core && bash bench/vllm_gpu_setup.sh install ext
#   3 carry [".vllm/py", ".vllm/plugin", ".vllm/fi"] export CALL_START=$(date +%s); bash bench/vllm_gpu_setup.sh check core ext && bash bench/vllm_gpu_setup.sh install py plugin fi && MODE=server WITH_FLASHINFER=1 PARTS="plugin-cold" bash bench/vllm_startup_proof.sh
#   4 carry []                                       MODE=server WITH_FLASHINFER=1 PARTS="stock-cold" bash bench/vllm_startup_proof.sh
#   MODE=server PARTS="plugin-cold stock-cold" bash bench/vllm_startup_proof.sh --dry-run   (shows the servers' commands too)
# Issue 48, DeepSeek-V3 at TP 4 on nvidia-h100-x4: MODEL=deepseek-v3-5l (tests/fixtures/hf/deepseek-v3-5l.json:
# the real config cut to 3 dense + 2 MoE layers, about 7.2 GB of weights per rank), an MLA model, so the
# setup's mla part is installed and checked too; the same calls 1 and 2, then, each timeout_s 600:
#   3 carry [".vllm/py", ".vllm/plugin", ".vllm/fi", ".vllm/mla"]  bash bench/vllm_gpu_setup.sh check core ext && bash bench/vllm_gpu_setup.sh install py plugin fi mla && bash bench/vllm_gpu_setup.sh check core ext py plugin fi mla
#   4 carry []   MODE=server WITH_FLASHINFER=1 MODEL=deepseek-v3-5l TP=4 PARTS="stock-cold" bash bench/vllm_startup_proof.sh
#   5 carry []   MODE=server WITH_FLASHINFER=1 MODEL=deepseek-v3-5l TP=4 PARTS="plugin-cold" bash bench/vllm_startup_proof.sh
# Issue 48 item 4 (not yet run: bench/RESULTS.md part AE): the TP 4 start's bundle on another four-GPU
# lease. Lease 1, after its three install calls: PARTS="bundle-build" (same variables), then
# `python3 bench/bundle_proof.py split $ROOT/bundles/<series>.warmup $OUT/bundle --budget 60` in the
# same call (a DeepSeek TP 4 start fills
# 335 MiB of vLLM's cache and 165 MiB of Inductor's, part AE: expect several calls of `split --first N`,
# each bringing out what the tool returns, 8 files and 64 MiB at most). Lease 2 (a fresh four-GPU lease of
# the same card): the install calls, then calls that each carry one folder of parts, .vllm/bundle_in_K
# (a carried path replaces the one there: one folder per call), and copy it to /tmp/bundle_in, then
# BUNDLE_IN=/tmp/bundle_in [BUNDLE_VIA=oci] PARTS="bundle-cold" with the same variables.
# EP=1 adds --enable-expert-parallel (a series <model>-tp4-ep of its own): vLLM 0.25 then runs the block-FP8
# MoE on FlashInfer's CUTLASS MoE (a JIT-built module, not planned), or without FlashInfer on DeepGEMM's grouped GEMM.
# Results as below, under runs/<series>-serve/<part>/: result.json (bench/vllm_serve_trace.py),
# server.log (the server's stdout and stderr, each line with its arrival in seconds since the
# process start), http_requests.jsonl (every request: kind, status, latency).
#
# Rules it keeps:
# - one model directory for every run of a model ($ROOT/models/<model>, config.json only): vLLM's
#   torch.compile cache key includes the model path;
# - each arm its own caches ($ROOT/cache/<model>/<arm>/): VLLM_CACHE_ROOT (torch.compile, and
#   DeepGEMM's JIT cache, which vLLM puts at $VLLM_CACHE_ROOT/deep_gemm), TRITON_HOME (Triton's
#   cache is $TRITON_HOME/.triton/cache), TORCHINDUCTOR_CACHE_DIR and CUDA_CACHE_PATH.
#   TRITON_CACHE_DIR and DG_JIT_CACHE_DIR are unset, not set: Inductor points TRITON_CACHE_DIR
#   under its own cache dir only when it is unset, and that is the behaviour measured;
# - cold: the arm's cache directories are emptied first; warm: the same directories again (a warm
#   run without its arm's cold run on this machine is skipped, not run cold);
# - VLLM_ENABLE_V1_MULTIPROCESSING=0 (the engine in the harness's process, where its JIT monitor
#   sees every compile; MODE=server: removed, vLLM's default); WARMUP_PLAN=$PLUGIN_PLAN only in
#   the plugin arm (in the stock arm the installed plugin is inert: vLLM loads its entry point, which patches nothing); WARMUP_PLAN_REPORT and
#   WARMUP_JIT_LOG per run (both arms; the stock arm never reads them);
# - each run under `timeout` (RUN_TIMEOUT_S, and never past the call's budget: BUDGET_S from
#   CALL_START, the call's start in epoch seconds, default the script's); a failed run records its
#   rc and stderr tail, and the script goes on;
# - before the runs, torch, Triton and vLLM are imported once (the machine's facts): every run then
#   finds those libraries in the OS page cache, the first run of a fresh machine too.
#
# Results: under $ROOT/runs/<model>/<arm>-<temp>/ (stdout.txt, stderr.txt, run.json, result.json,
# plan_report.json, plugin_jit.jsonl, jit_after_ready.jsonl); under $OUT (at most 8 files come back
# from a device call): per part <model>.<part>.tar.gz (that run's directory, the machine's facts)
# and <model>.<part>.json (its summary row and the checks), plus proof.tsv (every run of the model
# on this machine so far) and proof.log (this script's output). So at most 3 parts per call.
# The timeline plot: python3 bench/plot_startup_timeline.py STOCK/result.json PLUGIN/result.json -o t.png
#
# Bundles (issue 25): bundle-build is a plugin run from empty caches of its own that packs the
# start-up's caches once vLLM is ready (WARMUP_BUNDLE_OUT=$ROOT/bundles/<series>.warmup; `bundle
# inspect` of it lands in the run's bundle_inspect.txt); bundle-cold is a plugin run from other
# empty caches that installs that bundle first (WARMUP_BUNDLE): compare its ready with stock-warm.
# Issue 35: bundle-build with WITH_FLASHINFER=1 carries FlashInfer's JIT modules; bundle-cold places them in
# FlashInfer's AOT directory (in $FI_SITE, shared by every arm: every run first removes the modules a bundle
# placed there), then `warmup bundle verify` after its load says what of the install was used
# (bundle_verify.txt). Repeats: PART_N (e.g. PARTS="stock-warm_1 bundle-cold_1 stock-warm_2 ...").
# Issue 43 (a machine that never built the bundle): every bundle-cold run hides the bundle's building roots
# that are not its own (moved aside for the run) and carries bench/tripwire, which records any attempt on
# them in builder_opens.log (the summary fails the run on one). BUNDLE_IN=DIR: the bundle's parts from
# another lease (bench/bundle_proof.py split there; join here, checked), joined into the series' bundle
# before the runs; STOCK_WARM_FROM=bundle-cold then gives stock-warm the caches the last bundle-cold run
# filled (with the FlashInfer modules it placed: no FlashInfer workspace on this machine holds them).
# PLUGIN_WARM_FROM=bundle-cold: plugin-warm runs on those caches with WARMUP_BUNDLE still set (a warm node: the
# bundle already installed; issue 54 item 2 says such a start pays nothing for it). PLUGIN_WARM_FROM=bundle-build:
# plugin-warm on the caches bundle-build filled (a plugin cold run that also wrote the bundle: one cold run gives
# the cold row, the bundle and the warm series). PLUGIN_WARM_FROM=stock-cold: plugin-warm on stock's caches (a node
# stock vLLM filled, then served with the plugin: what the plugin's cache rules keep, e.g. vLLM's mega AOT artifact
# off; the plugin's kernels are then in stock's caches too, so run it after the stock-warm parts).
# Issue 54 (the engine core's start): FORK_PARTS="plugin-warm_2 ..." runs those parts with WARMUP_ENGINE_CORE_FORK=1,
# SPAWN_PARTS="plugin-warm_3 ..." with WARMUP_ENGINE_CORE_FORK=0; every other part at the plugin's default (fork where
# the engine runs on one GPU), whatever the caller's environment holds. run.json's engine_core_fork says what
# happened (1: the plugin's line "engine core starts by fork" is in the server's log).
# Issue 54 (the plugin's start-up settings, each measured alone): COMPILE_LOAD_PARTS="plugin-warm_2 ..." runs those
# parts with WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS=1 (off by default: measured slower, part AK), INSPECTION_FORK_PARTS
# with WARMUP_MODEL_INSPECTION_FORK=1 (the default since part AK), INSPECTION_SPAWN_PARTS with =0; NO_MODELINFO_PARTS
# removes vLLM's model-info cache ($VLLM_CACHE_ROOT/modelinfos) before those warm parts, so that the model class
# is inspected as on a cold start. run.json: compile_load_beside and model_inspection_forked (1: the plugin's line).
# FI_FLAGS="--split-compile=0" FI_FLAGS_PARTS="bundle-build ...": those parts' FlashInfer builds (every process of
# the server, stock or plugin) with FLASHINFER_EXTRA_CUDAFLAGS=$FI_FLAGS, never inherited by the others. A cache
# built with other flags is rebuilt (ninja reruns a command that changed): give such a part caches of its own.
# Since part AL the plugin sets --split-compile=0 itself (WARMUP_FLASHINFER_SPLIT_COMPILE, on by default, where its
# workspace allows); FI_OWN_FLAGS_PARTS="plugin-cold_2 ..." runs those parts with it off (FlashInfer's own flags).
# Since part AN the plugin asks for vLLM's mega AOT artifact itself (WARMUP_TORCH_MEGA_AOT, on by default, where the
# compile cache allows: vllm_bridge/mega_aot.py); MEGA_AOT_OFF_PARTS="plugin-warm_3 ..." runs those parts with it off
# (vLLM's default). It is a factor of the torch.compile cache's key: a part with the other value than the cache was
# filled with compiles torch.compile cold once (and writes its artifact beside the other); later ones load it.
# With STOCK_WARM_FROM=bundle-build, put bundle-build in FI_OWN_FLAGS_PARTS: stock (no plugin, FlashInfer's flags)
# would otherwise build again every module bundle-build's JIT workspace holds.
# Issue 53 (the plugin's default after ready): the plugin arm runs with WARMUP_TORCH_COMPILE_AFTER_READY=compile, so
# a graph the plan missed compiles and is counted; EAGER_PARTS="plugin-cold ..." runs those parts at the plugin's
# default instead (eager: such a graph runs eagerly, unseen), to show the default costs nothing (run.json:
# torch_compile_after_ready).
# STOCK_WARM_FROM=bundle-build: stock-warm runs on the caches bundle-build filled (the same flags, so the same
# torch.compile hash; stock then finds every kernel it compiles at start-up there) instead of stock-cold's: a
# stock-cold run of this series costs ~530 s of a device call. Say so wherever its figures are reported.
# Issue 47 (BUNDLE_VIA=oci): bundle-cold gets the bundle from an OCI registry, not from the file: the CNCF
# registry of the setup's registry part is started on loopback (storage under $ROOT/registry), the bundle
# pushed there by `warmup bundle push` with a tag, the file moved out of sight, and the run started with
# WARMUP_BUNDLE=oci://127.0.0.1:$REGISTRY_PORT/warmup/<series>:build (the API server resolves the tag; the
# node pulls it once); run.json gets the reference, the push's seconds and whether the node's copy is
# bit-identical to the built file (oci_push.txt, oci_pull.txt: the plugin's lines about it).
# Variables: PARTS (required: plugin-cold plugin-warm stock-cold stock-warm bundle-build bundle-cold, each with an
# optional _N), MODE (offline |
# server), MODEL (llama | qwen | the name of any tests/fixtures/hf/<name>.json), TP (tensor_parallel_size, 1: a series <model>-tp<TP> of its own, runs
# and caches; NCCL's NVLink multicast stays off), EP (0; 1: --enable-expert-parallel, a series <model>[-tp<TP>]-ep), WITH_FLASHINFER (1: vLLM as `pip install vllm==0.25.0`
# brings it, with flashinfer-python 0.6.13 from the setup's fi part; a series <model>-fi of its own; each
# arm its own FlashInfer JIT workspace and FlashInfer's TensorRT-LLM DeepGEMM cache), PLUGIN_PLAN (vllm-0.25-plugin), PLUGIN_JOBS (WARMUP_JOBS for the plugin
# arm; unset: the plugin's default), REQUESTS (500; server mode 300), RUN_TIMEOUT_S (560), BUDGET_S (585),
# CALL_START (epoch s), PROOF_ROOT (/tmp/warmup-proof), VLLM_SITE (/tmp/vllm-site), DRY_RUN=1 (or --dry-run), DETACH=1
# and COLLECT=1 (a run longer than one call, started in one call and collected in the next: see detach()).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2

DRY_RUN=${DRY_RUN:-0}
[ "${1:-}" = --dry-run ] && DRY_RUN=1
START=$(date +%s)
CALL_START=${CALL_START:-$START}
PARTS=${PARTS:?PARTS="plugin-cold" (or plugin-warm, stock-cold, stock-warm; up to 3 per call)}
MODE=${MODE:-offline}
case "$MODE" in offline|server) ;; *) echo "MODE=$MODE: offline or server" >&2; exit 2 ;; esac
MODEL=${MODEL:-llama}
MODEL=${MODEL%.json}
case "$MODEL" in
    llama) MODEL=llama-3.1-8b-instruct-fp8-block ;;
    qwen) MODEL=qwen3-30b-a3b-fp8 ;;
esac
CONFIG=tests/fixtures/hf/$MODEL.json
ROOT=${PROOF_ROOT:-/tmp/warmup-proof}
TP=${TP:-1}
BUNDLE_VIA=${BUNDLE_VIA:-file}   # file | oci (issue 47)
case "$BUNDLE_VIA" in file|oci) ;; *) echo "BUNDLE_VIA=$BUNDLE_VIA: file or oci" >&2; exit 2 ;; esac
REGISTRY_PORT=${REGISTRY_PORT:-5000}
OCI_PROOF=()
EP=${EP:-0}   # 1: --enable-expert-parallel (vLLM 0.25: the experts sharded over the TP ranks, EP size = TP)
case "$EP" in 0|1) ;; *) echo "EP=$EP: 0 or 1" >&2; exit 2 ;; esac
# SPEC=<method>:<k> (server mode): vLLM's --speculative-config {"method": ..., "num_speculative_tokens": k},
# e.g. mtp:1 (a model with MTP layers); a series <model>-<method><k> of its own
SPEC=${SPEC:-}
if [ -n "$SPEC" ]; then
    [[ "$SPEC" =~ ^[a-z0-9_]+:[1-9][0-9]*$ ]] || { echo "SPEC=$SPEC: <method>:<k>, e.g. mtp:1" >&2; exit 2; }
    [ "${MODE:-}" = server ] || { echo "SPEC=$SPEC needs MODE=server" >&2; exit 2; }
fi
WITH_FLASHINFER=${WITH_FLASHINFER:-0}
# a tensor-parallel series, an expert-parallel one, one with FlashInfer, and the server mode's keep their own runs and caches
SERIES=$MODEL$([ "$TP" = 1 ] || echo "-tp$TP")$([ "$EP" = 1 ] && echo "-ep")$([ -n "$SPEC" ] && echo "-${SPEC/:/}")$([ "$WITH_FLASHINFER" = 1 ] && echo "-fi")$([ "$MODE" = server ] && echo "-serve")
RUNS=$ROOT/runs/$SERIES
MODEL_DIR=$ROOT/models/$MODEL
BUNDLE_FILE=$ROOT/bundles/$SERIES.warmup   # bundle-build writes it (WARMUP_BUNDLE_OUT), bundle-cold installs it
PLUGIN_PLAN=${PLUGIN_PLAN:-vllm-0.25-plugin}
REQUESTS=${REQUESTS:-$([ "$MODE" = server ] && echo 300 || echo 500)}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-560}
BUDGET_S=${BUDGET_S:-585}   # a device call runs at most 600 s: what is left is for packing the results
MIN_RUN_S=${MIN_RUN_S:-60}
RESULTS=${OUT:-$ROOT/out}
VLLM_SITE=${VLLM_SITE:-/tmp/vllm-site}

[ -f "$CONFIG" ] || { echo "no model config $CONFIG (MODEL: llama, qwen or a name in tests/fixtures/hf)" >&2; exit 2; }
# An MLA model (DeepSeek-V2/V3: kv_lora_rank in its config, what vLLM's ModelConfig.is_deepseek_mla reads)
# needs the setup's mla part too (bench/vllm_gpu_setup.sh: FlashMLA, beside FA3's MLA kernels in ext)
MLA=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c = c.get("text_config", c); print(int(bool(c.get("kv_lora_rank"))))' "$CONFIG" 2>/dev/null || echo 0)
set -f; read -r -a PART_LIST <<< "$PARTS"; set +f
for part in "${PART_LIST[@]}"; do
    case "${part%_*}" in plugin-cold|plugin-warm|stock-cold|stock-warm|bundle-build|bundle-cold) ;;
        *) echo "unknown part '$part' (plugin-cold, plugin-warm, stock-cold, stock-warm, bundle-build, bundle-cold)" >&2; exit 2 ;;
    esac
done
[ ${#PART_LIST[@]} -le 3 ] || echo "WARNING: ${#PART_LIST[@]} parts: only 8 files come back from \$OUT (2 per part + 2)"

say() { echo "[proof $(($(date +%s) - START))s] $*"; }
show() { printf '+'; printf ' %q' "$@"; printf '\n'; }   # a command as it would run
do_or_show() { if [ "$DRY_RUN" = 1 ]; then show "$@"; else "$@"; fi; }

# --- a run longer than one device call (issue 54: "a stock cold that does not finish within one device call is
# started detached and timed across calls") ------------------------------------------------------------------
# DETACH=1: this script starts itself again with the same variables, in a session of its own (setsid: the call's
# end does not end it), its budget DETACH_BUDGET_S (1800) from now, its results in $ROOT/detached/$SERIES/out,
# and returns at once. COLLECT=1, in the next calls (each within 30 s of the last: the machine and its /tmp go
# back 30 s after a call): waits, within this call's budget, for that run to end, then copies its results to
# $OUT (the same files a call of its own would bring) and prints its log; a run still going says so, and the
# next COLLECT=1 call waits again. The run's own times are its driver's (process start to ready), so the calls'
# gaps are not in them.
DETACH=${DETACH:-0}
COLLECT=${COLLECT:-0}
DETACHED=$ROOT/detached/$SERIES

detach() {
    if [ -f "$DETACHED/pid" ] && kill -0 "$(cat "$DETACHED/pid")" 2>/dev/null; then
        say "DETACH: a detached run of $SERIES is still going (pid $(cat "$DETACHED/pid")): COLLECT=1 first"; return 2
    fi
    do_or_show rm -rf "$DETACHED"
    do_or_show mkdir -p "$DETACHED/out"
    local env_set=(DETACH=0 COLLECT=0 DETACHED_RUN=1 OUT="$DETACHED/out" CALL_START="$(date +%s)"
                   BUDGET_S="${DETACH_BUDGET_S:-1800}")
    if [ "$DRY_RUN" = 1 ]; then
        show env "${env_set[@]}" setsid nohup bash bench/vllm_startup_proof.sh '>' "$DETACHED/log" '2>&1' '&'
        return 0
    fi
    env "${env_set[@]}" setsid nohup bash bench/vllm_startup_proof.sh > "$DETACHED/log" 2>&1 < /dev/null &
    echo "$!" > "$DETACHED/pid"   # the run writes its own pid too (setsid may fork where it leads a group)
    say "DETACH: parts ${PART_LIST[*]} of $SERIES started detached (pid $!, budget ${DETACH_BUDGET_S:-1800} s); collect with COLLECT=1 and the same variables"
}

collect() {
    [ -f "$DETACHED/pid" ] || { say "COLLECT: no detached run of $SERIES on this machine (DETACH=1 first)"; return 2; }
    local pid left
    pid=$(cat "$DETACHED/pid")
    while kill -0 "$pid" 2>/dev/null; do
        left=$((BUDGET_S - ($(date +%s) - CALL_START) - 10))
        if [ "$left" -le 0 ]; then
            say "COLLECT: the detached run (pid $pid) is still going; its log so far:"
            tail -n 5 "$DETACHED/log"
            return 0
        fi
        sleep 2
    done
    mkdir -p "$RESULTS"
    cp "$DETACHED"/out/* "$RESULTS"/ 2>/dev/null
    say "COLLECT: the detached run (pid $pid) has ended; its results are in $RESULTS:"
    cat "$DETACHED/log"
    rm -f "$DETACHED/pid"
}

# --- the machine ---------------------------------------------------------------------------------------
machine_facts() {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1
    echo "cpus: $(nproc)  memory: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
    bash bench/vllm_gpu_setup.sh check core ext py plugin $([ "$WITH_FLASHINFER" = 1 ] && echo fi) $([ "$MLA" = 1 ] && echo mla) $([ "$BUNDLE_VIA" = oci ] && echo registry)
    PYTHONPATH="$PYPATH" python3 -c 'import sys, torch, triton, vllm; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "vllm", vllm.__version__)' 2>&1 | tail -n 1
    [ "$WITH_FLASHINFER" = 1 ] && PYTHONPATH="$PYPATH" python3 -c 'import flashinfer; print("flashinfer", flashinfer.__version__)' 2>&1 | tail -n 1
    command -v nvcc >/dev/null && nvcc --version | tail -n 1
    echo "plugin build: $(head -n 1 "$VLLM_SITE/warmup_planner.BUILD" 2>/dev/null || echo unknown)"
    echo "PYTHONPATH=$PYPATH VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-unset}"
}


# --- one run -----------------------------------------------------------------------------------------
# run_part ARM-TEMP: empties the arm's caches for a cold run, runs the trace under timeout, writes run.json.
# A part may carry a repeat suffix, PART_N (issue 35: stock-warm and bundle-cold alternate three
# times): its own run directory, the same arm and caches as PART. (Not '@': the device tool does not
# bring back a file whose name has one.)
run_part() {
    local part=$1 base=${1%_*}
    local arm=${base%-*} temp=${base#*-} extra=()
    local dir=$RUNS/$part cache=$ROOT/cache/$SERIES/$arm
    case "$base" in  # the bundle runs: the plugin arm from empty caches of their own
        bundle-build) arm=plugin temp=cold cache=$ROOT/cache/$SERIES/bundle-build extra=(WARMUP_BUNDLE_OUT="$BUNDLE_FILE") ;;
        bundle-cold) arm=plugin temp=cold cache=$ROOT/cache/$SERIES/bundle-cold extra=(WARMUP_BUNDLE="$BUNDLE_FILE")
                     [ "$BUNDLE_VIA" = oci ] && extra=(WARMUP_BUNDLE="$(oci_ref)") ;;
        stock-warm) [ -n "${STOCK_WARM_FROM:-}" ] && cache=$ROOT/cache/$SERIES/$STOCK_WARM_FROM ;;
        plugin-warm) case "${PLUGIN_WARM_FROM:-}" in
                         bundle-cold) cache=$ROOT/cache/$SERIES/bundle-cold extra=(WARMUP_BUNDLE="$BUNDLE_FILE") ;;  # a warm node: the bundle in place, still named
                         bundle-build) cache=$ROOT/cache/$SERIES/bundle-build ;;  # a plugin cold's caches, the bundle written from them
                         stock-cold) cache=$ROOT/cache/$SERIES/stock ;;  # a node stock filled, then served with the plugin
                     esac ;;
    esac
    case " ${FORK_PARTS:-} " in *" $part "*) extra+=(WARMUP_ENGINE_CORE_FORK=1) ;; esac  # issue 54
    case " ${SPAWN_PARTS:-} " in *" $part "*) extra+=(WARMUP_ENGINE_CORE_FORK=0) ;; esac
    case " ${COMPILE_LOAD_PARTS:-} " in *" $part "*) extra+=(WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS=1) ;; esac
    case " ${INSPECTION_FORK_PARTS:-} " in *" $part "*) extra+=(WARMUP_MODEL_INSPECTION_FORK=1) ;; esac
    case " ${INSPECTION_SPAWN_PARTS:-} " in *" $part "*) extra+=(WARMUP_MODEL_INSPECTION_FORK=0) ;; esac
    case " ${FI_FLAGS_PARTS:-} " in *" $part "*) extra+=(FLASHINFER_EXTRA_CUDAFLAGS="${FI_FLAGS:?FI_FLAGS_PARTS needs FI_FLAGS}") ;; esac
    case " ${FI_OWN_FLAGS_PARTS:-} " in *" $part "*) extra+=(WARMUP_FLASHINFER_SPLIT_COMPILE=0) ;; esac
    case " ${MEGA_AOT_OFF_PARTS:-} " in *" $part "*) extra+=(WARMUP_TORCH_MEGA_AOT=0) ;; esac
    local after_ready=compile  # issue 53: the plan's own coverage is measured; EAGER_PARTS: the plugin's default
    case " ${EAGER_PARTS:-} " in *" $part "*) after_ready=eager ;; esac
    if [ "$base" = bundle-cold ] && [ ! -f "$BUNDLE_FILE" ] && [ "$DRY_RUN" != 1 ]; then
        say "$part: skipped, no bundle at $BUNDLE_FILE (bundle-build first, or BUNDLE_IN from another machine)"
        mkdir -p "$dir" && json_run "$dir" skipped="no bundle built on this machine or brought here"
        return
    fi
    [ "$base" = bundle-build ] && do_or_show rm -f "$BUNDLE_FILE" "$BUNDLE_FILE.from"
    # FlashInfer's AOT directory is in its package, shared by every arm of this machine: the modules
    # a bundle-cold run placed there would make any later run find them prebuilt (a fresh machine has
    # none), but for a stock-warm run on a bundle-cold run's caches, for which they are that warm state
    # (issue 43: on a machine that never built the bundle no FlashInfer workspace holds them)
    if ! { [ "$base" = stock-warm ] && [ "${STOCK_WARM_FROM:-}" = bundle-cold ]; } &&
       ! { [ "$base" = plugin-warm ] && [ "${PLUGIN_WARM_FROM:-}" = bundle-cold ]; }; then
        do_or_show clear_placed_flashinfer_modules
    fi
    local left=$((BUDGET_S - ($(date +%s) - CALL_START) - 15)) limit=$RUN_TIMEOUT_S
    [ "$left" -lt "$limit" ] && limit=$left
    do_or_show rm -rf "$dir"
    do_or_show mkdir -p "$dir"
    if [ "$limit" -lt "$MIN_RUN_S" ]; then
        say "$part: skipped, ${left}s left in this call"
        [ "$DRY_RUN" = 1 ] || json_run "$dir" skipped="no time left in this call (${left} s)"
        return
    fi
    case " ${NO_MODELINFO_PARTS:-} " in  # a warm start without vLLM's model-info cache: its inspection's cost
        *" $part "*) [ "$temp" = cold ] || do_or_show rm -rf "$cache/vllm/modelinfos" ;;
    esac
    if [ "$temp" = cold ]; then
        do_or_show rm -rf "$cache"
        do_or_show mkdir -p "$cache/vllm" "$cache/triton" "$cache/inductor" "$cache/nv" "$cache/flashinfer" "$cache/trtllm_dg"
    elif [ ! -f "$cache/.cold-done" ] && [ "$DRY_RUN" != 1 ]; then
        say "$part: skipped, no $arm-cold run on this machine (its caches would be empty: that is not warm)"
        json_run "$dir" skipped="no $arm-cold run on this machine"
        return
    fi
    local env_set=(PYTHONUNBUFFERED=1 PYTHONPATH="$PYPATH"
                   VLLM_CACHE_ROOT="$cache/vllm" TRITON_HOME="$cache/triton"
                   TORCHINDUCTOR_CACHE_DIR="$cache/inductor" CUDA_CACHE_PATH="$cache/nv"
                   FLASHINFER_WORKSPACE_BASE="$cache/flashinfer" TRTLLM_DG_CACHE_DIR="$cache/trtllm_dg"
                   WARMUP_PLAN_REPORT="$dir/plan_report.json" WARMUP_JIT_LOG="$dir/plugin_jit.jsonl"
                   NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1)
    [ -n "${VLLM_USE_FLASHINFER_SAMPLER:-}" ] && env_set+=(VLLM_USE_FLASHINFER_SAMPLER="$VLLM_USE_FLASHINFER_SAMPLER")
    env_set+=("${extra[@]}")
    local hidden=() foreign=""
    if [ "$base" = bundle-cold ]; then  # issue 43 item 5: the run cannot see the building caches
        foreign=$(env -u TRITON_CACHE_DIR -u DG_JIT_CACHE_DIR "${env_set[@]}" python3 bench/bundle_proof.py \
                  foreign-roots "$BUNDLE_FILE" 2>/dev/null | paste -sd: -)
        env_set=("${env_set[@]/#PYTHONPATH=*/PYTHONPATH=$PWD/bench/tripwire:$PYPATH}"
                 WARMUP_TRIPWIRE_ROOTS="$foreign" WARMUP_TRIPWIRE_LOG="$dir/builder_opens.log")
        [ "$DRY_RUN" = 1 ] || mapfile -t hidden < <(hide_building_caches "$foreign")
        if [ "$BUNDLE_VIA" = oci ]; then  # the bundle only through the registry: pushed, then the file out of sight
            do_or_show start_registry "$dir" && do_or_show push_bundle "$dir" || {
                say "$part: the registry or the push failed (oci_push.txt): skipped"
                [ "$DRY_RUN" = 1 ] || { restore_building_caches "${hidden[@]}"; stop_registry; json_run "$dir" skipped="registry or push failed"; }
                return
            }
            do_or_show mv "$BUNDLE_FILE" "$BUNDLE_FILE.hidden-by-proof"
        fi
    fi
    if [ "$arm" = plugin ]; then
        # the plan's own coverage: Dynamo compiles what the plan missed after ready, and the plugin's monitor
        # reports it (the default, eager, would run it eagerly and unseen), with the guard that failed in the log
        env_set+=(WARMUP_PLAN="$PLUGIN_PLAN" WARMUP_TORCH_COMPILE_AFTER_READY="$after_ready" TORCH_LOGS=recompiles)
        [ -n "${PLUGIN_JOBS:-}" ] && env_set+=(WARMUP_JOBS="$PLUGIN_JOBS")
    fi
    local run=(python3 bench/vllm_plugin_trace.py) unset_mp=()
    if [ "$MODE" = server ]; then  # vLLM's default: the engine core in a process of its own
        # vLLM's own JIT monitor: error mode judges the plugin arm (issue 34); the stock arm keeps
        # vLLM's default (warn), which logs its compiles after ready instead of failing the requests;
        # PLUGIN_JIT_MONITOR=warn: the plugin arm logs them too (issue 38: a plan that leaves a stage out)
        run=(python3 bench/vllm_serve_trace.py --time-limit "$limit"
             --jit-monitor-mode "$([ "$arm" = plugin ] && echo "${PLUGIN_JIT_MONITOR:-error}" || echo warn)")
        unset_mp=(-u VLLM_ENABLE_V1_MULTIPROCESSING)
    else
        env_set=(VLLM_ENABLE_V1_MULTIPROCESSING=0 "${env_set[@]}")
    fi
    local cmd=(env -u TRITON_CACHE_DIR -u DG_JIT_CACHE_DIR -u WARMUP_PLAN -u WARMUP_JOBS -u WARMUP_ENGINE -u WARMUP_ENGINE_CORE_FORK
               -u WARMUP_COMPILE_LOAD_BESIDE_WEIGHTS -u WARMUP_MODEL_INSPECTION_FORK -u FLASHINFER_EXTRA_CUDAFLAGS
               -u WARMUP_FLASHINFER_SPLIT_COMPILE -u WARMUP_TORCH_MEGA_AOT -u VLLM_USE_MEGA_AOT_ARTIFACT
               -u VLLM_PLUGINS -u TORCHINDUCTOR_FX_GRAPH_CACHE "${unset_mp[@]}" "${env_set[@]}"
               timeout --kill-after=20 "$limit" "${run[@]}" --config "$CONFIG" --arm "$arm"
               --model-dir "$MODEL_DIR" --out "$dir" --requests "$REQUESTS" --tensor-parallel-size "$TP")
    [ "$EP" = 1 ] && cmd+=(--enable-expert-parallel)
    [ -n "$SPEC" ] && cmd+=(--speculative-method "${SPEC%%:*}" --num-speculative-tokens "${SPEC##*:}")
    if [ "$DRY_RUN" = 1 ]; then
        show "${cmd[@]}" '>' "$dir/stdout.txt" '2>' "$dir/stderr.txt"
        if [ "$MODE" = server ]; then "${cmd[@]}" --dry-run; fi   # the server's own command, as the driver builds it
        return
    fi
    local before t0 rc t1
    before=$(cache_sizes "$cache")
    say "$part: running (limit ${limit}s; caches: $before)"
    t0=$(date +%s.%N)
    "${cmd[@]}" > "$dir/stdout.txt" 2> "$dir/stderr.txt"
    rc=$?
    t1=$(date +%s.%N)
    if [ -f "$dir/server.pgid" ]; then  # server mode: what of the server's group outlived its driver (killed by timeout)
        kill -KILL -- "-$(cat "$dir/server.pgid")" 2>/dev/null && say "$part: killed what was left of the server's process group"
    fi
    [ "$temp" = cold ] && echo "$rc" > "$cache/.cold-done"
    local proof=()
    if [ "$base" = bundle-cold ]; then
        restore_building_caches "${hidden[@]}"
        [ "$BUNDLE_VIA" = oci ] && mv "$BUNDLE_FILE.hidden-by-proof" "$BUNDLE_FILE" && stop_registry
        proof=(builder_roots="$foreign" builder_opens="$(python3 bench/bundle_proof.py opens "$dir/builder_opens.log")"
               bundle_sha256="$(sha256sum "$BUNDLE_FILE" | cut -c1-64)"
               bundle_from="$(cat "$BUNDLE_FILE.from" 2>/dev/null || echo "this machine")")
        if [ "$BUNDLE_VIA" = oci ]; then
            proof+=("${OCI_PROOF[@]}" node_copy_sha256="$(node_copy_sha256 "$cache")")
            grep -h 'warmup-planner: bundle' "$dir"/server.log "$dir"/stderr.txt > "$dir/oci_pull.txt" 2>/dev/null
        fi
    fi
    json_run "$dir" rc="$rc" wall_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" \
        timeout_s="$limit" caches_before="$before" caches_after="$(cache_sizes "$cache")" \
        command="$(printf '%q ' "${cmd[@]}")" engine_core_fork="$(forked "$dir")" \
        compile_load_beside="$(said "$dir" "compiled model loaded beside the weights")" \
        model_inspection_forked="$(said "$dir" "model class inspected in a forked child")" \
        mega_aot="$(said "$dir" "torch.compile artifacts are one mega AOT artifact")" \
            torch_compile_after_ready="$([ "$arm" = plugin ] && echo "$after_ready")" "${proof[@]}"
    if [ "$base" = bundle-build ]; then
        ls -la "$BUNDLE_FILE" > "$dir/bundle_inspect.txt" 2>&1
        PYTHONPATH="$PYPATH" python3 -m executor.cli bundle inspect "$BUNDLE_FILE" >> "$dir/bundle_inspect.txt" 2>&1
    fi
    if [ "$base" = bundle-cold ]; then  # after the load: what of the install was used (issue 35 item 3)
        PYTHONPATH="$PYPATH" python3 -m executor.cli bundle verify "$BUNDLE_FILE" --vllm-cache-root "$cache/vllm" \
            > "$dir/bundle_verify.txt" 2>&1
        echo "exit $?" >> "$dir/bundle_verify.txt"
    fi
    if [ "$rc" != 0 ]; then
        say "$part: FAILED (rc $rc$( { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && echo ': its time limit')), stderr's end:"
        tail -n 5 "$dir/stderr.txt" | cut -c1-300
    else
        say "$part: done"
    fi
}

# --- issue 47: the bundle through an OCI registry (BUNDLE_VIA=oci) ----------------------------------------
oci_ref() { echo "oci://127.0.0.1:$REGISTRY_PORT/warmup/$SERIES:build"; }

start_registry() {  # the CNCF registry of the setup's registry part, on loopback, storage of its own
    local bin=$VLLM_SITE/registry-bin/docker-registry i
    [ -x "$bin" ] || { echo "no $bin: install the setup's registry part" > "$1/oci_push.txt"; return 1; }
    rm -rf "$ROOT/registry" && mkdir -p "$ROOT/registry/storage"
    printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
        "$ROOT/registry/storage" "$REGISTRY_PORT" > "$ROOT/registry/config.yml"
    "$bin" serve "$ROOT/registry/config.yml" > "$ROOT/registry/registry.log" 2>&1 &
    REGISTRY_PID=$!
    for i in $(seq 100); do
        python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$REGISTRY_PORT/v2/', timeout=1)" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "the registry did not answer on 127.0.0.1:$REGISTRY_PORT" > "$1/oci_push.txt"
    return 1
}

stop_registry() { [ -n "${REGISTRY_PID:-}" ] && kill "$REGISTRY_PID" 2>/dev/null; REGISTRY_PID=""; return 0; }

push_bundle() {  # `warmup bundle push` as a user runs it; OCI_PROOF: what run.json says of it
    local t0 t1 pinned
    t0=$(date +%s.%N)
    PYTHONPATH="$PYPATH" python3 -m executor.cli bundle push "$BUNDLE_FILE" "$(oci_ref)" > "$1/oci_push.txt" 2>&1 || return 1
    t1=$(date +%s.%N)
    pinned=$(head -n1 "$1/oci_push.txt")
    OCI_PROOF=(bundle_via=oci oci_reference="$(oci_ref)" oci_pinned="$pinned"
               push_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')")
}

node_copy_sha256() {  # the node's pulled copy (vllm_bridge/bundles/source.py: under vLLM's cache root)
    local f
    for f in "$1"/vllm/warmup_bundles/oci/*.bundle; do [ -f "$f" ] && sha256sum "$f" | cut -c1-64 && return; done
    echo none
}

# The building machine's caches, out of the run's sight (issue 43 item 5): each foreign building root
# that exists here is moved aside (its path then holds nothing), and the tripwire (bench/tripwire)
# records any attempt on it; printed: what was moved, for restore_building_caches.
hide_building_caches() {
    local root
    tr ':' '\n' <<< "$1" | while read -r root; do
        [ -n "$root" ] && [ -e "$root" ] && mv "$root" "$root.hidden-by-proof" && echo "$root"
    done
    return 0
}

restore_building_caches() {
    local root
    for root in "$@"; do
        [ -e "$root.hidden-by-proof" ] && mv "$root.hidden-by-proof" "$root"
    done
    return 0
}

clear_placed_flashinfer_modules() {  # the modules a bundle placed in FlashInfer's AOT directory (their marker)
    local marker
    for marker in "${FI_SITE:-/tmp/flashinfer-site}"/flashinfer/data/aot/*/.warmup-bundle; do
        [ -f "$marker" ] && rm -rf "$(dirname "$marker")"
    done
    return 0
}

forked() {  # 1 where the run's engine core started by fork (the plugin's line in its log), else 0
    said "$1" "engine core starts by fork"
}

said() {  # 1 where the plugin's line $2 is in the run $1's log, else 0
    grep -qs "$2" "$1/server.log" "$1/stderr.txt" && echo 1 || echo 0
}

cache_sizes() {  # one arm's caches: "vllm 1.2G triton 40M inductor 300M nv 0 deep_gemm 45 entries"
    local c=$1 out="" d
    for d in vllm triton inductor nv flashinfer trtllm_dg; do out+="$d $(du -sh "$c/$d" 2>/dev/null | cut -f1) "; done
    echo "${out}deep_gemm $(find "$c/vllm/deep_gemm/cache" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l) entries"
}

json_run() {  # json_run DIR key=value...: DIR/run.json (with the stderr tail when rc is not 0)
    local dir=$1; shift
    python3 - "$dir" "$@" <<'PY'
import json, os, sys
d, out = sys.argv[1], {}
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    out[k] = int(v) if k == "rc" else float(v) if k in ("wall_s", "timeout_s") else v
if out.get("rc"):
    try:
        with open(os.path.join(d, "stderr.txt"), errors="replace") as f:
            out["stderr_tail"] = "".join(f.readlines()[-30:])[-6000:]
    except OSError:
        pass
with open(os.path.join(d, "run.json"), "w") as f:
    json.dump(out, f, indent=1)
PY
}

# pack PART: $RESULTS/<model>.<part>.tar.gz (files over 8 MiB cut to their first 1 and last 6 MiB)
# and $RESULTS/<model>.<part>.json (the part's row and the checks so far).
pack() {
    local part=$1 stage f
    stage=$(mktemp -d)
    cp -r "$RUNS/$part" "$stage/$part" && cp "$RUNS/machine.txt" "$stage/$part/machine.txt"
    for f in "$stage/$part"/*; do
        [ "$(stat -c %s "$f")" -gt 8388608 ] || continue
        { head -c 1048576 "$f"; printf '\n[... cut by vllm_startup_proof.sh ...]\n'; tail -c 6291456 "$f"; } > "$f.cut" \
            && mv "$f.cut" "$f"
    done
    tar czf "$RESULTS/$SERIES.$part.tar.gz" -C "$stage" "$part"
    rm -rf "$stage"
    python3 bench/vllm_startup_summary.py "$RUNS" --json "$RESULTS/$SERIES.$part.json" --runs "$part" >/dev/null
}

main() {
    say "model $MODEL (tensor_parallel_size $TP$([ "$EP" = 1 ] && echo ", expert parallel"), $MODE mode, series $SERIES), parts: ${PART_LIST[*]}, root $ROOT, results $RESULTS$([ "$DRY_RUN" = 1 ] && echo ', DRY RUN: nothing runs')"
    if [ "$DRY_RUN" = 1 ]; then
        show bash bench/vllm_gpu_setup.sh check core ext py plugin $([ "$WITH_FLASHINFER" = 1 ] && echo fi) $([ "$MLA" = 1 ] && echo mla) $([ "$BUNDLE_VIA" = oci ] && echo registry)
    else
        bash bench/vllm_gpu_setup.sh check core ext py plugin $([ "$WITH_FLASHINFER" = 1 ] && echo fi) $([ "$MLA" = 1 ] && echo mla) $([ "$BUNDLE_VIA" = oci ] && echo registry) \
            || { say "vLLM is not installed here (see bench/vllm_gpu_setup.sh): stopping"; return 1; }
    fi
    do_or_show env PYTHONPATH="$PYPATH" python3 -m compileall -q -j 0 planner executor kernel_model vllm_bridge bench
    if [ "$DRY_RUN" = 1 ]; then
        show machine_facts '>' "$RUNS/machine.txt"
    else
        machine_facts > "$RUNS/machine.txt" 2>&1
        cat "$RUNS/machine.txt"
    fi
    if [ -n "${BUNDLE_IN:-}" ]; then  # a bundle another machine built: its parts joined (issue 43 item 5)
        do_or_show python3 bench/bundle_proof.py join "$BUNDLE_IN" "$BUNDLE_FILE" || { say "BUNDLE_IN: not joined: stopping"; return 1; }
        [ "$DRY_RUN" = 1 ] || echo "another machine (its parts: BUNDLE_IN=$BUNDLE_IN)" > "$BUNDLE_FILE.from"
    fi
    local part
    for part in "${PART_LIST[@]}"; do
        run_part "$part"
        [ "$DRY_RUN" = 1 ] || pack "$part"
    done
    if [ "$DRY_RUN" = 1 ]; then
        show python3 bench/vllm_startup_summary.py "$RUNS" --tsv "$RESULTS/proof.tsv"
    else
        say "every run of $MODEL on this machine so far (ready: from process start):"
        python3 bench/vllm_startup_summary.py "$RUNS" --tsv "$RESULTS/proof.tsv"
    fi
}

# The environment of every run: vLLM's site dir (and VLLM_USE_FLASHINFER_SAMPLER=0 without FlashInfer).
# shellcheck source=bench/vllm_gpu_setup.sh
source bench/vllm_gpu_setup.sh env
PYPATH="$PWD:$PYTHONPATH"   # the checkout first: its planner/executor/vllm_bridge are the code that runs

[ "${DETACHED_RUN:-0}" = 1 ] && echo "$$" > "$DETACHED/pid"
if [ "$DETACH" = 1 ]; then
    detach
elif [ "$COLLECT" = 1 ]; then
    collect
elif [ "$DRY_RUN" = 1 ]; then
    main
else
    mkdir -p "$RESULTS" "$RUNS" "$ROOT/bundles"
    main 2>&1 | tee -a "$RESULTS/proof.log"   # the pipeline waits for tee: the log is whole
fi
