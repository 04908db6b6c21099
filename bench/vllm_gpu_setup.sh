#!/usr/bin/env bash
# vLLM 0.25.0 and this project's vLLM plugin on the GPU machine (H100 or H200, torch 2.11.0+cu130,
# Python 3.12, nvcc 13.0, no network), carried in four parts, one device call each at most 64 MiB with
# the repository (about 7 MiB). What is in here rests on real runs there
# (../shared/reference/vllm-on-the-gpu-machine.md; `vllm serve` with SERVER_DEPS and the fi part:
# bench/RESULTS.md part X on).
#
# Here, where PyPI is reachable, from the repository root:
#   bash bench/vllm_gpu_setup.sh prepare   # .vllm/{core,ext,py,fi,mla}/part.tar.xz and .vllm/plugin/ (FORCE=1: rebuild all;
#                                          # without it a part is kept, the py part only while its wheel list is the same)
#   bash bench/vllm_gpu_setup.sh plugin    # rebuild only the plugin wheel (after the repo's code changed)
#   bash bench/vllm_gpu_setup.sh part py   # build one part as prepare does (PARTS_DIR=/tmp/x: elsewhere)
#   bash bench/vllm_gpu_setup.sh sizes     # each part's size (a call carries at most 64 MiB)
# .vllm/ must not be committed (prepare adds /.vllm/ to .git/info/exclude) and travels only as `carry`.
#
# On the GPU machine, one device call per line, each made within 30 s of the last (the machine, and
# its /tmp with the install, go back 30 s after a call ends; `check` says what is still there):
#   carry [".vllm/core"]                 bash bench/vllm_gpu_setup.sh install core
#   carry [".vllm/ext"]                  bash bench/vllm_gpu_setup.sh install ext
#   carry [".vllm/py", ".vllm/plugin"]   bash bench/vllm_gpu_setup.sh install py plugin && bash bench/vllm_gpu_setup.sh check
#   any later call:                      bash bench/vllm_gpu_setup.sh check && source bench/vllm_gpu_setup.sh env && ...
#   oci:// bundles (BUNDLE_VIA=oci in bench/vllm_startup_proof.sh): carry [".vllm/registry"] too (5 MiB), `install registry`
#   MLA models (DeepSeek-V2/V3, MODEL=deepseek-v3-5l): carry [".vllm/mla"] too, in any install call
#                                        (0.9 MiB: beside py, plugin and fi), and `install mla`
#   FlashInfer, as vLLM's wheel pins it:  carry [".vllm/fi"]  bash bench/vllm_gpu_setup.sh install fi; then
#                                        WITH_FLASHINFER=1 puts its site ($FI_SITE) on `env`'s PYTHONPATH
# (`install` takes several parts; `check [PART...]` prints one line, exits 1 if a part is missing.)
#
# What each part holds (sizes from `prepare` here; the repo's tracked files: 7.0 MiB):
#   core    vllm/_C_stable_libtorch.abi3.so: vLLM's own CUDA ops (51.2 MiB xz)
#   ext     vllm/_moe_C_stable_libtorch.abi3.so (fused MoE ops) and vllm_flash_attn's FA3 module:
#           model modules import vllm.vllm_flash_attn, which needs FA2 or FA3 (48.2 MiB xz)
#   py      every Python file of the wheel, vLLM's vendored DeepGEMM for Python 3.12 with its whole
#           include/ tree (its JIT compiles against it: without the .cuh files the first DeepGEMM
#           call fails), a few tiny .so (cumem_allocator, spinloop, fs_io_C), and the wheels of the
#           dependencies the GPU image lacks ($DEPS and, for `vllm serve`, $SERVER_DEPS, pinned),
#           installed with pip --target; vLLM's Python is byte-compiled at install, so no run pays
#           for it (25.1 MiB xz)
#   plugin  this repository's wheel (pip wheel . --no-deps, built here: the GPU image has no
#           hatchling, so `pip install -e .` fails there), installed with pip --target into the
#           vLLM site dir: its warmup_planner-*.dist-info/entry_points.txt is how vLLM finds the
#           plugin (`vllm.general_plugins`). The code that runs is the carried checkout's when the
#           checkout is first on PYTHONPATH (bench/vllm_startup_proof.sh puts it there); the part
#           records the commit it was built from (BUILD), and `check` says when the carried wheel
#           differs from the installed one (0.3 MiB; rebuilt by every `prepare` and by `plugin`).
#   mla     (optional, MLA models: DeepSeek-V2/V3) vllm/_flashmla_C.abi3.so and
#           vllm/_flashmla_extension_C.abi3.so, FlashMLA's dense and FP8 decode kernels (1.7 + 0.25 MB;
#           0.9 MiB xz). What vLLM 0.25.0 runs for DeepSeek-V3 on SM 9.0
#           is elsewhere: the MLA backend is FLASH_ATTN_MLA, first in platforms/cuda.py's SM 9.0 list
#           (_get_backend_priorities), FA3's varlen kernels (ext's _vllm_fa3_C: flashattn_mla.py's
#           supports_combination needs FA3 on SM 9.x), prefill FLASH_ATTN too (mla/prefill/selector.py);
#           MoE: Triton fused_moe at TP (oracle/fp8.py puts TRITON first for block FP8 on SM 9.0),
#           FlashInfer CUTLASS with expert parallelism (the fi part), DeepGEMM's grouped GEMM without
#           FlashInfer (py part); grouped top-k: _moe_C's grouped_topk (ext); the MLA Python (FlashMLA's
#           wrappers in vllm/third_party/flashmla included) is in py. Without this part vLLM imports its
#           FlashMLA wrappers in a try (v1/attention/ops/flashmla.py) and marks FLASHMLA invalid
#           ("vllm._flashmla_C is not available"); with it the backend list is a `pip install vllm`'s,
#           and --attention-backend FLASHMLA can run. Installed into $VLLM_SITE like core and ext.
# core + ext + py + plugin do not fit one call together: three install calls (core; ext; py and plugin).
# Left out, and why: vllm_flash_attn's FA2 module (191 MB; FA3 serves Hopper), vllm-rs (a Rust
# front-end server; offline LLM does not use it), third_party/fmha_sm100 (Blackwell only), the
# other Pythons' DeepGEMM modules, QuTLASS/the Rust tool parser (Blackwell, tool calling), FlashMLA
# unless asked for (the mla part), and .cu/.cuh/.cpp sources outside DeepGEMM's include/.
# Optional libraries vLLM imports only when used (flashinfer, deep_ep, triton_kernels, ray, ...)
# are left absent on purpose: a stand-in module is worse than none (vLLM probes some of them).
# Without FlashInfer, `env` sets VLLM_USE_FLASHINFER_SAMPLER=0 (Model Runner V2's sampler imports
# FlashInfer otherwise); bench/flashinfer_setup.sh brings FlashInfer where it is wanted.

VLLM_VERSION=${VLLM_VERSION:-0.25.0}
VLLM_SITE=${VLLM_SITE:-/tmp/vllm-site}

# --- env: sourced (`source bench/vllm_gpu_setup.sh env`), it changes no shell option -------------
_vgs_env() {
    case ":${PYTHONPATH:-}:" in
        *":$VLLM_SITE:"*) ;;
        *) export PYTHONPATH="$VLLM_SITE${PYTHONPATH:+:$PYTHONPATH}" ;;
    esac
    # WITH_FLASHINFER=1: the fi part's site too (installed apart, so that runs without it stay as they were)
    if [ "${WITH_FLASHINFER:-0}" = 1 ]; then
        case ":$PYTHONPATH:" in
            *":${FI_SITE:-/tmp/flashinfer-site}:"*) ;;
            *) export PYTHONPATH="${FI_SITE:-/tmp/flashinfer-site}:$PYTHONPATH" ;;
        esac
    fi
    # FlashInfer importable? (find_spec first: cheap when it is absent, the usual case there)
    if [ -z "${VLLM_USE_FLASHINFER_SAMPLER+set}" ] && ! python3 -c '
import importlib.util, sys
if importlib.util.find_spec("flashinfer") is None:
    sys.exit(1)
import flashinfer' >/dev/null 2>&1; then
        export VLLM_USE_FLASHINFER_SAMPLER=0
    fi
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then  # sourced
    case "${1:-env}" in
        env) _vgs_env; return 0 ;;
        *) echo "vllm_gpu_setup: only 'env' can be sourced; run the script for '$1'" >&2; return 1 ;;
    esac
fi

set -u -o pipefail
export PIP_ROOT_USER_ACTION=ignore   # pip runs as root there and here
VLLM_WHEEL_DIR=${VLLM_WHEEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/warmup-planner/vllm/wheels}
PARTS_DIR=${PARTS_DIR:-.vllm}
MARKERS="$VLLM_SITE/.warmup-parts"   # one file per installed part: the sha256 of what was installed
PY=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
    --only-binary=:all:)
# The dependencies vLLM needs at start that the GPU image lacks (found by importing vLLM there and by
# serving a model with it, ../shared/reference/vllm-on-the-gpu-machine.md). Pinned to what PyPI
# resolved for cp312 manylinux.
# apache-tvm-ffi: xgrammar imports tvm_ffi (vLLM's pin 0.1.9 fails with this xgrammar; 0.1.15.post2
# worked); compressed-tensors: vLLM 0.25.0's pin (0.12 lacks compressors.pack_quantized); loguru:
# compressed-tensors imports it. llguidance 1.6.1 is below vLLM's >=1.7 (the newest with a cp312
# manylinux_2_28 wheel); it is only imported, structured output does not run here.
DEPS=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 cbor2==6.3.0
      pyzmq==27.3.0 msgspec==0.22.0 blake3==1.0.11 cachetools==8.0.2 partial-json-parser==0.2.1.1.post7
      openai==2.54.0 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 openai-harmony==0.0.8 pybase64==1.5.1
      fastapi==0.136.3 starlette==1.10.0 python-multipart==0.0.34 xgrammar==0.2.8 llguidance==1.6.1
      diskcache==5.6.3 lark==1.2.2 py-cpuinfo==9.0.0 setproctitle==1.3.8 ijson==3.6.0 cloudpickle==3.1.3
      einops==0.8.2 prometheus_client==0.26.0 python-json-logger==4.2.0 gguf==0.19.0 depyf==0.20.0
      astor==0.8.1 opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2
      opentelemetry-semantic-conventions==0.66b2 importlib-metadata==10.2.0 zipp==4.1.2
      apache-tvm-ffi==0.1.15.post2 compressed-tensors==0.17.0 loguru==0.7.3)
# What vLLM 0.25.0's OpenAI server (`vllm serve`, bench/vllm_serve_trace.py) needs beyond DEPS that
# the GPU image lacks. Found by reading the wheel: a static walk of every import reachable from
# vllm.entrypoints.cli.main (module level everywhere, and inside the functions of vllm.entrypoints,
# which build the app and its routes) named these as imported unconditionally: uvicorn
# (entrypoints/launcher.py, openai/dp_supervisor.py), watchfiles (serve/utils/ssl.py),
# model_hosting_container_standards (serve/sagemaker/api_router.py, imported by api_server.py; it
# imports jmespath), prometheus_fastapi_instrumentator (serve/instrumentator/metrics.py). httptools,
# websockets and python-dotenv are uvicorn[standard], which vLLM's fastapi[standard] brings: with
# httptools and websockets installed uvicorn's "auto" picks them, as it does where users
# `pip install vllm` (uvloop is in the image). Left out: the rest of fastapi[standard] (fastapi-cli,
# fastar, email-validator, pydantic-settings, pydantic-extra-types: no module of vLLM imports them),
# anthropic (vllm/entrypoints/anthropic is vLLM's own; the package is never imported), mcp (only
# with --tool-server), mistral_common (lazily, for Mistral tokenizers), opentelemetry's exporters
# (vllm/tracing imports them in a try, for --otlp-traces-endpoint), supervisor and setuptools
# (model-hosting-container-standards requires them but does not import them). Pinned to what PyPI
# resolved for cp312 manylinux, within vLLM 0.25.0's bounds
# (model-hosting-container-standards >=0.1.14,<1; prometheus-fastapi-instrumentator >=8).
# Each imports in a Python 3.12 venv with DEPS (vLLM's serve/utils/ssl.py and
# serve/instrumentator/metrics.py with them; a FastAPI app with the instrumentator and sagemaker's
# bootstrap serves /health and /metrics under uvicorn); the whole server: bench/RESULTS.md part X on.
SERVER_DEPS=(uvicorn==0.54.0 httptools==0.9.0 websockets==17.4 python-dotenv==1.2.4 watchfiles==1.3.0
             model-hosting-container-standards==0.1.16 jmespath==1.1.0 prometheus-fastapi-instrumentator==8.1.0)

# What `check` looks for in $VLLM_SITE, per part (each must exist).
part_files() {
    case "$1" in
        core) echo "vllm/_C_stable_libtorch.abi3.so" ;;
        ext) echo "vllm/_moe_C_stable_libtorch.abi3.so vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" ;;
        py) echo "vllm/__init__.py vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so" \
                 "vllm/third_party/deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh" \
                 "tvm_ffi compressed_tensors loguru xgrammar pydantic" \
                 "uvicorn watchfiles httptools model_hosting_container_standards prometheus_fastapi_instrumentator" ;;
        # plugin.py: what vLLM loads by name; kernels/deep_gemm.py: where the wheel's warmup.backends entry
        # points (an install from before vllm_bridge's sub-packages lacks it, and its backends would name nothing)
        plugin) echo "vllm_bridge/plugin.py vllm_bridge/kernels/deep_gemm.py" ;;
        fi) echo "flashinfer/__init__.py flashinfer/data/csrc pynvml.py tabulate" ;;
        mla) echo "vllm/_flashmla_C.abi3.so vllm/_flashmla_extension_C.abi3.so" ;;
        registry) echo "oras/__init__.py jsonschema/__init__.py registry-bin/docker-registry" ;;
        *) return 1 ;;
    esac
}
ALL_PARTS="core ext py plugin"   # fi and mla are optional: `check` without parts leaves them out
FI_SITE=${FI_SITE:-/tmp/flashinfer-site}
part_site() { if [ "$1" = fi ]; then echo "$FI_SITE"; else echo "$VLLM_SITE"; fi; }

wheel() {
    mkdir -p "$VLLM_WHEEL_DIR"
    local found=("$VLLM_WHEEL_DIR"/vllm-"$VLLM_VERSION"-*.whl)
    if [ ! -f "${found[0]}" ]; then
        python3 -m pip download -q --no-deps "${PY[@]}" "vllm==$VLLM_VERSION" -d "$VLLM_WHEEL_DIR" >&2 || return 1
        found=("$VLLM_WHEEL_DIR"/vllm-"$VLLM_VERSION"-*.whl)
    fi
    [ -f "${found[0]}" ] && echo "${found[0]}"
}

# pack PART WHEEL PATTERN...: the wheel members matching the patterns into $PARTS_DIR/PART/part.tar.xz
pack() {
    local part=$1 whl=$2; shift 2
    if [ -f "$PARTS_DIR/$part/part.tar.xz" ] && [ -z "${FORCE:-}" ]; then
        if [ "$part" != py ] || [ "$(cat "$PARTS_DIR/py/WHEELS" 2>/dev/null)" = "$(py_wheels)" ]; then
            echo "$part: kept (FORCE=1 rebuilds)"; return
        fi
        echo "py: rebuilding: its wheel list ($PARTS_DIR/py/WHEELS) is not DEPS and SERVER_DEPS"
    fi
    local stage
    stage=$(mktemp -d)
    python3 - "$whl" "$stage" "$@" <<'PY' || return 1
import fnmatch, sys, zipfile
whl, stage, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
# PATTERN keeps, !PATTERN drops what a keep matched, +PATTERN keeps whatever a drop said
# (fnmatch: * matches / too, so dir/* is the whole tree under dir)
keep = [p for p in patterns if p[0] not in "!+"]
drop = [p[1:] for p in patterns if p[0] == "!"]
force = [p[1:] for p in patterns if p[0] == "+"]
match = lambda name, pats: any(fnmatch.fnmatch(name, p) for p in pats)
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist()
             if match(n, force) or (match(n, keep) and not match(n, drop))]
    z.extractall(stage, names)
print(f"{len(names)} files from the wheel", file=sys.stderr)
PY
    if [ "$part" = py ]; then
        mkdir -p "$stage/wheels"
        python3 -m pip download -q --no-deps "${PY[@]}" -d "$stage/wheels" "${DEPS[@]}" "${SERVER_DEPS[@]}" >&2 \
            || { rm -rf "$stage"; return 1; }
        local got=("$stage"/wheels/*.whl)
        echo "${#got[@]} dependency wheels" >&2
    fi
    mkdir -p "$PARTS_DIR/$part"
    tar cf - -C "$stage" . | xz -6 -T0 > "$PARTS_DIR/$part/part.tar.xz.tmp" || { rm -rf "$stage"; return 1; }
    mv "$PARTS_DIR/$part/part.tar.xz.tmp" "$PARTS_DIR/$part/part.tar.xz"
    [ "$part" = py ] && py_wheels > "$PARTS_DIR/py/WHEELS"
    rm -rf "$stage"
    echo "$part: $(du -h "$PARTS_DIR/$part/part.tar.xz" | cut -f1)"
}

py_wheels() { printf '%s\n' "${DEPS[@]}" "${SERVER_DEPS[@]}"; }   # what the py part's wheels were pinned to

# The plugin part: this checkout's wheel (hatchling comes from PyPI through pip's build isolation).
build_plugin() {
    local stage
    stage=$(mktemp -d)
    python3 -m pip wheel -q --no-deps -w "$stage" . >&2 || { rm -rf "$stage"; return 1; }
    rm -rf "$PARTS_DIR/plugin"
    mkdir -p "$PARTS_DIR/plugin"
    mv "$stage"/warmup_planner-*.whl "$PARTS_DIR/plugin/" && rm -rf "$stage"
    {
        echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo '+uncommitted changes')"
        echo "built $(date -u +%Y-%m-%dT%H:%MZ)"
    } > "$PARTS_DIR/plugin/BUILD"
    echo "plugin: $(du -h "$PARTS_DIR"/plugin/*.whl | cut -f1) ($(head -n1 "$PARTS_DIR/plugin/BUILD"))"
}

exclude_parts_dir() {
    local exclude
    exclude=$(git rev-parse --git-path info/exclude 2>/dev/null) || return 0
    git check-ignore -q "$PARTS_DIR/x" 2>/dev/null && return 0
    mkdir -p "$(dirname "$exclude")"
    echo "/$PARTS_DIR/" >> "$exclude"
    echo "added /$PARTS_DIR/ to $exclude"
}

prepare() {
    wheel >/dev/null || return 1
    exclude_parts_dir
    local part
    for part in core ext py plugin fi mla registry; do build_part "$part" || return 1; done
    sizes
}

# build_part PART: one part, as prepare builds it (kept if built, as prepare keeps it)
build_part() {
    case "$1" in
        plugin) build_plugin; return ;;
        fi) pack_fi; return ;;
        registry) pack_registry; return ;;
        core|ext|py|mla) ;;
        *) echo "vllm_gpu_setup: no part '$1' (core, ext, py, plugin, fi, mla, registry)" >&2; return 1 ;;
    esac
    local whl
    whl=$(wheel) || return 1
    mkdir -p "$PARTS_DIR"
    case "$1" in
        core) pack core "$whl" 'vllm/_C_stable_libtorch.abi3.so' ;;
        ext) pack ext "$whl" 'vllm/_moe_C_stable_libtorch.abi3.so' 'vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so' ;;
        mla) pack mla "$whl" 'vllm/_flashmla_C.abi3.so' 'vllm/_flashmla_extension_C.abi3.so' ;;
        py) pack py "$whl" 'vllm/*' 'vllm-*.dist-info/*' '!*.so' '!vllm/vllm-rs' '!vllm/third_party/fmha_sm100/*' \
                '!*.cu' '!*.cuh' '!*.cpp' '+vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so' \
                '+vllm/third_party/deep_gemm/include/*' '+vllm/cumem_allocator.abi3.so' '+vllm/spinloop.abi3.so' \
                '+vllm/fs_io_C.abi3.so' ;;
    esac
}

# The fi part (optional): FlashInfer as `pip install vllm==0.25.0` brings it (flashinfer-python
# 0.6.13, the wheel's pin) plus the two packages its import needs that the GPU image lacks; the
# rest of its requirements are there (tvm_ffi comes with the py part) or unused on Hopper
# (flashinfer-cubin, 458 MB of Blackwell kernels; its JIT builds the SM 9.0 modules with nvcc).
FI_WHEELS=(flashinfer-python==0.6.13 nvidia-ml-py==13.615.71 tabulate==0.10.0)
pack_fi() {
    [ -f "$PARTS_DIR/fi/part.tar.xz" ] && [ -z "${FORCE:-}" ] && { echo "fi: kept (FORCE=1 rebuilds)"; return; }
    local stage
    stage=$(mktemp -d)
    mkdir -p "$stage/wheels" "$PARTS_DIR/fi"
    python3 -m pip download -q --no-deps --only-binary=:all: "${PY[@]}" -d "$stage/wheels" "${FI_WHEELS[@]}" >&2 \
        || { rm -rf "$stage"; return 1; }
    tar cf - -C "$stage" . | xz -1 -T0 > "$PARTS_DIR/fi/part.tar.xz" || { rm -rf "$stage"; return 1; }
    rm -rf "$stage"
    echo "fi: $(du -h "$PARTS_DIR/fi/part.tar.xz" | cut -f1)"
}

# The registry part (issue 47): the ORAS client the plugin pulls oci:// bundles with, with the
# dependencies the GPU image lacks (jsonschema and its own, which oras imports: bench/RESULTS.md part AD;
# requests and urllib3 are in the image), and the CNCF
# distribution registry's binary from Debian's docker-registry package, taken out of the .deb here (the
# GPU machine has no network and maybe no dpkg) into registry-bin/, where no later `pip --target
# --upgrade` of a wheel with scripts replaces it (a wheel's bin/ would, part AD).
REGISTRY_WHEELS=(oras==0.2.43 jsonschema==4.25.1 jsonschema-specifications==2025.9.1 referencing==0.36.2 rpds-py==0.27.1)
pack_registry() {
    [ -f "$PARTS_DIR/registry/part.tar.xz" ] && [ -z "${FORCE:-}" ] && { echo "registry: kept (FORCE=1 rebuilds)"; return; }
    local stage
    stage=$(mktemp -d)
    mkdir -p "$stage/wheels" "$stage/deb" "$stage/registry-bin" "$PARTS_DIR/registry"
    python3 -m pip download -q --no-deps "${PY[@]}" -d "$stage/wheels" "${REGISTRY_WHEELS[@]}" >&2 \
        && (cd "$stage/deb" && apt-get download docker-registry >/dev/null 2>&1) \
        && dpkg-deb -x "$stage"/deb/docker-registry_*.deb "$stage/deb/root" \
        && cp "$stage/deb/root/usr/bin/docker-registry" "$stage/registry-bin/" \
        || { echo "registry: pip download or apt-get download docker-registry failed" >&2; rm -rf "$stage"; return 1; }
    rm -rf "$stage/deb"
    tar cf - -C "$stage" . | xz -1 -T0 > "$PARTS_DIR/registry/part.tar.xz" || { rm -rf "$stage"; return 1; }
    rm -rf "$stage"
    echo "registry: $(du -h "$PARTS_DIR/registry/part.tar.xz" | cut -f1)"
}

sizes() {
    local part f n
    for part in $ALL_PARTS fi mla registry; do
        for f in "$PARTS_DIR/$part"/part.tar.xz "$PARTS_DIR/$part"/*.whl; do
            [ -f "$f" ] || continue
            n=$(stat -c %s "$f")
            awk -v p="$part" -v n="$n" -v f="$f" 'BEGIN { printf "%-7s %6.1f MiB  %s\n", p, n / 1048576, f }'
        done
    done
    git ls-files -z | xargs -0 stat -c %s 2>/dev/null \
        | awk '{ s += $1 } END { printf "repo    %6.1f MiB  (tracked files: they travel with every call)\n", s / 1048576 }'
}

# The sha256 of what a part installs from (the tarball, or the plugin wheel).
part_source() {
    if [ "$1" = plugin ]; then
        local found=("$PARTS_DIR"/plugin/warmup_planner-*.whl)
        [ -f "${found[0]}" ] && echo "${found[0]}"
    else
        echo "$PARTS_DIR/$1/part.tar.xz"
    fi
}

install_part() {
    local part=$1 src
    part_files "$part" >/dev/null || { echo "vllm_gpu_setup: no part '$part' (core, ext, py, plugin, fi, mla, registry)" >&2; return 1; }
    local site
    site=$(part_site "$part")
    src=$(part_source "$part")
    if [ -z "$src" ] || [ ! -f "$src" ]; then
        echo "vllm_gpu_setup: $PARTS_DIR/$part not carried (carry [\"$PARTS_DIR/$part\"])" >&2
        return 1
    fi
    mkdir -p "$VLLM_SITE" "$MARKERS"
    rm -f "$MARKERS/$part"
    if [ "$part" = plugin ]; then
        python3 -m pip install -q --no-index --no-deps --upgrade --target "$VLLM_SITE" "$src" || return 1
        cp "$PARTS_DIR/plugin/BUILD" "$VLLM_SITE/warmup_planner.BUILD" 2>/dev/null
    else
        mkdir -p "$site"
        xz -dc "$src" | tar x -C "$site" || return 1
        if [ -d "$site/wheels" ]; then
            python3 -m pip install -q --no-index --no-deps --upgrade --target "$site" "$site"/wheels/*.whl \
                || return 1
            rm -rf "$site/wheels"
        fi
        # Byte-compile vLLM once here, so that the first run on the machine does not pay for it
        # (a cold/warm comparison would otherwise charge it to whichever run came first).
        [ "$part" = py ] && python3 -m compileall -q -j 0 "$VLLM_SITE/vllm" >/dev/null
    fi
    sha256sum "$src" | cut -d' ' -f1 > "$MARKERS/$part"
    echo "installed $part into $site ($(du -sh "$site" | cut -f1))"
}

# check [PART...]: one line, each part ok / MISSING / stale; exit 1 when one is missing.
check() {
    local parts=("$@") part f line="vllm_gpu_setup check: $VLLM_SITE" bad=0 missing src note
    [ ${#parts[@]} -gt 0 ] || read -r -a parts <<< "$ALL_PARTS"
    for part in "${parts[@]}"; do
        part_files "$part" >/dev/null || { line+=" | $part: no such part"; bad=1; continue; }
        missing=""
        [ -f "$MARKERS/$part" ] || missing="not installed"
        if [ -z "$missing" ]; then
            for f in $(part_files "$part"); do
                [ -e "$(part_site "$part")/$f" ] || { missing="$f absent"; break; }
            done
        fi
        if [ "$part" = plugin ] && [ -z "$missing" ]; then
            compgen -G "$VLLM_SITE/warmup_planner-*.dist-info/entry_points.txt" >/dev/null \
                && grep -q '^\[vllm.general_plugins\]' "$VLLM_SITE"/warmup_planner-*.dist-info/entry_points.txt \
                || missing="no vllm.general_plugins entry point"
        fi
        if [ -n "$missing" ]; then
            line+=" | $part MISSING ($missing)"; bad=1; continue
        fi
        note=""
        src=$(part_source "$part")
        if [ -n "$src" ] && [ -f "$src" ] && [ "$(sha256sum "$src" | cut -d' ' -f1)" != "$(cat "$MARKERS/$part")" ]; then
            note=" (stale: the carried $part differs; install it again)"
        fi
        [ "$part" = plugin ] && [ -f "$VLLM_SITE/warmup_planner.BUILD" ] \
            && note+=" ($(head -n1 "$VLLM_SITE/warmup_planner.BUILD"))"
        line+=" | $part ok$note"
    done
    echo "$line"
    return $bad
}

case "${1:-}" in
    prepare) prepare ;;
    plugin) build_plugin ;;
    part) shift; [ $# -gt 0 ] || { echo "part which: core, ext, py, plugin, fi, mla, registry" >&2; exit 2; }
          for p in "$@"; do build_part "$p" || exit 1; done ;;
    sizes) sizes ;;
    install)
        shift
        [ $# -gt 0 ] || { echo "install which parts: core, ext, py, plugin (fi, mla, registry: optional)" >&2; exit 2; }
        for p in "$@"; do install_part "$p" || exit 1; done ;;
    check) shift; check "$@" ;;
    env) _vgs_env; echo "export PYTHONPATH=$PYTHONPATH${VLLM_USE_FLASHINFER_SAMPLER:+ VLLM_USE_FLASHINFER_SAMPLER=$VLLM_USE_FLASHINFER_SAMPLER}"
         echo "(executed, not sourced: this shell is unchanged; use: source bench/vllm_gpu_setup.sh env)" >&2 ;;
    *) echo "usage: bench/vllm_gpu_setup.sh prepare | plugin | part PART... | sizes | install PART... | check [PART...] | env (sourced)" >&2
       exit 2 ;;
esac
