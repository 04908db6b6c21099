"""Model runners that execute the plan's batch steps (prefill, sample, decode, cleanup)."""

from .protocol import ModelRunner

__all__ = ["ModelRunner"]
