"""The kernels of the TensorRT-LLM DeepGEMM inside FlashInfer's ``fp8_blockscale_gemm_90`` (vLLM's
block-FP8 linears at M < 32 on SM 9.0), which it compiles with nvcc at first call into
``<root>/cache/<name>/`` and finds there at the next start
(flashinfer/data/csrc/nv_internal/tensorrt_llm/deep_gemm/compiler.cuh: the name is the GEMM's shape
and tiling, no path or hash). Without them a fresh machine stalled 8.5 s inside the CUDA-graph
capture recompiling them (bench/RESULTS.md part Y).

- Lives in: TRTLLM_DG_CACHE_DIR, else ``$HOME/.tensorrt_llm``, else ``<tmp>/tensorrt_llm``
  (compiler.cuh getDefaultUserDir).
- Packs: ``cache/`` only (``tmp/`` is the compiler's scratch). Relocates: nothing to move: the kernel
  is found by its directory's name; paths inside are its compile's. Checks: cubins are whole.
"""

from __future__ import annotations

import os
import tempfile

from . import checks
from .family import Family, PathRule, Placing
from .tree import Placed, collect_tree, place_tree


def root(env) -> str:
    if env.environ.get("TRTLLM_DG_CACHE_DIR"):
        return env.environ["TRTLLM_DG_CACHE_DIR"]
    home = env.environ.get("HOME")
    return os.path.join(home, ".tensorrt_llm") if home else os.path.join(tempfile.gettempdir(), "tensorrt_llm")


def collect(root_dir: str, fingerprint: dict) -> tuple[dict, list]:
    return collect_tree(os.path.join(root_dir, "cache"), "flashinfer_trtllm_dg/cache"), []


def place(p: Placing) -> Placed:
    return place_tree(p.staged, p.dest, p.move)


FAMILY = Family(
    name="flashinfer_trtllm_dg", label="FlashInfer TensorRT-LLM DeepGEMM", root=root, collect=collect, place=place,
    paths=(PathRule(lambda rel, path: True, None,
                    "the kernel is found by its directory's name; paths inside are its compile's"),),
    check=checks.file_check)
