"""Kernel dispatch models: which compiled variant a call hits, in pure Python.

A JIT kernel compiles once per *compile key*: for a Triton kernel, the launch config
chosen for the call plus the specialization class of every integer argument and its
constexprs; for DeepGEMM, the kernel configuration its heuristic picks for the
device. The planner enumerates keys over a declared range and plans one call per
key (`exact` mode); the executor launches through the same functions, so planned and
launched keys cannot drift apart.

This package is shared by the planner and the executor and imports neither (nor
torch, triton or any kernel library): both sides import it, it knows only kernels.

    arith.py           cdiv: the one ceiling division every floor uses
    device.py          a GPU's compute capability: '9.0' text, (9, 0) pair and SM number 90
    specialization.py  Triton's integer-argument specialization rule
    gemm_tables.py     launch configs of the block-FP8 GEMMs and their tuned tables
    triton_kernels.py  compile keys of the executor's own GEMM and attention kernels
    runner_kernels.py  signatures and compile keys of the reference runner's kernels
    vllm_sampler.py    compile keys of vLLM 0.25's Triton top-k/top-p sampler kernel
    deep_gemm.py       DeepGEMM's SM90 kernel selection
    dynamo_shapes.py   how Dynamo keys a torch.compile(dynamic=True) graph by its sizes
    flashinfer_jit.py  FlashInfer's JIT modules a vLLM engine on Hopper builds, one per compile key
    vllm_fused_moe.py  compile keys of vLLM's Triton fused_moe_kernel on Hopper
"""
