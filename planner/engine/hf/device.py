"""The GPUs the planner knows (the engine's `device` section and the memory the estimates use),
and the one `--gpu` names.
"""

from __future__ import annotations

from dataclasses import dataclass

from .source import config_error


# name -> device facts. memory_gib is the nominal size (used for scheduler
# defaults and the KV estimate).
GPUS: dict[str, dict] = {
    "H100": {"num_sms": 132, "capability": "9.0", "memory_gib": 80},
    "H200": {"num_sms": 132, "capability": "9.0", "memory_gib": 141},
    "H20": {"num_sms": 78, "capability": "9.0", "memory_gib": 96},
    "B200": {"num_sms": 148, "capability": "10.0", "memory_gib": 180},
    "A100": {"num_sms": 108, "capability": "8.0", "memory_gib": 80},
    "L40S": {"num_sms": 142, "capability": "8.9", "memory_gib": 48},
}


@dataclass
class Gpu:
    """One GPU of GPUS, by its name."""

    name: str
    num_sms: int
    capability: str
    memory_gib: int


def gpu_name(gpu) -> str | None:
    """The GPUS name `gpu` spells, in any case (`h200` -> `H200`); None for an unknown GPU."""
    if isinstance(gpu, str):
        for name in GPUS:
            if name.lower() == gpu.lower():
                return name
    return None


def resolve_gpu(gpu: str, source: str) -> Gpu:
    name = gpu_name(gpu)
    if name is None:
        raise config_error(source, f"--gpu {gpu!r} is not known; known GPUs: {', '.join(GPUS)}")
    return Gpu(name, **GPUS[name])
