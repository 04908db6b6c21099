#!/usr/bin/env bash
# DeepGEMM as vLLM users have it, for the GPU machine (no internet there): the copies vLLM's
# wheels vendor (vllm/third_party/deep_gemm), run as a top-level `deep_gemm`.
#
#   bash bench/deep_gemm_setup.sh prepare        # here: .dg/2.5.0.tar.xz and .dg/2.8.1.tar.xz from the
#                                                # wheels in $WHEELS (default /work/cache/vllm); carry .dg
#   DG_VERSION=2.8.1 source bench/deep_gemm_setup.sh   # on the GPU: unpack under $DG_ROOT/<version>
#                                                # (default /tmp/dg) and put it first on PYTHONPATH
#
# DG_VERSION=2.6.1 is upstream deepseek-ai/DeepGEMM 54e2261, built on the GPU machine by
# bench/deep_gemm_build.sh (about 85 s; `prepare` here also packs its sources, .dg/src-2.6.1.tar.xz).
#
# vLLM 0.25.0 vendors DeepGEMM 2.5.0 (one _C per Python version: only cp312's is kept, the GPU
# machine runs Python 3.12), vLLM 0.33.0 vendors 2.8.1 (one _C_extension.abi3.so). Only the
# deep_gemm package is taken from each wheel; nothing of it enters the repository (.dg is
# excluded from git). DG_ROOT picks the install path: a second path (DG_ROOT=/tmp/dg-elsewhere)
# is how the bundle proof installs "from a different install path".
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHEELS=${WHEELS:-/work/cache/vllm}
declare -A WHEEL=([2.5.0]=vllm-0.25.0-cp38-abi3-manylinux_2_28_x86_64.whl
                  [2.8.1]=vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl)

dg_prepare() {
    local version wheel tmp
    mkdir -p "$HERE/.dg"
    local exclude
    exclude="$(git -C "$HERE" rev-parse --git-common-dir)/info/exclude"
    grep -qx '/.dg/' "$exclude" 2>/dev/null || echo '/.dg/' >> "$exclude"
    grep -qx '/.bundles/' "$exclude" 2>/dev/null || echo '/.bundles/' >> "$exclude"  # bundles carried back
    for version in "${!WHEEL[@]}"; do
        wheel=$WHEELS/${WHEEL[$version]}
        [ -f "$wheel" ] || { echo "missing $wheel" >&2; return 1; }
        tmp=$(mktemp -d)
        unzip -q "$wheel" 'vllm/third_party/deep_gemm/*' -d "$tmp"
        find "$tmp/vllm/third_party/deep_gemm" -name '_C.cpython-*.so' ! -name '*cpython-312*' -delete
        tar -C "$tmp/vllm/third_party" -cJf "$HERE/.dg/$version.tar.xz" deep_gemm
        rm -rf "$tmp"
        echo "$HERE/.dg/$version.tar.xz: $(du -h "$HERE/.dg/$version.tar.xz" | cut -f1)"
    done
    (cd "$HERE" && bash bench/deep_gemm_build.sh prepare)
}

dg_build_261() {  # upstream 2.6.1 is built, not unpacked: no wheel of it runs on torch 2.11
    local root=$1
    (cd "$HERE" && DG_PREFIX=$root/2.6.1 DG_TARBALL=$HERE/.dg/src-2.6.1.tar.xz \
        bash bench/deep_gemm_build.sh install >&2) || return 1
    export PYTHONPATH="$root/2.6.1/src${PYTHONPATH:+:$PYTHONPATH}"
    echo "deep_gemm_setup: DeepGEMM 2.6.1 at $root/2.6.1/src/deep_gemm"
}

dg_select() {
    local version=${DG_VERSION:?set DG_VERSION=2.5.0, 2.6.1 or 2.8.1} root=${DG_ROOT:-/tmp/dg}
    [ "$version" = 2.6.1 ] && { dg_build_261 "$root"; return; }
    local archive=$HERE/.dg/$version.tar.xz
    [ -f "$archive" ] || { echo "deep_gemm_setup: $archive missing (carry .dg)" >&2; return 1; }
    if [ ! -f "$root/$version/deep_gemm/__init__.py" ]; then
        mkdir -p "$root/$version" && tar -C "$root/$version" -xJf "$archive"
    fi
    export PYTHONPATH="$root/$version${PYTHONPATH:+:$PYTHONPATH}"
    echo "deep_gemm_setup: DeepGEMM $version at $root/$version/deep_gemm"
}

if [ "${1:-}" = prepare ]; then
    dg_prepare
else
    dg_select
fi
