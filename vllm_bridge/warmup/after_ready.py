"""What the plugin sets in a worker once its warmup is sealed (ready): Dynamo's stance.

WARMUP_TORCH_COMPILE_AFTER_READY=eager (the default): a torch.compile call that would compile after
ready runs eagerly instead (executor/dynamo_stance.py: the same result, no compile in a request's
path); compile: Dynamo compiles it, as without the plugin, and the plugin's JIT monitor reports it
(how a plan's coverage is proved: bench/vllm_startup_proof.sh). One line in vLLM's log either way.
"""

from __future__ import annotations

import logging

from executor import dynamo_stance

log = logging.getLogger("vllm.warmup_planner")


def torch_compile_after_ready(setting: str, rank: int) -> bool:
    """Dynamo's stance for the rest of this worker; True where calls that would compile run eagerly."""
    if setting != "eager":
        log.info("warmup-planner: rank %d: a torch.compile call after ready compiles as in vLLM "
                 "(WARMUP_TORCH_COMPILE_AFTER_READY=%s)", rank, setting)
        return False
    why_not = dynamo_stance.eager_after_ready()
    if why_not == dynamo_stance.NO_TORCH:  # a process without torch compiles nothing through Dynamo
        return False
    if why_not is not None:
        log.warning("warmup-planner: rank %d: a torch.compile call after ready may still compile: %s", rank, why_not)
        return False
    log.info("warmup-planner: rank %d: after ready, a torch.compile call that would compile runs eagerly instead "
             "(Dynamo's stance %r; WARMUP_TORCH_COMPILE_AFTER_READY=compile compiles it)", rank, dynamo_stance.STANCE)
    return True
