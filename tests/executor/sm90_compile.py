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
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

from executor.kernels import configs  # noqa: E402
from executor.kernels import fp8_gemm as gemm  # noqa: E402
from executor.kernels import grouped_gemm as grouped  # noqa: E402
from executor.kernels import prefill_attention as attn  # noqa: E402


class OfflineDriver:
    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


COMPILES: list[str] = []


def record(kernel: str, case: dict, precompile) -> None:
    """Run one ``precompile`` thunk; ``new`` says whether it missed the in-memory cache."""
    before = len(COMPILES)
    compiled = precompile()
    print(json.dumps({"kernel": kernel, **case, "shared": compiled.metadata.shared,
                      "new": len(COMPILES) > before, "key": COMPILES[-1] if COMPILES else ""}), flush=True)


def main() -> None:
    driver.set_active(OfflineDriver())
    knobs.runtime.jit_cache_hook = lambda **kw: COMPILES.append(kw["key"]) and None

    N, K = 4096, 7168
    inputs = gemm.alloc_gemm_inputs(4096, N, K, "cpu")
    for config in configs.CANDIDATE_CONFIGS:
        record("fp8_gemm", {"M": 1000, "config": configs.config_key(config)},
               lambda: gemm.precompile(1000, N, K, "cpu", inputs, config))
    for M in (1, 16, 17, 33, 4096):  # default configs: one compile per distinct config
        record("fp8_gemm", {"M": M, "config": configs.config_key(gemm.resolve_config(M, N, K, "cpu"))},
               lambda: gemm.precompile(M, N, K, "cpu", inputs))
    record("fp8_gemm", {"M": 17, "N": 1000, "K": 640}, lambda: gemm.precompile(17, 1000, 640, "cpu"))

    g_inputs = grouped.alloc_grouped_inputs(4096, N, K, 2, "cpu")
    for M in (128, 1024, 4096, 384):
        record("grouped_fp8_gemm", {"M": M}, lambda: grouped.precompile(M, N, K, 2, "cpu", inputs=g_inputs))

    a_inputs = {}
    for D in (64, 80, 96, 128, 192, 256, 576):
        a_inputs[D] = attn.alloc_attention_inputs(256, 8, 2, D, torch.bfloat16, "cpu")
        record("prefill_attention", {"D": D},
               lambda: attn.precompile(256, 8, 2, D, inputs=a_inputs[D], device="cpu"))
    for n in (1, 16, 17, 255):  # token counts: no new compile
        record("prefill_attention", {"D": 128, "tokens": n},
               lambda: attn.precompile(n, 8, 2, 128, inputs=a_inputs[128], device="cpu"))
    for left in (16, 17, 1000):  # window sizes: one compile for all
        record("prefill_attention", {"D": 128, "window": left, "softcap": 30.0},
               lambda: attn.precompile(256, 8, 2, 128, inputs=a_inputs[128], device="cpu",
                                       sliding_window=(left, -1), softcap=30.0))
    fp16 = attn.alloc_attention_inputs(64, 8, 2, 128, torch.float16, "cpu")
    record("prefill_attention", {"D": 128, "dtype": "float16"},
           lambda: attn.precompile(64, 8, 2, 128, inputs=fp16, device="cpu"))


if __name__ == "__main__":
    main()
