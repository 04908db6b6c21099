# FlashInfer on the device machine, from carried wheels (it has no network). Source it:
#
#   source bench/flashinfer_setup.sh        # from the repository root, wheels in .whl-fi/
#
# It installs what the machine lacks into /tmp/site (kept while the machine stays warm), puts
# /tmp/site first on PYTHONPATH and the repository after it, points FlashInfer's JIT workspace
# at /tmp/fi-ws and, when the CUDA toolkit has no libcublas.so to link against, links the cuBLAS
# of torch's wheels. Everything it did goes to $FI_SETUP_LOG (default /tmp/fi-setup.log).
#
# The wheels (19.9 MiB together), each with the exact pip line that fetches it (here, on a
# machine with PyPI; echo /.whl-fi/ >> .git/info/exclude once):
#
#   P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d .whl-fi"
#   M="--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64"
#   python3 -m pip download $P flashinfer-python==0.6.16.post3       # 15.8 MB, pure Python + sources
#   python3 -m pip download $P $M apache-tvm-ffi==0.1.15.post2        # 3.3 MB, cp312
#   python3 -m pip download $P nvidia-ml-py==13.615.71 tqdm==4.70.1 requests==2.34.2 \
#       urllib3==2.8.0 idna==3.20 certifi==2026.10.18 packaging==26.3 # < 1 MB together
#   python3 -m pip download $P --platform manylinux2014_x86_64 ninja==1.13.2   # 0.2 MB, only
#                                           # installed where the machine has no ninja of its own
#
# That is the smallest set `import flashinfer` needs (found with CPU torch: apache-tvm-ffi for
# the JIT modules, pynvml, tqdm and requests at import); the GPU image lacked only flashinfer-python
# and apache-tvm-ffi (bench/RESULTS.md part F). Left out, and not needed for the
# autotuner and FP8 GEMM: cuda-python, cuda-tile, nccl4py, nvidia-cutlass-dsl (CuTe-DSL
# kernels), nvidia-cudnn-frontend (cuDNN GEMM runners), einops, click, tabulate. The machine's
# own nvcc and ninja build the JIT modules.
_fi_log=${FI_SETUP_LOG:-/tmp/fi-setup.log}
_fi_whl=${FI_WHEELS:-.whl-fi}
: > "$_fi_log"
_fi_need=()
for _w in "$_fi_whl"/*.whl; do
    _base=$(basename "$_w")
    case "$_base" in
        flashinfer_python-*|apache_tvm_ffi-*) _fi_need+=("$_w"); continue ;;
        nvidia_ml_py-*) _mod=pynvml ;;
        ninja-*) if command -v ninja >/dev/null; then
                     echo "present on the machine: ninja $(ninja --version) (not installing $_base)" >> "$_fi_log"
                 else _fi_need+=("$_w"); fi
                 continue ;;
        *) _mod=${_base%%-*} ;;
    esac
    if python3 -c "import $_mod" 2>/dev/null; then
        echo "present on the machine: $_mod (not installing $_base)" >> "$_fi_log"
    else
        _fi_need+=("$_w")
    fi
done
if [ ! -d /tmp/site/flashinfer ] || [ "${FI_REINSTALL:-0}" = 1 ]; then
    echo "installing: ${_fi_need[*]##*/}" >> "$_fi_log"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "${_fi_need[@]}" >> "$_fi_log" 2>&1 || echo "pip install FAILED" >> "$_fi_log"
else
    echo "already installed in /tmp/site (warm machine)" >> "$_fi_log"
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
[ -x /tmp/site/bin/ninja ] && export PATH=/tmp/site/bin:$PATH
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/fi-ws}
export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-/tmp/fi-ws/tvm-ffi}
export PYTHONUNBUFFERED=1
command -v nvcc >/dev/null && export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
echo "nvcc: $(command -v nvcc) CUDA_HOME=${CUDA_HOME:-?} ninja: $(command -v ninja) $(ninja --version 2>/dev/null)" >> "$_fi_log"
if [ ! -e "${CUDA_HOME:-/nonexistent}/lib64/libcublasLt.so" ]; then
    _cublas_dir=$(python3 - <<'EOF'
import glob, os, site
for root in site.getsitepackages():
    hits = sorted(glob.glob(os.path.join(root, "nvidia", "**", "libcublasLt.so*"), recursive=True))
    if hits:
        print(os.path.dirname(hits[0])); break
EOF
)
    if [ -n "$_cublas_dir" ]; then
        mkdir -p /tmp/fi-lib
        ln -sf "$(ls "$_cublas_dir"/libcublas.so* | head -n1)" /tmp/fi-lib/libcublas.so
        ln -sf "$(ls "$_cublas_dir"/libcublasLt.so* | head -n1)" /tmp/fi-lib/libcublasLt.so
        export FLASHINFER_EXTRA_LDFLAGS="-L/tmp/fi-lib -Wl,-rpath,$_cublas_dir"
        echo "no libcublasLt.so in \$CUDA_HOME/lib64: linking torch's $_cublas_dir" >> "$_fi_log"
    else
        echo "no libcublasLt.so found in \$CUDA_HOME/lib64 nor in torch's nvidia wheels" >> "$_fi_log"
    fi
fi
python3 -c "import flashinfer, tvm_ffi; print('flashinfer', flashinfer.__version__, 'tvm_ffi', tvm_ffi.__version__)" \
    >> "$_fi_log" 2>&1 || echo "import flashinfer FAILED" >> "$_fi_log"
unset _fi_need _w _base _mod _cublas_dir
