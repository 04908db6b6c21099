"""What a vLLM release's own code says of its Triton fused_moe kernel, for tests/kernel_model/test_vllm_fused_moe.py.

Run in a subprocess whose sys.path holds the release (`python fused_moe_oracle.py < cases.json`).
With the CUDA stand-ins of vllm_bridge/engine/standins.py vLLM believes it runs on the case's GPU (the
device name picks the tuned table), so this script can ask vLLM's ``try_get_optimal_moe_config``
for every token count, and call vLLM's ``_prepare_expert_assignment`` and
``invoke_fused_moe_triton_kernel`` on meta tensors laid out as ``TritonExperts.apply`` lays them
out, with the kernel replaced by a recorder and the CUDA alignment op by a no-op (it fills the
buffers whose sizes are what matters): what the kernel would be launched with is what vLLM's own
code computes. Facts carry over, code does not.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
from vllm_bridge.engine.standins import Device, install  # noqa: E402

from launch_recorder import Recorder  # noqa: E402 - beside this script (its directory is sys.path[0])

CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
DEVICES = {"H100": "NVIDIA H100 80GB HBM3", "H200": "NVIDIA H200"}


def describe(value):
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "shape"):
        return {"dtype": str(dtype).removeprefix("torch.")}
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    return str(value)  # a Triton dtype constexpr (compute_type)


def use_device(name: str, fm) -> None:
    """Point the stand-in platform at another GPU name and forget the tables vLLM loaded."""
    from vllm.platforms import current_platform

    type(current_platform).get_device_name = classmethod(lambda cls, device_id=0: DEVICES[name])
    fm.get_moe_configs.cache_clear()
    try:  # 0.33 caches the name as vLLM turns it into a file name
        from vllm.utils.platform_utils import get_device_name_as_file_name
    except ImportError:
        return
    getattr(get_device_name_as_file_name, "cache_clear", lambda: None)()


def shapes(case: dict) -> tuple:
    e, h, i = case["num_experts"], case["hidden"], case["intermediate"]
    return (e, 2 * i, h), (e, h, i)


def configs(case: dict, fm) -> list:
    """vLLM's config for each token count 1..max_tokens, as six ints (missing: null)."""
    use_device(case["device"], fm)
    fp8 = case["quant"] == "fp8_block"
    w1, w2 = shapes(case)
    out = []
    for m in range(1, case["max_tokens"] + 1):
        config = fm.try_get_optimal_moe_config(w1, w2, case["top_k"], "fp8_w8a8" if fp8 else None, m,
                                               block_shape=[128, 128] if fp8 else None)
        out.append([config.get(key) for key in CONFIG_KEYS])
    return out


def launch_of(spec: dict, fm, recorder: Recorder) -> dict:
    """What vLLM launches for one GEMM of the spec's layer at its token count (meta tensors)."""
    import torch
    import triton.language as tl

    use_device(spec["device"], fm)
    fp8 = spec["quant"] == "fp8_block"
    e, h, i, k_top, m = spec["num_experts"], spec["hidden"], spec["intermediate"], spec["top_k"], spec["tokens"]
    w1, w2 = shapes(spec)
    config = fm.try_get_optimal_moe_config(w1, w2, k_top, "fp8_w8a8" if fp8 else None, m,
                                           block_shape=[128, 128] if fp8 else None)
    op = torch.float8_e4m3fn if fp8 else torch.bfloat16
    meta = dict(device="meta")
    w13 = spec["gemm"] == "w13"
    rows, n, k = (m, 2 * i, h) if w13 else (m * k_top, h, i)
    a = torch.empty(rows, k, dtype=op, **meta)
    b = torch.empty(w1 if w13 else w2, dtype=op, **meta)
    c = torch.empty(m, k_top, n, dtype=torch.bfloat16, **meta)
    a_scale = torch.empty(rows, k // 128, dtype=torch.float32, **meta) if fp8 else None
    b_scale = torch.empty(e, n // 128, k // 128, dtype=torch.float32, **meta) if fp8 else None
    topk_ids = torch.empty(m, k_top, dtype=torch.int32, **meta)
    weights = torch.empty(m, k_top, dtype=torch.float32, **meta)
    sorted_ids, expert_ids, padded = fm._prepare_expert_assignment(topk_ids, config, m, k_top, e, None)
    recorder.launches.clear()
    fm.invoke_fused_moe_triton_kernel(
        a, b, c, a_scale, b_scale, None if w13 else weights, sorted_ids, expert_ids, padded, not w13,
        k_top if w13 else 1, config, compute_type=tl.bfloat16, use_fp8_w8a8=fp8, use_int8_w8a8=False,
        use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False,
        block_shape=[128, 128] if fp8 else None)
    (launch,) = recorder.launches
    return launch


def declaration(kernel) -> dict:
    return {"arg_names": list(kernel.arg_names),
            "constexprs": [p.name for p in kernel.params if p.is_constexpr],
            "do_not_specialize": list(kernel.do_not_specialize),
            "do_not_specialize_on_alignment": list(kernel.do_not_specialize_on_alignment)}


def main() -> None:
    request = json.load(sys.stdin)
    install(Device(name=DEVICES["H100"], capability=(9, 0), total_memory=80 << 30, num_sms=132))
    with contextlib.redirect_stdout(io.StringIO()):  # vLLM logs to stdout
        import vllm
        from vllm.model_executor.layers.fused_moe import fused_moe as fm
        from vllm.model_executor.layers.fused_moe import moe_align_block_size as align

        align.ops = types.SimpleNamespace(moe_align_block_size=lambda *args: None)
        kernel = fm.fused_moe_kernel
        recorder = Recorder(list(kernel.arg_names), describe)
        fm.fused_moe_kernel = recorder
        result = {"version": vllm.__version__, "declaration": declaration(kernel),
                  "configs": [configs(case, fm) for case in request["cases"]],
                  "launches": [launch_of(spec, fm, recorder) for spec in request["launches"]]}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
