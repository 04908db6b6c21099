"""Launch configurations of the block-FP8 GEMMs: the executor's side of their tables.

What a config is, how a table picks one by M and where tables live is dispatch
knowledge that the planner shares: it lives in ``planner.dispatch.gemm_tables``
(pure Python) and is re-exported here, so planned and launched configs come from
one function. This module adds what only the executor needs: the autotuning
candidates, the tuner loop and the atomic table writer.

Every distinct config is a distinct Triton compile (its values are constexprs and
launch options), so the configs a table can return for the hot path's M values are
the variants a warmup plan has to cover.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Iterable, Mapping

from planner.dispatch import gemm_tables
from planner.dispatch.gemm_tables import (  # noqa: F401 - re-exported for the kernels and the tuner
    CONFIG_DIR_ENV, CONFIG_KEYS, SCALE_BLOCK, Config, config_key, config_root, default_config, device_key,
    make_config, next_power_of_2, table_path, validate_config,
)
from planner.output import write_atomic

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


def select_config(table: Mapping[int, Config], M: int) -> Config:
    """The entry whose key is nearest to M; on a tie, the smaller key (a copy)."""
    return gemm_tables.Table(table).select(M)


def save_table_atomic(path: str | os.PathLike, table: Mapping[int, Mapping[str, int]]) -> None:
    """Write a table so that readers see the old file or the new one, never a partial one."""
    for config in table.values():
        validate_config(config)
    payload = {str(m): {k: int(table[m][k]) for k in CONFIG_KEYS} for m in sorted(table)}
    write_atomic(Path(path), json.dumps(payload, indent=2) + "\n")


def tune_table(Ms: Iterable[int], candidates: Iterable[Config],
               bench: Callable[[int, Config], float]) -> dict[int, Config]:
    """For each M, the candidate with the lowest ``bench(M, config)`` time (any unit)."""
    candidates = list(candidates)
    table = {}
    for m in sorted(set(Ms)):
        timings = [(bench(m, config), i) for i, config in enumerate(candidates)]
        table[m] = dict(candidates[min(timings)[1]])
    return table


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
