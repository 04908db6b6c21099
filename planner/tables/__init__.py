"""The tuned tables a plan's dispatch reads: inputs of planning, digested with the plan.

    kernel_configs.py  the project's tuned kernel config tables (plans/kernel-configs/ or
                       $WARMUP_KERNEL_CONFIG_DIR), read through kernel_model.gemm_tables
    vllm_moe.py        vLLM's tuned fused_moe tables, read where vLLM keeps them
"""
