"""The plugin steps aside: a failure of its own never stops vLLM (issue 44).

An engine config it cannot derive (an architecture or a quantization the planner does not model),
a plan it cannot make (a missing or broken plan file, a stale saved plan), a report it cannot
write, a setting or a vLLM release it cannot use, a precompile pool that fails: each is one warning
line in vLLM's log naming the cause, and vLLM starts as it would without the plugin. A user who
wants such a failure to stop vLLM says so: WARMUP_STRICT=1 makes it one fatal line (PluginError).

One line for the server, not one per process:

- register's causes (a setting, vLLM's version) are the same in every process of a server (one
  environment, one vLLM): the first process (the API server) says it and marks the environment
  its children inherit (the engine core, the workers), which step aside without saying it again;
- a worker's causes are said by rank 0; another rank says its own at DEBUG only, and rank 0 says
  it at the agreement.

The agreement (``agree``): each rank derives its engine and plan itself, and a rank's pool can fail
alone. Before vLLM's compile_or_warm_up_model the ranks exchange their verdicts over vLLM's world
group (its CPU group); if one stepped aside, every rank does: the plan's batches and CUDA-graph
captures are collectives, and ranks that ran different warmups would wait on each other for ever.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, MutableMapping
from typing import NamedTuple

from planner.errors import PlanError, one_line

from .settings import PluginError

log = logging.getLogger("vllm.warmup_planner")  # under vLLM's logger: its handler, level and format

PREFIX = "warmup-planner: "
SAID = "WARMUP_PLANNER_STEPPED_ASIDE"  # set by the plugin, not the user: the cause a parent process said


class StepAside(NamedTuple):
    """Why the plugin stepped aside in this process: its hooks leave vLLM's methods as they are."""

    cause: str     # one line: a PlanError's FILE:LINE: PATH: MESSAGE, else TYPE: MESSAGE
    rank: int = 0  # the worker that met it (register's causes: every process meets them)


class Verdict(NamedTuple):
    """One rank's answer at the agreement."""

    rank: int
    cause: str | None  # why it stepped aside; None: it runs the plan


def cause_of(error: BaseException) -> str:
    """An exception as one line: a PlanError's own (FILE:LINE: PATH: MESSAGE), the plugin's own
    message without its prefix, else the exception's type and message."""
    text = one_line(error)
    if isinstance(error, PlanError):
        return text
    if text.startswith(PREFIX):
        return text[len(PREFIX):]
    return f"{type(error).__name__}: {text}"


def strict_error(cause: str) -> PluginError:
    """The one fatal line WARMUP_STRICT=1 asks for in place of stepping aside."""
    return PluginError(f"{PREFIX}{cause} (WARMUP_STRICT=1)")


def step_aside(cause: str, strict: bool, rank: int = 0, environ: MutableMapping = os.environ) -> StepAside:
    """The plugin steps aside for `cause`: its one line (said once for the server), or, under
    WARMUP_STRICT=1, PluginError with the cause."""
    if strict:
        raise strict_error(cause)
    say(cause, rank, environ)
    return StepAside(cause, rank)


def step_aside_line(cause: str) -> str:
    """The line vLLM's log gets (tests compare with it)."""
    return f"{PREFIX}stepping aside: {cause}; vLLM starts as it would without the plugin"


def say(cause: str, rank: int = 0, environ: MutableMapping = os.environ) -> None:
    """The step-aside line: a warning where it is first met, DEBUG where it is said elsewhere."""
    if rank != 0 or environ.get(SAID) == cause:
        log.debug(step_aside_line(cause))  # rank 0 says it (the agreement brings it there), or a parent did
        return
    log.warning(step_aside_line(cause))
    environ[SAID] = cause  # vLLM's processes started from here inherit it


# --- the agreement: every rank steps aside, or none ---------------------------------------------------------

def agree(own: Verdict, strict: bool, gather: Callable[[Verdict], list] | None = None) -> Verdict | None:
    """Every rank's verdict, gathered; the first of a rank that stepped aside (None: every rank runs
    the plan). Rank 0 says a cause only another rank met (that rank said it at DEBUG)."""
    try:
        verdicts = (gather or gather_verdicts)(own)
    except Exception as e:  # noqa: BLE001 - a rank that cannot tell runs vLLM's own warmup
        cause = f"the ranks could not agree on the plan ({cause_of(e)})"
        # said here whatever the rank: rank 0 cannot hear it (rank 0's line, as at register)
        return Verdict(own.rank, own.cause or step_aside(cause, strict).cause)
    first = next((Verdict(*v) for v in verdicts if v[1] is not None), None)
    if first is not None and own.cause is None:
        say(f"rank {first.rank}: {first.cause}", own.rank)
    return first


def gather_verdicts(own: Verdict, group=None) -> list:
    """Every rank's verdict, over vLLM's world group (its CPU group: gloo, no GPU memory); this
    rank's alone where there is no group of several (one process, or no vLLM distributed set up)."""
    group = group or world_group()
    if group is None or group.world_size <= 1:
        return [own]
    import torch.distributed as dist

    verdicts: list = [None] * group.world_size
    dist.all_gather_object(verdicts, tuple(own), group=group.cpu_group)
    return [Verdict(*v) for v in verdicts]


def world_group():
    """vLLM's world group (every rank of the server, data-parallel ones too), or None."""
    try:
        from vllm.distributed.parallel_state import get_world_group

        return get_world_group()
    except Exception:  # noqa: BLE001 - not initialised (the CPU tests): nothing to agree with
        return None
