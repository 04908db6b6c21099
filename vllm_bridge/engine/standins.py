"""Stand-ins that let vLLM's own Python run on a machine without a GPU.

vLLM's CUDA platform imports its compiled extensions at import time and asks NVML for the
device; its flash-attention package refuses to import without its extension; a few kernel
support queries are compiled ops. None of these change what vLLM's configuration and warmup
functions compute from a config, so they are replaced by the device facts the user gives
(`--gpu`), and nothing here runs a kernel. Facts carry over, code does not: vLLM's code is
imported and called, never copied.
"""

from __future__ import annotations

import sys
import types
from typing import NamedTuple

# Compiled modules the CUDA platform and the model registry import; empty modules suffice
# for configuration, as no kernel is launched.
COMPILED_MODULES = ("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch",
                    "vllm.vllm_flash_attn._vllm_fa2_C", "vllm.vllm_flash_attn._vllm_fa3_C")


# Compiled ops that vLLM's compilation passes name at import as pattern-match targets
# (vllm/compilation/passes/fusion/matcher_utils.py, rms_quant_fusion.py, 0.25.0 and 0.33.0). With
# FlashInfer installed and TP > 1, VllmConfig's compile ranges import the allreduce fusion pass,
# which imports them; on the GPU machine every CUDA build registers them. Never called here.
PATTERN_OPS = ("rotary_embedding", "static_scaled_fp8_quant", "dynamic_scaled_fp8_quant",
               "dynamic_per_token_scaled_fp8_quant", "silu_and_mul", "fused_add_rms_norm",
               "rms_norm_static_fp8_quant", "fused_add_rms_norm_static_fp8_quant",
               "rms_norm_dynamic_per_token_quant", "rms_norm_per_block_quant")


class PatternOp:
    """A compiled op's overload packet as a pattern names it: `.default`, which refuses a call."""

    def __init__(self, name: str):
        self.name = name
        self.default = self

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"torch.ops._C.{self.name} is a stand-in (vllm_bridge/engine/standins.py): no kernel runs here")


class Device(NamedTuple):
    """What vLLM would read from NVML: the facts of the GPU the engine is planned for."""

    name: str                # as NVML names it, e.g. "NVIDIA H100 80GB HBM3"
    capability: tuple        # (major, minor)
    total_memory: int        # bytes
    num_sms: int
    count: int = 8


def install(device: Device) -> None:
    """Make `vllm.platforms.current_platform` a CUDA platform with `device`'s facts.

    Call before anything imports vLLM's config or model modules."""
    for name in COMPILED_MODULES:
        sys.modules.setdefault(name, types.ModuleType(name))
    import torch

    # cutlass_scaled_mm_supports_{fp8,block_fp8} are compiled queries of the capability
    # (csrc/quantization/w8a8/cutlass: FP8 from SM 8.9, block FP8 from SM 9.0).
    torch.ops._C.cutlass_scaled_mm_supports_fp8 = lambda cap: cap >= 89
    torch.ops._C.cutlass_scaled_mm_supports_block_fp8 = lambda cap: cap >= 90
    for name in PATTERN_OPS:
        if not hasattr(torch.ops._C, name):
            setattr(torch.ops._C, name, PatternOp(name))
    _activate_triton_cuda_driver()
    import vllm.platforms as platforms

    platforms._current_platform = _platform_class(device)()


def _activate_triton_cuda_driver() -> None:
    """vLLM uses Triton only where a Triton GPU driver is active (vllm/triton_utils/importing.py);
    on the GPU machine Triton's CUDA driver is, so say so here (nothing is compiled or launched)."""
    try:
        from triton.backends import backends
    except ImportError:
        return
    if "nvidia" in backends and backends["nvidia"].driver is not None:
        backends["nvidia"].driver.is_active = staticmethod(lambda: True)


def _platform_class(device: Device):
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    class StandInCudaPlatform(CudaPlatformBase):
        """vLLM's CUDA platform, answering device queries from `device` instead of NVML."""

        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return DeviceCapability(*device.capability)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return device.name

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return device.total_memory

        @classmethod
        def get_device_uuid(cls, device_id: int = 0) -> str:
            return f"GPU-standin-{device_id}"

        @classmethod
        def device_count(cls) -> int:
            return device.count

        @classmethod
        def is_fully_connected(cls, device_ids) -> bool:
            return True

    return StandInCudaPlatform
