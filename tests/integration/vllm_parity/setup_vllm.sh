#!/usr/bin/env bash
# Install the vLLM releases the per-release plans support, for the parity tests, without a GPU.
#
#   tests/integration/vllm_parity/setup_vllm.sh [CACHE_DIR]     # default ${XDG_CACHE_HOME:-~/.cache}/warmup-planner/vllm
#
# The releases, and the FlashInfer each wheel pins, are the rows of the one release table
# (planner/engine/releases.py, read through `python -m planner.engine.releases setup`): this script holds no list.
# Each release goes into its own target directory (pip --no-deps: the wheel pins a torch this
# project does not need to run vLLM's configuration and warmup functions on CPU), beside one
# directory of the pure packages its imports need. Wheels are downloaded once into the cache.
# A release whose row names a FlashInfer gets it in its env: vLLM 0.25.0's holds flashinfer-python 0.6.13,
# the FlashInfer its wheel requires
# (Requires-Dist: flashinfer-python==0.6.13, flashinfer-cubin==0.6.13), so vLLM's linear-kernel
# selection sees FlashInfer's real exports (flashinfer.gemm.fp8_blockscale_gemm_sm90); it imports
# on CPU with nvidia-ml-py and tabulate (FLASHINFER_DEPS, beside it). flashinfer-cubin (458 MB of prebuilt kernels,
# no Python vLLM reads beyond its presence) is not installed: the oracle sets vLLM's own
# VLLM_HAS_FLASHINFER_CUBIN=1 in its place (tests/integration/vllm_parity/oracle.py).
# The last line printed is the WARMUP_VLLM_ENVS value tests/integration/vllm_parity/test_parity.py reads.
set -euo pipefail
CACHE=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/warmup-planner/vllm}
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
ROWS=$(cd "$ROOT" && "$PY" -m planner.engine.releases setup)  # `VERSION FLASHINFER` a line, '-': none
# What `import vllm` and its config, warmup and MoE-oracle modules need beyond torch, numpy,
# pyyaml and jsonschema (found by importing with each absent; versions inside both releases' pins).
DEPS="transformers==5.20.2 huggingface_hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0 hf_xet==1.8.0
 pydantic==2.14.3 pydantic_core==2.50.4 annotated_types==0.8.0 typing_inspection==0.4.5 typing_extensions==4.16.0
 cbor2==6.3.0 blake3==1.0.11 cachetools==8.0.1 msgspec==0.22.0 pyzmq==27.3.0 psutil==7.2.2 py-cpuinfo==9.0.0
 tqdm==4.70.1 sentencepiece==0.2.3 regex==2026.11.15 packaging==26.3 filelock==4.2.12 fsspec==2026.9.0
 openai==2.54.0 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0
 anyio==4.16.0 idna==3.20 certifi==2026.10.18 pybase64==1.5.1 partial-json-parser==0.2.1.1.post7 einops==0.8.2
 aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0 multidict==7.2.1
 propcache==0.5.4 yarl==1.25.1 openai-harmony==0.0.8 pillow==13.0.0 uvloop==0.23.0 prometheus_client==0.26.0
 xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2 fastapi==0.136.1 starlette==1.10.0 annotated-doc==0.0.7
 llguidance==1.9.1 compressed-tensors==0.17.0 loguru==0.7.3 typer==0.29.2 click==8.5.1 rich==15.0.0
 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5
 shellingham==1.5.4 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 jinja2==3.1.6 markupsafe==3.0.4
 urllib3==2.8.0 requests==2.34.2 charset-normalizer==3.5.3 cloudpickle==3.1.3"
# What FlashInfer's import needs beyond DEPS, in a target of its own on the path of a release with
# FlashInfer only (DEPS is shared by every release, and a cache made from another DEPS list is redone).
FLASHINFER_DEPS="nvidia-ml-py==13.615.71 tabulate==0.10.0"

install_flashinfer() {  # $1: the flashinfer-python version, into $CACHE/flashinfer-$1 (+ -deps)
    local version=$1 fi_wheel="$CACHE/wheels/flashinfer_python-$1-py3-none-any.whl"
    [ -f "$fi_wheel" ] || "$PY" -m pip download -q --no-deps --only-binary=:all: "flashinfer-python==$version" \
        -d "$CACHE/wheels"
    [ -f "$CACHE/flashinfer-$version/.complete" ] || {
        rm -rf "$CACHE/flashinfer-$version"
        "$PY" -m pip install -q --no-deps --no-compile --target "$CACHE/flashinfer-$version" "$fi_wheel"
        touch "$CACHE/flashinfer-$version/.complete"
    }
    [ "$(cat "$CACHE/flashinfer-$version-deps/.complete" 2>/dev/null)" = "$FLASHINFER_DEPS" ] || {
        rm -rf "$CACHE/flashinfer-$version-deps"
        # shellcheck disable=SC2086
        "$PY" -m pip install -q --no-deps --no-compile --only-binary=:all: --target "$CACHE/flashinfer-$version-deps" \
            $FLASHINFER_DEPS
        printf '%s' "$FLASHINFER_DEPS" > "$CACHE/flashinfer-$version-deps/.complete"
    }
}

mkdir -p "$CACHE/wheels"
envs=""
mapfile -t rows <<< "$ROWS"  # not `while read`: nothing in the loop may read the rows as its stdin
for row in "${rows[@]}"; do
    read -r v flashinfer <<< "$row"
    wheel="$CACHE/wheels/vllm-$v-cp38-abi3-manylinux_2_28_x86_64.whl"
    [ -f "$wheel" ] || "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 "vllm==$v" -d "$CACHE/wheels"
    target="$CACHE/vllm-$v"
    [ -f "$target/.complete" ] || {
        rm -rf "$target"
        "$PY" -m pip install -q --no-deps --no-compile --target "$target" "$wheel"
        touch "$target/.complete"
    }
    extra=""
    if [ "$flashinfer" != "-" ]; then
        install_flashinfer "$flashinfer"
        extra=":$CACHE/flashinfer-$flashinfer:$CACHE/flashinfer-$flashinfer-deps"
    fi
    envs="$envs${envs:+,}${v%.0}=$target$extra:$CACHE/deps"
done
# The marker holds the list it was installed from: a cache made from an older list is redone.
[ "$(cat "$CACHE/deps/.complete" 2>/dev/null)" = "$DEPS" ] || {
    rm -rf "$CACHE/deps"
    # shellcheck disable=SC2086
    "$PY" -m pip install -q --no-deps --no-compile --only-binary=:all: --target "$CACHE/deps" $DEPS
    printf '%s' "$DEPS" > "$CACHE/deps/.complete"
}
echo "$envs"
