"""The executor's ``@triton.jit`` kernels and their launch-argument lists, importable without torch.

A precompile worker compiles variants from their sizes alone: it imports these modules
and Triton, never torch (what each costs: bench/RESULTS.md, part P), and compiles for a
fixed GPU target without creating a CUDA context (``stand_in``). The torch-facing
modules (``executor.kernels.fp8_gemm`` ...) check arguments, allocate scratch tensors and
call the same ``launch`` functions, so a worker's compile-only call and a real launch
build their argument lists with one piece of code.

    stand_in.py           stand-in tensors (dtype, shape, alignment), the offline driver, compile-only
    fp8_gemm.py           block-scaled FP8 GEMM
    grouped_gemm.py       grouped MoE FP8 GEMM
    prefill_attention.py  varlen prefill attention
"""
