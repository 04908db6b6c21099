"""What vLLM 0.25.0's own code says of its top-k/top-p sampler kernel, for tests/kernel_model/test_vllm_sampler.py.

Run in a subprocess whose sys.path holds the release (`python sampler_oracle.py < cases.json`).
With the CUDA stand-ins of vllm_bridge/engine/standins.py, vLLM's Triton path is live on a machine
without a GPU: this script reads ``_topk_topp_kernel``'s declaration (a Triton JITFunction), then
calls vLLM's ``apply_top_k_top_p`` on meta tensors shaped as the V2 sampler passes them, with
the kernel replaced by a recorder, so nothing compiles or runs: what the kernel would be
launched with is what vLLM's own code computes. Meta tensors take the tile sizes of CUDA (the
branch for devices other than cpu and xpu); they have no address, so the pointers' alignment is
not observed here (every pointer is a fresh allocation: kernel_model/vllm_sampler.py). Facts
carry over, code does not.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
from vllm_bridge.engine.standins import Device, install  # noqa: E402

from launch_recorder import Recorder  # noqa: E402 - beside this script (its directory is sys.path[0])

SMS = 132


def declaration(kernel) -> dict:
    """The kernel's parameters in order, which are constexprs, and what it exempts from
    specialization."""
    return {"arg_names": list(kernel.arg_names),
            "constexprs": [p.name for p in kernel.params if p.is_constexpr],
            "do_not_specialize": [kernel.arg_names[i] if isinstance(i, int) else i
                                  for i in kernel.do_not_specialize],
            "do_not_specialize_on_alignment": [kernel.arg_names[i] if isinstance(i, int) else i
                                               for i in kernel.do_not_specialize_on_alignment]}


def describe(value):
    """A tensor by its dtype name (what Triton keys a pointer by, with its alignment); other
    values as they are."""
    dtype = getattr(value, "dtype", None)
    return {"dtype": str(dtype).removeprefix("torch.")} if dtype is not None else value


def launches_of(case: dict, recorder: Recorder, sampler) -> list:
    """What one call of vLLM's apply_top_k_top_p launches: V2's fresh float32 logits copy,
    int32 top-k and float32 top-p per row, or None where no request uses them."""
    import torch

    rows, vocab = case["rows"], case["vocab_size"]
    logits = torch.empty((rows, vocab), dtype=torch.float32, device="meta")
    k = torch.empty((rows,), dtype=torch.int32, device="meta") if case["top_k"] else None
    p = torch.empty((rows,), dtype=torch.float32, device="meta") if case["top_p"] else None
    recorder.launches.clear()
    sampler.apply_top_k_top_p(logits, k, p)
    return list(recorder.launches)


def main() -> None:
    cases = json.load(sys.stdin)
    install(Device(name="NVIDIA H100 80GB HBM3", capability=(9, 0), total_memory=80 << 30, num_sms=SMS))
    with contextlib.redirect_stdout(io.StringIO()):  # vLLM logs to stdout
        import vllm
        from vllm.v1.sample.ops import topk_topp_sampler as sampler
        from vllm.v1.sample.ops import topk_topp_triton as triton_ops

        kernel = triton_ops._topk_topp_kernel
        recorder = Recorder(list(kernel.arg_names), describe)
        triton_ops._topk_topp_kernel = recorder
        triton_ops.num_compute_units = lambda device_id=0: SMS
        # The small-batch path is PyTorch's sort: record that it was taken instead of running it.
        sampler.apply_top_k_top_p_pytorch = lambda logits, k, p, allow_cpu_sync=False: logits
        results = [launches_of(case, recorder, sampler) for case in cases]
    json.dump({"version": vllm.__version__, "declaration": declaration(kernel), "launches": results},
              sys.stdout)


if __name__ == "__main__":
    main()
