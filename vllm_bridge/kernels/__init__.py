"""The executor's backends on vLLM's own kernels, registered as entry points (`warmup.backends`:
`deep_gemm_vllm`, `vllm_triton`) that executor/registry.py loads by name, in vLLM's workers and in
the precompile pool's processes.

A floor of vllm_bridge's (tests/test_layers.py), below warmup/: it imports neither engine/ beside it
nor anything above.

    deep_gemm.py  `deep_gemm_vllm`: the executor's DeepGEMM backend on the DeepGEMM vLLM itself imports, into vLLM's cache
    triton.py     `vllm_triton`: vLLM's own Triton kernels that vLLM 0.25 leaves cold, warmed through vLLM's code
"""
