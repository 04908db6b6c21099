"""The engine config (schemas/engine.schema.json) of what vLLM resolved, for `warmup engine
--from-vllm` (vllm_bridge/cli.py) and for the plugin's plan in each worker; and stand-ins that let
vLLM's own Python run on a machine without a GPU (the CLI's and the CPU tests').

A floor of vllm_bridge's (tests/test_layers.py), below warmup/: it imports neither kernels/ beside it
nor anything above.

    from_vllm.py  `engine_from_vllm_config`: the engine config of a VllmConfig; the live layers and KV cache read
    standins.py   stand-ins that let vLLM's own Python run on a machine without a GPU
"""
