"""The machine's GPUs as NVML describes them, without a CUDA context.

The pool compiles for the GPU's target before anything creates a CUDA context: a context in
vLLM's first process would break the processes it later forks, and a worker's would hold memory
vLLM's profile counts. NVML names the GPUs and their compute capability without one.
"""

from __future__ import annotations

from kernel_model.device import sm_number


def gpu_capability() -> int | None:
    """The GPUs' compute capability (90 for sm_90) from NVML, which creates no CUDA context;
    None when unknown: no NVML, or GPUs of different capabilities (which one the main
    process will use is then CUDA's to say, and workers ask CUDA themselves)."""
    found = _nvml_gpus()
    caps = {cap for _, cap in found or ()}
    return caps.pop() if found and len(caps) == 1 else None


def gpu_name() -> str | None:
    """The GPUs' model name from NVML ('NVIDIA H100 80GB HBM3'), where every GPU is the same model."""
    found = _nvml_gpus()
    names = {name for name, _ in found or ()}
    return names.pop() if found and len(names) == 1 else None


def _nvml_gpus() -> list[tuple[str, int]] | None:
    """(name, capability) of every GPU, from NVML (no CUDA context); None where NVML cannot tell."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    out = []
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        for index in range(count.value):
            handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
            name = ctypes.create_string_buffer(96)
            if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0
                    or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0
                    or nvml.nvmlDeviceGetName(handle, name, ctypes.c_uint(96)) != 0):
                return None
            out.append((name.value.decode(errors="replace"), sm_number((major.value, minor.value))))
    finally:
        nvml.nvmlShutdown()
    return out or None
