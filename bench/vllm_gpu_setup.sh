#!/usr/bin/env bash
# vLLM 0.25.0 on the GPU machine (torch 2.11.0+cu130, Python 3.12, no network).
# NOT YET RUN there: `prepare` ran here on 2026-11-23 (parts of 52, 49 and 21 MB); the first
# install call was refused (no device machine lent for the rest of that session).
#
# 0.25.0 is the newest vLLM that pins the machine's torch (0.33.0 pins 2.14.0). Its wheel is
# 250 MB and one device call carries at most 64 MiB, so it travels in three parts to a warm
# machine (the machine goes back 30 s after a call; /tmp survives between calls made in time):
#
#   bash bench/vllm_gpu_setup.sh prepare                 # here: .vllm/{core,ext,py}/part.tar.xz
#   (device call, carry [".vllm/core"])  bash bench/vllm_gpu_setup.sh install core
#   (device call, carry [".vllm/ext"])   bash bench/vllm_gpu_setup.sh install ext
#   (device call, carry [".vllm/py"])    bash bench/vllm_gpu_setup.sh install py
#   then, in that call or the next:      source bench/vllm_gpu_setup.sh env
#
# What each part holds (xz sizes from the 0.25.0 wheel):
#   core  vllm/_C_stable_libtorch.abi3.so: vLLM's own CUDA ops (about 54 MB)
#   ext   vllm/_moe_C_stable_libtorch.abi3.so (fused MoE ops) and vllm_flash_attn's FA3 module:
#         model modules import vllm.vllm_flash_attn, which needs FA2 or FA3 even when the
#         Triton attention backend runs (about 50 MB)
#   py    every Python file of the wheel, vLLM's vendored DeepGEMM (for Python 3.12), and the
#         pure-Python or small wheels of the dependencies the machine's image lacks ($DEPS)
# Left out, and why: vllm_flash_attn's FA2 module (191 MB; FA3 serves Hopper), vllm-rs (a Rust
# front-end server; offline LLM does not use it), third_party/fmha_sm100 (Blackwell only), the
# other Pythons' DeepGEMM modules, and headers/sources vLLM does not read at run time
# (.cu/.cuh/.cpp; DeepGEMM's include/ stays: its JIT compiles against it).
# Optional libraries vLLM imports only when used (flashinfer, deep_ep, triton_kernels, ray, ...)
# are left absent on purpose: a stand-in module is worse than none (vLLM probes some of them).
set -u
VLLM_VERSION=${VLLM_VERSION:-0.25.0}
VLLM_WHEEL_DIR=${VLLM_WHEEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/warmup-planner/vllm}
VLLM_SITE=${VLLM_SITE:-/tmp/vllm-site}
PY=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --only-binary=:all:)
# The dependencies vLLM imports at start that the GPU image lacks (found by importing vLLM there,
# ../shared/reference/vllm-on-the-gpu-machine.md), pinned to what 0.25.0 accepts.
DEPS=(pydantic pydantic-core annotated-types typing-inspection cbor2 pyzmq msgspec blake3 cachetools
      partial-json-parser "openai>=2,<3" jiter distro sniffio openai-harmony pybase64
      "fastapi<0.137" starlette python-multipart xgrammar "llguidance<1.8" diskcache lark==1.2.2
      py-cpuinfo setproctitle ijson cloudpickle einops prometheus_client python-json-logger
      gguf depyf==0.20.0 astor opentelemetry-api opentelemetry-sdk opentelemetry-semantic-conventions
      importlib-metadata zipp)

wheel() {
    mkdir -p "$VLLM_WHEEL_DIR"
    local whl
    whl=$(ls "$VLLM_WHEEL_DIR"/vllm-"$VLLM_VERSION"-*.whl 2>/dev/null | head -n1)
    if [ -z "$whl" ]; then
        python3 -m pip download -q --no-deps "${PY[@]}" "vllm==$VLLM_VERSION" -d "$VLLM_WHEEL_DIR" >&2 || return 1
        whl=$(ls "$VLLM_WHEEL_DIR"/vllm-"$VLLM_VERSION"-*.whl | head -n1)
    fi
    echo "$whl"
}

# pack PART LIST...: the wheel members matching the shell patterns into .vllm/PART/part.tar.xz
pack() {
    local part=$1 whl=$2; shift 2
    [ -f ".vllm/$part/part.tar.xz" ] && [ -z "${FORCE:-}" ] && { echo "$part: kept (FORCE=1 rebuilds)"; return; }
    local stage
    stage=$(mktemp -d)
    python3 - "$whl" "$stage" "$@" <<'PY' || return 1
import fnmatch, sys, zipfile
whl, stage, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
# PATTERN keeps, !PATTERN drops what a keep matched, +PATTERN keeps whatever a drop said
keep = [p for p in patterns if p[0] not in "!+"]
drop = [p[1:] for p in patterns if p[0] == "!"]
force = [p[1:] for p in patterns if p[0] == "+"]
match = lambda name, pats: any(fnmatch.fnmatch(name, p) for p in pats)
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist()
             if match(n, force) or (match(n, keep) and not match(n, drop))]
    z.extractall(stage, names)
print(f"{len(names)} files", file=sys.stderr)
PY
    if [ "$part" = py ]; then
        mkdir -p "$stage/wheels"
        python3 -m pip download -q --no-deps "${PY[@]}" -d "$stage/wheels" "${DEPS[@]}" >&2 || return 1
    fi
    mkdir -p ".vllm/$part"
    tar cf - -C "$stage" . | xz -6 -T0 > ".vllm/$part/part.tar.xz" && rm -rf "$stage"
    echo "$part: $(du -h ".vllm/$part/part.tar.xz" | cut -f1)"
}

prepare() {
    local whl
    whl=$(wheel) || return 1
    pack core "$whl" 'vllm/_C_stable_libtorch.abi3.so'
    pack ext "$whl" 'vllm/_moe_C_stable_libtorch.abi3.so' 'vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so'
    pack py "$whl" 'vllm/*' 'vllm-*.dist-info/*' '!*.so' '!vllm/vllm-rs' '!vllm/third_party/fmha_sm100/*' \
        '!*.cu' '!*.cuh' '!*.cpp' '+vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so'
}

install_part() {
    local part=$1
    [ -f ".vllm/$part/part.tar.xz" ] || { echo "vllm_gpu_setup: .vllm/$part/part.tar.xz not carried" >&2; return 1; }
    mkdir -p "$VLLM_SITE"
    xz -dc ".vllm/$part/part.tar.xz" | tar x -C "$VLLM_SITE" || return 1
    if [ -d "$VLLM_SITE/wheels" ]; then
        python3 -m pip install -q --no-index --no-deps --target "$VLLM_SITE" "$VLLM_SITE"/wheels/*.whl && rm -rf "$VLLM_SITE/wheels"
    fi
    echo "installed $part into $VLLM_SITE ($(du -sh "$VLLM_SITE" | cut -f1))"
}

case "${1:-env}" in
    prepare) prepare ;;
    install) install_part "${2:?install which part: core, ext or py}" ;;
    env) export PYTHONPATH="$VLLM_SITE${PYTHONPATH:+:$PYTHONPATH}" ;;
    *) echo "usage: bench/vllm_gpu_setup.sh prepare | install core|ext|py | env" >&2; false ;;
esac
