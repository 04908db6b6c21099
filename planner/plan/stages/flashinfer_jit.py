"""flashinfer_jit_modules: the FlashInfer JIT modules an engine builds at first use, built ahead.

kernel_model.flashinfer_jit says which modules the engine reaches (its block-FP8 linears' kernels
and its sampler) and names each module's JitSpec generator. One Kernel step holds them, a
variant per module keyed ``flashinfer.jit[<name>]``; its backend, `flashinfer_jit`, builds the
module (nvcc through FlashInfer's ninja) into FlashInfer's workspace, where vLLM's first call
then only loads it.
"""

from __future__ import annotations

from kernel_model import flashinfer_jit

from ...engine.queries import block_fp8_linears
from ..steps import Kernel, Variant
from .scope import Scope


def expand(scope: Scope) -> list:
    names = scope.names
    kernels = {linear.kernel for linear in block_fp8_linears(scope.engine.facts)}
    samples = not names["is_pooling_model"] and names["is_last_pp_rank"]  # only such a rank samples
    modules = flashinfer_jit.modules(kernels, names["sampler"] if samples else "none", names["device_capability"])
    if not modules:
        return []
    return [scope.new(Kernel, "flashinfer_jit", backend="flashinfer_jit", kernel=flashinfer_jit.KERNEL,
                      variants=tuple(Variant(module.key(), module) for module in modules))]
