"""Model runners that execute the plan's batch steps (prefill, sample, decode, cleanup).

``from executor.runner import ReferenceRunner`` loads torch and Triton on first use
only: importing the package (and the protocol) stays cheap.
"""

from .protocol import ModelRunner

__all__ = ["ModelRunner", "ReferenceRunner"]


def __getattr__(name: str):
    if name == "ReferenceRunner":
        from .reference import ReferenceRunner

        return ReferenceRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
