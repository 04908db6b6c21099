"""Model runners that execute the plan's batch steps (prefill, sample, decode, cleanup).

``from executor.runner import ReferenceRunner`` loads torch and Triton on first use
only: importing the package (and the protocol) stays cheap.

    protocol.py   the protocol between the executor and a model runner, shaped like vLLM's worker
    reference.py  ReferenceRunner: a small but real paged-KV decoder runner behind the runner protocol
    model.py      a few decoder layers with random seeded weights, sized from the engine config
    kernels.py    the reference runner's own Triton kernels: inputs, KV cache, attention, sampling
    sampler.py    sampling: every SamplingParams feature, the grammar bitmask, rejection sampling, an n-gram drafter
    trace.py      a seeded serving trace: Poisson arrivals, a minimal scheduler, steps in the plan's format
"""

from .protocol import ModelRunner

__all__ = ["ModelRunner", "ReferenceRunner"]


def __getattr__(name: str):
    if name == "ReferenceRunner":
        from .reference import ReferenceRunner

        return ReferenceRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
