"""What vLLM decides at start-up, as a user installs it (the rules of
planner/engine/vllm_choices.py): each block-FP8 linear's kernel, the model runner and the
sampler, and the flags that pin them.
"""

from __future__ import annotations

from ..vllm_choices import default_linear_kernel
from .source import config_error
from .writer import insert_after


def vllm_choices(engine: dict, fp8_linear_kernel: str | None, model_runner: str | None, source: str,
                 sampler: str | None = None) -> dict:
    """The model runner (`auto` unless --model-runner), the sampler (`auto` unless --sampler) and each
    block-FP8 linear's kernel: vLLM's choice with FlashInfer installed, or DeepGEMM's for
    `--fp8-linear-kernel deep_gemm`. Defaults are left out, as the engine schema's defaults are: the
    runner and the sampler `auto`, and a kernel that is what the engine loader fills in (vLLM's choice
    with FlashInfer installed)."""
    # each value is one of its row's choices already (flags.py, check_flags); what is left is the GPU's say
    capability = engine["device"]["capability"]
    if fp8_linear_kernel == "flashinfer_deep_gemm" and capability != "9.0":
        raise config_error(source, "--fp8-linear-kernel flashinfer_deep_gemm: vLLM selects FlashInfer's block-FP8 "
                                   "kernel on SM 9.0 only (has_flashinfer_fp8_blockscale_gemm), and the GPU is "
                                   f"SM {capability}")
    # the command that regenerates the config names them as given: assemble.py's _description, from the rows
    model = engine["model"]
    if model_runner not in (None, "auto"):  # auto, the schema's default, is left out as the shipped engines do
        model = engine["model"] = insert_after(model, "runner", "model_runner", model_runner)
    if sampler not in (None, "auto"):
        after = "model_runner" if "model_runner" in model else "runner"
        model = engine["model"] = insert_after(model, after, "sampler", sampler)
    for layer in model["linear"]:  # only where it is not the engine's default (planner/engine/config.py fills that in)
        kernel = default_linear_kernel(layer, model["dtype"], capability, fp8_linear_kernel != "deep_gemm")
        if kernel != default_linear_kernel(layer, model["dtype"], capability):
            layer["kernel"] = kernel
    return engine
