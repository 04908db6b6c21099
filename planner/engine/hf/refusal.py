"""What --from-hf does not plan, and what to do instead.

An architecture without a layout declaration (layouts.py), or a quantization whose kernels the
engine config cannot name (quantization.py), is refused in one line that says why, by rule from
the config where it can (an encoder-decoder, an encoder, a state-space or multimodal model), and
the two ways that always work: an engine YAML written by hand (the fields a layer needs), or
`warmup engine --from-vllm`, which asks vLLM itself.
"""

from __future__ import annotations

from .layouts import LAYOUTS
from .source import HFConfig, HFConfigError

WAY_OUT = ("write the engine YAML by hand (model.linear, model.moe and model.attention with one rank's shapes, "
           "kv_cache.groups: schemas/engine.schema.json, plans/engines/ for examples) or run "
           "`warmup engine --from-vllm -- <model directory> <vllm serve flags>` where vLLM is installed")

# A generative architecture's class name ends so (vLLM's registry: text generation and multimodal).
_GENERATIVE = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
# Keys of state-space (Mamba) layers, which the engine config describes only as a KV-cache group kind.
_SSM_KEYS = ("state_size", "ssm_cfg", "mamba_d_state", "ssm_state_size", "mamba_expand")


def _why(ctx: HFConfig, architecture: str) -> str:
    """Why there is no plan for this architecture, by rule from the config where one applies."""
    if ctx.get("is_encoder_decoder"):
        return "an encoder-decoder model; --from-hf plans decoder-only language models"
    if not architecture.endswith(_GENERATIVE):
        return ("not a text-generation model (an encoder or a pooling head); --from-hf plans decoder-only "
                "language models")
    if any(ctx.get(key) is not None for key in _SSM_KEYS):
        return "a state-space (Mamba) model: its layers are no attention or GEMM the engine config derives"
    if architecture.endswith("ForConditionalGeneration"):
        return ("a multimodal model whose language model --from-hf has no layout for (planner/engine/hf/layouts.py), "
                "beside an encoder the engine config does not describe")
    return "no module layout of vLLM's is declared for it (planner/engine/hf/layouts.py)"


def unplanned(hf: dict, source: str) -> HFConfigError | None:
    """The refusal of a config whose architecture --from-hf does not plan; None where it plans it
    or names none (the config's full reading says what is wrong then). Asked before anything else
    of the config is read: a model that is not planned is refused for that, whatever its other
    keys hold (state-spaces' Mamba2 configs give time_step_limit [0.0, Infinity])."""
    archs = hf.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] not in LAYOUTS:
        return refuse_architecture(HFConfig(hf, source), archs[0])
    return None


def refuse_architecture(ctx: HFConfig, architecture: str) -> HFConfigError:
    return ctx.fail(f"architectures: {architecture} is not planned by --from-hf: {_why(ctx, architecture)}; "
                    f"{WAY_OUT}. --from-hf plans {', '.join(sorted(LAYOUTS))}", "architectures")


def refuse_quantization(ctx: HFConfig, what: str) -> HFConfigError:
    return ctx.fail(f"quantization_config: {what}; {WAY_OUT} (the quant of each layer: "
                    "schemas/engine.schema.json $defs/quant)", "quantization_config")
