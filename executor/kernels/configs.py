"""Launch configurations of the block-FP8 GEMMs: the executor's side of their tables.

What a config is and how a table picks one by M is dispatch knowledge that the
planner shares: it lives in ``kernel_model.gemm_tables`` (pure Python) and is
re-exported here, so planned and launched configs come from one function; where the
tables live is the planner's ``planner.tables.kernel_configs.config_root`` (one default for
planning and launching). This module adds what only the executor needs: the autotuning
candidates, the atomic table writer and the tables a process's launches read.

Every distinct config is a distinct Triton compile (its values are constexprs and
launch options), so the configs a table can return for the hot path's M values are
the variants a warmup plan has to cover.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Mapping

from kernel_model import gemm_tables
from kernel_model.arith import cdiv  # noqa: F401 - re-exported: the kernels' launch grids
from kernel_model.gemm_tables import (  # noqa: F401 - re-exported for the kernels and the tuner
    CONFIG_KEYS, SCALE_BLOCK, Config, default_config, make_config, next_power_of_2, validate_config,
)
from planner.output import write_atomic
from planner.tables.kernel_configs import CONFIG_DIR_ENV, config_root, table_path  # noqa: F401 - re-exported

# Autotuning candidates: small-M (decode), mid and large-M (prefill) tiles.
CANDIDATE_CONFIGS: tuple[Config, ...] = (
    make_config(16, 64, 1, 4, 3),
    make_config(16, 128, 1, 4, 4),
    make_config(32, 64, 8, 4, 4),
    make_config(64, 64, 8, 4, 4),
    make_config(64, 128, 8, 4, 3),
    make_config(64, 256, 8, 8, 3),
    make_config(128, 64, 8, 4, 3),
    make_config(128, 128, 8, 8, 3),
)


def load_table(path) -> dict[int, Config]:
    """Read a table: a JSON object {"<M>": config}. Keys come back as ints, ascending."""
    return gemm_tables.load_table(path).entries


def save_table_atomic(path: str | os.PathLike, table: Mapping[int, Mapping[str, int]]) -> None:
    """Write a table so that readers see the old file or the new one, never a partial one."""
    for config in table.values():
        validate_config(config)
    payload = {str(m): {k: int(table[m][k]) for k in CONFIG_KEYS} for m in sorted(table)}
    os.makedirs(Path(path).parent, exist_ok=True)  # the tables' folder is ours: the writer makes none
    write_atomic(Path(path), json.dumps(payload, indent=2) + "\n")


# --- the tables a process's launches read ----------------------------------------------------------

def device_name(device=None, table_device: str | None = None) -> str:
    """The device whose tuned tables the kernels read: `table_device` when given (the executor
    passes the engine config's device, Options.table_device, so that the kernels launch the
    configs of the tables its plan was made with, in every process and also on a GPU of another
    name), else the GPU's own name (this asks torch)."""
    if table_device:
        return table_device
    import torch

    device = torch.device(device if device is not None else "cuda")
    if device.type != "cuda":
        return device.type
    return _cuda_device_name(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_device_name(index: int) -> str:
    import torch

    return torch.cuda.get_device_name(index)


@functools.lru_cache(maxsize=None)
def _cached_table(path: str):
    return gemm_tables.load_table(path) if Path(path).is_file() else None


def lookup_table(kernel: str, N: int, K: int, device=None, table_device: str | None = None):
    """The tuned table for (kernel, N, K, device) under ``config_root()``, or None (`table_device`:
    the device whose tables to read, see ``device_name``).

    Tables are read once per process (``clear_table_cache()`` forgets them).
    """
    return _cached_table(str(table_path(kernel, N, K, device_name(device, table_device))))


def clear_table_cache() -> None:
    _cached_table.cache_clear()
