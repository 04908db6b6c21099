"""Integer arithmetic the dispatch models, the planner and the executor share: one definition each."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling division, as vLLM's ``cdiv`` (and Triton's ``cdiv``)."""
    return -(a // -b)
