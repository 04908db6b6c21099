"""Not-modelled entries the engine itself implies, whatever stages a plan has: the parts of the
served model the engine config does not describe.

A multimodal architecture (vLLM's registry names them *ForConditionalGeneration:
Gemma3ForConditionalGeneration, Llava..., Qwen2VL...) runs an encoder beside the language model:
`warmup engine --from-hf` derives the language model only (planner/engine/hf/layouts.py,
text_config), and no engine field describes the encoder's layers, so no stage warms them.
"""

from __future__ import annotations

from ...engine.facts import EngineFacts

MULTIMODAL_ENCODER = "multimodal encoder (vision tower and projector)"


def engine_gaps(engine: EngineFacts) -> list[dict]:
    """The not-modelled entries of `engine` (module docstring), in a fixed order."""
    architecture = engine.model.architecture or ""
    if not architecture.endswith("ForConditionalGeneration"):
        return []
    return [{"family": MULTIMODAL_ENCODER,
             "why": f"{architecture} is multimodal: vLLM builds its encoder beside the language model the engine "
                    "config describes, and the engine config has no field for the encoder's layers, so the plan "
                    "warms none of its kernels (vLLM's start-up profiling runs it once on its largest dummy input)",
             "action": "check the first multimodal requests with vLLM's JIT monitor; to serve text only, start "
                       "vLLM with --limit-mm-per-prompt '{\"image\": 0}' (it then builds no vision tower)"}]
