#!/usr/bin/env bash
# Build upstream deepseek-ai/DeepGEMM 2.6.1 (54e2261; cutlass f3fde58, fmt 553ec11), the version
# kernel_model/deep_gemm.py was first checked against, for the GPU machine's torch (2.11+cu130).
# No registry wheel of that version runs there; vLLM's own copies (2.5.0, 2.8.1) come from its
# wheels instead (bench/deep_gemm_setup.sh). Two steps, because the GPU machine has no network:
#
#   bash bench/deep_gemm_build.sh prepare     # here: .dg/src-2.6.1.tar.xz (1.2 MB) from git
#   DEEP_GEMM_SETUP=bench/deep_gemm_build.sh PARTS=... bash bench/gpu_all.sh   # on the GPU
#
# Sourced (what gpu_all.sh does with $DEEP_GEMM_SETUP), or run with `install`, it unpacks the
# sources into $DG_PREFIX, builds `deep_gemm._C` in place (about a minute) and puts $DG_PREFIX/src
# on PYTHONPATH. Sources come from DG_REPO / CUTLASS_REPO / FMT_REPO (git directories; the
# defaults are this workplace's mirrors, else GitHub is cloned).
#
# Why the link flags: torch 2.11's libtorch_cpu.so exports libstdc++'s own locale/regex symbols;
# an extension that links libstdc++ dynamically binds to those and DeepGEMM's first JIT call
# crashed in std::regex (bench/RESULTS.md part D). A private static libstdc++ does not.

DG_COMMIT=54e2261
CUTLASS_COMMIT=f3fde58372d33e9a5650ba7b80fc48b3b49d40c8
FMT_COMMIT=553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28
DG_TARBALL=${DG_TARBALL:-.dg/src-2.6.1.tar.xz}
DG_PREFIX=${DG_PREFIX:-/tmp/dg-2.6.1}

_dg_repo() {  # _dg_repo VAR DEFAULT_MIRROR URL: a git directory holding the sources
    local given=$1 mirror=$2 url=$3
    if [ -n "$given" ]; then echo "$given"; return; fi
    if [ -d "$mirror" ]; then echo "$mirror"; return; fi
    local dir
    dir=$(mktemp -d)/repo.git
    git clone -q --bare "$url" "$dir" && echo "$dir"
}

dg_prepare() {
    local work
    work=$(mktemp -d)
    mkdir -p "$work/src/third-party/cutlass" "$work/src/third-party/fmt" "$(dirname "$DG_TARBALL")"
    git -C "$(_dg_repo "${DG_REPO:-}" /work/.mirror/deepseek-ai+DeepGEMM/repo \
        https://github.com/deepseek-ai/DeepGEMM.git)" archive "$DG_COMMIT" csrc deep_gemm setup.py \
        | tar x -C "$work/src" || return 1
    git -C "$(_dg_repo "${CUTLASS_REPO:-}" /work/.mirror/NVIDIA+cutlass/repo \
        https://github.com/NVIDIA/cutlass.git)" archive "$CUTLASS_COMMIT" include \
        | tar x -C "$work/src/third-party/cutlass" || return 1
    git -C "$(_dg_repo "${FMT_REPO:-}" /work/.mirror/fmtlib+fmt/repo \
        https://github.com/fmtlib/fmt.git)" archive "$FMT_COMMIT" include \
        | tar x -C "$work/src/third-party/fmt" || return 1
    tar cJf "$DG_TARBALL" -C "$work" src && rm -rf "$work"
    echo "wrote $DG_TARBALL ($(du -h "$DG_TARBALL" | cut -f1))"
}

dg_install() {
    [ -f "$DG_TARBALL" ] || { echo "deep_gemm_build: $DG_TARBALL missing (run 'prepare' and carry .dg)" >&2; return 1; }
    if ! ls "$DG_PREFIX"/src/deep_gemm/_C*.so >/dev/null 2>&1; then
        rm -rf "$DG_PREFIX" && mkdir -p "$DG_PREFIX" && tar xJf "$DG_TARBALL" -C "$DG_PREFIX" || return 1
        # The JIT compiles against cute/cutlass from inside the package, as DeepGEMM's build_py lays out.
        cp -r "$DG_PREFIX/src/third-party/cutlass/include/cute" "$DG_PREFIX/src/third-party/cutlass/include/cutlass" \
            "$DG_PREFIX/src/deep_gemm/include/"
        (cd "$DG_PREFIX/src" && python3 - <<'PY') > "$DG_PREFIX/build.log" 2>&1 || { tail -n 30 "$DG_PREFIX/build.log" >&2; return 1; }
import setuptools, torch
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension

flags = ["-std=c++17", "-O3", "-fPIC", "-Wno-psabi", "-Wno-deprecated-declarations",
         f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}"]
ext = CUDAExtension(
    "deep_gemm._C", ["csrc/python_api.cpp"],
    include_dirs=[f"{CUDA_HOME}/include", f"{CUDA_HOME}/include/cccl", "deep_gemm/include",
                  "third-party/cutlass/include", "third-party/fmt/include"],
    libraries=["cudart", "nvrtc"], library_dirs=[f"{CUDA_HOME}/lib64"], extra_compile_args=flags,
    extra_link_args=["-static-libstdc++", "-Wl,--exclude-libs,ALL"])
setuptools.setup(name="deep_gemm", ext_modules=[ext], script_args=["build_ext", "--inplace"],
                 cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)})
PY
    fi
    export PYTHONPATH="$DG_PREFIX/src${PYTHONPATH:+:$PYTHONPATH}"
    python3 -c "import deep_gemm; print('deep_gemm', deep_gemm.__version__, deep_gemm.__file__)"
}

case "${1:-install}" in
    prepare) dg_prepare ;;
    install) dg_install ;;
    *) echo "usage: bench/deep_gemm_build.sh [prepare|install]" >&2; false ;;
esac
