"""Compile the executor's kernels for sm_90 (H100) without a GPU; prints one JSON line per variant.

Run in a fresh process without TRITON_INTERPRET (test_kernels_compile.py does). A
stand-in driver answers "device 0, target cuda:90", so ``JITFunction.warmup`` runs
Triton's real binder and compiler (TTIR -> cubin with the bundled ptxas); nothing is
launched or loaded. Each line holds the in-memory cache key, which shows what Triton
specialized, and the variant's shared memory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from triton import knobs  # noqa: E402

from execlib import config_key  # noqa: E402 - this script's directory is on sys.path
from executor.kernels import configs  # noqa: E402
from executor.kernels import fp8_gemm as gemm  # noqa: E402
from executor.kernels import grouped_gemm as grouped  # noqa: E402
from executor.kernels import prefill_attention as attn  # noqa: E402
from executor.kernels.jit import fp8_gemm as jit_gemm  # noqa: E402
from executor.kernels.jit import stand_in  # noqa: E402
from executor.kernels.jit import grouped_gemm as jit_grouped  # noqa: E402
from executor.kernels.jit import prefill_attention as jit_attn  # noqa: E402


COMPILES: list[str] = []


def record(kernel: str, case: dict, precompile, stand_in=None) -> None:
    """Run one ``precompile`` thunk; ``new`` says whether it missed the in-memory cache.
    ``stand_in`` compiles the same call from stand-ins: it must hit that cache entry."""
    before = len(COMPILES)
    compiled = precompile()
    row = {"kernel": kernel, **case, "shared": compiled.metadata.shared,
           "new": len(COMPILES) > before, "key": COMPILES[-1] if COMPILES else ""}
    if stand_in is not None:
        after = len(COMPILES)
        row["stand_in_same"] = stand_in() is compiled and len(COMPILES) == after
    print(json.dumps(row), flush=True)


def main() -> None:
    stand_in.use_offline_driver(90)  # what precompile workers run under
    knobs.runtime.jit_cache_hook = lambda **kw: COMPILES.append(kw["key"]) and None

    N, K = 4096, 7168
    inputs = gemm.alloc_gemm_inputs(4096, N, K, "cpu")
    for config in configs.CANDIDATE_CONFIGS:
        record("fp8_gemm", {"M": 1000, "config": config_key(config)},
               lambda: gemm.precompile(1000, N, K, "cpu", inputs, config),
               lambda: jit_gemm.compile_variant(1000, N, K, config))
    for M in (1, 16, 17, 33, 4096):  # default configs: one compile per distinct config
        config = gemm.resolve_config(M, N, K, "cpu")
        record("fp8_gemm", {"M": M, "config": config_key(config)},
               lambda: gemm.precompile(M, N, K, "cpu", inputs), lambda: jit_gemm.compile_variant(M, N, K, config))
    record("fp8_gemm", {"M": 17, "N": 1000, "K": 640}, lambda: gemm.precompile(17, 1000, 640, "cpu"),
           lambda: jit_gemm.compile_variant(17, 1000, 640, gemm.resolve_config(17, 1000, 640, "cpu")))

    g_inputs = grouped.alloc_grouped_inputs(4096, N, K, 2, "cpu")
    for M in (128, 1024, 4096, 384):
        record("grouped_fp8_gemm", {"M": M}, lambda: grouped.precompile(M, N, K, 2, "cpu", inputs=g_inputs),
               lambda: jit_grouped.compile_variant(M, N, K, 2, 128, grouped.grouped_config(M, N, K, 128)))

    a_inputs = {}
    for D in (64, 80, 96, 128, 192, 256, 576):
        a_inputs[D] = attn.alloc_attention_inputs(256, 8, 2, D, torch.bfloat16, "cpu")
        record("prefill_attention", {"D": D},
               lambda: attn.precompile(256, 8, 2, D, inputs=a_inputs[D], device="cpu"),
               lambda: jit_attn.compile_variant(256, 8, 2, D))
    for n in (1, 16, 17, 255):  # token counts: no new compile
        record("prefill_attention", {"D": 128, "tokens": n},
               lambda: attn.precompile(n, 8, 2, 128, inputs=a_inputs[128], device="cpu"))
    for left in (16, 17, 1000):  # window sizes: one compile for all
        record("prefill_attention", {"D": 128, "window": left, "softcap": 30.0},
               lambda: attn.precompile(256, 8, 2, 128, inputs=a_inputs[128], device="cpu",
                                       sliding_window=(left, -1), softcap=30.0),
               lambda: jit_attn.compile_variant(256, 8, 2, 128, sliding_window=(left, -1), softcap=30.0))
    fp16 = attn.alloc_attention_inputs(64, 8, 2, 128, torch.float16, "cpu")
    record("prefill_attention", {"D": 128, "dtype": "float16"},
           lambda: attn.precompile(64, 8, 2, 128, inputs=fp16, device="cpu"),
           lambda: jit_attn.compile_variant(64, 8, 2, 128, dtype="float16"))


if __name__ == "__main__":
    main()
