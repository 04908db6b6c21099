"""After ready, a torch.compile function that would compile runs eagerly instead.

A plan covers the torch.compile graphs its rules know of (serving_paths gives each size key a call:
kernel_model/dynamo_shapes.py). A model or release nobody wrote a rule for can still reach a
function with sizes, a grad mode or a first call no warmup gave it, and Dynamo then traces and
compiles in the request's path: seconds (the V1 runner's batch-change correction, 9 s after
ready: bench/RESULTS.md part AH). Dynamo's own "eager_on_recompile" stance
(torch.compiler.set_stance, torch 2.6+) runs the compiled graphs whose guards hold and any other
call eagerly, with the same result and no compile: set once the warmup is sealed, it makes
"nothing compiles after ready" hold for torch.compile whatever the plan missed, as the generic
Triton variants (executor/triton_generic.py) do for Triton. vLLM's own model graph is not affected:
vLLM calls it through its own dispatch once compiled (vllm/compilation/wrapper.py), and where it
sets a stance of its own for a call, the stance before it comes back after.

What runs eagerly is not seen by any monitor (Dynamo calls nothing on such a call): a plan's
coverage is proved with the stance left as it is (WARMUP_TORCH_COMPILE_AFTER_READY=compile).
"""

from __future__ import annotations

import sys

STANCE = "eager_on_recompile"
NO_TORCH = "torch is not imported in this process"  # nothing can compile through Dynamo here: nothing to say


def eager_after_ready() -> str | None:
    """Set Dynamo's stance to eager-on-recompile for the rest of this process; None where done,
    else why not (no torch imported here: nothing can compile through Dynamo; a torch without
    the stance)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return NO_TORCH
    set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if set_stance is None:
        return f"torch {torch.__version__} has no torch.compiler.set_stance"
    try:
        set_stance(STANCE)
    except Exception as e:  # noqa: BLE001 - a stance this torch does not know: Dynamo compiles as before
        return f"torch {torch.__version__} refused the stance {STANCE!r}: {e}"
    return None
