"""A GPU's compute capability in the three forms the project meets it, converted in one place.

Engine configs, the planner's GPU table and bundle fingerprints write it as text, "9.0" (CUDA's
MAJOR.MINOR); the rules that depend on it compare (major, minor) pairs; NVML readings, plan
expressions (`device_capability`) and Triton's targets use the SM number, 90. Every floor reads
and writes those forms through these functions, so they cannot drift apart.
"""

from __future__ import annotations

import re

# The engine schema's pattern for device.capability (schemas/engine.schema.json): ASCII digits only.
_CAPABILITY = re.compile(r"([0-9]+)\.([0-9]+)")


def parse_capability(text: str) -> tuple[int, int]:
    """'9.0' -> (9, 0); ValueError for text that is not MAJOR.MINOR."""
    match = _CAPABILITY.fullmatch(text)
    if match is None:
        raise ValueError(f"compute capability {text!r} is not MAJOR.MINOR, such as '9.0'")
    return int(match[1]), int(match[2])


def capability_text(capability: tuple[int, int]) -> str:
    """(9, 0) -> '9.0', as engine configs and fingerprints write it."""
    major, minor = capability
    return f"{major}.{minor}"


def sm_number(capability: tuple[int, int]) -> int:
    """(9, 0) -> 90, (12, 1) -> 121: CUDA's minor versions stay below 10, so the digits join."""
    major, minor = capability
    return major * 10 + minor


def sm_capability(sm: int) -> tuple[int, int]:
    """90 -> (9, 0), 121 -> (12, 1): the inverse of sm_number."""
    return sm // 10, sm % 10
