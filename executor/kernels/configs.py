"""Launch configurations for the block-FP8 GEMMs, and their per-(N, K, device) tables.

A config is a plain dict with the keys of vLLM's tuned block-FP8 tables
(``BLOCK_SIZE_M``, ``BLOCK_SIZE_N``, ``BLOCK_SIZE_K``, ``GROUP_SIZE_M``,
``num_warps``, ``num_stages``), so vLLM's ``N=...,K=...,device_name=...`` JSON
files load as they are. A table maps M thresholds to configs; a call with M
rows uses the entry whose key is nearest to M (ties go to the smaller key), as
``get_w8a8_block_fp8_configs`` does. Without a table, ``default_config`` picks
by M alone.

Every distinct config is a distinct Triton compile (its values are constexprs
and launch options), so the configs a table can return for the hot path's M
values are the variants a warmup plan has to cover.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Iterable, Mapping

from planner.output import write_atomic

CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
SCALE_BLOCK = 128  # the 1x128 activation groups and 128x128 weight blocks
CONFIG_DIR_ENV = "WARMUP_KERNEL_CONFIG_DIR"
DEFAULT_CONFIG_DIR = Path(__file__).with_name("tuned")

Config = dict  # {key: int for key in CONFIG_KEYS}


def make_config(block_m: int, block_n: int, group_m: int, num_warps: int, num_stages: int,
                block_k: int = SCALE_BLOCK) -> Config:
    values = (block_m, block_n, block_k, group_m, num_warps, num_stages)
    return dict(zip(CONFIG_KEYS, values))


def default_config(M: int, N: int, K: int) -> Config:
    """Built-in choice by M when no tuned table exists (N and K only bound BLOCK_SIZE_N)."""
    if M <= 32:
        config = make_config(16, 64, 1, 4, 3)
    elif M <= 256:
        config = make_config(64, 128, 8, 4, 3)
    else:
        config = make_config(128, 128, 8, 8, 3)
    config["BLOCK_SIZE_N"] = min(config["BLOCK_SIZE_N"], max(16, next_power_of_2(N)))
    return config


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


def config_key(config: Mapping[str, int]) -> tuple[int, ...]:
    """Hashable form of a config, in CONFIG_KEYS order."""
    return tuple(int(config[key]) for key in CONFIG_KEYS)


def validate_config(config: Mapping[str, int]) -> None:
    missing = [key for key in CONFIG_KEYS if key not in config]
    if missing:
        raise ValueError(f"kernel config {dict(config)} lacks {missing}")
    for key in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps"):
        value = config[key]
        if not isinstance(value, int) or value < 1 or value & (value - 1):
            raise ValueError(f"kernel config {key}={value!r} must be a power of two")
    if config["BLOCK_SIZE_M"] < 16 or config["BLOCK_SIZE_N"] < 16 or config["BLOCK_SIZE_K"] < 16:
        raise ValueError(f"kernel config {dict(config)}: tl.dot needs blocks of at least 16")
    if SCALE_BLOCK % config["BLOCK_SIZE_K"]:
        raise ValueError(f"kernel config BLOCK_SIZE_K={config['BLOCK_SIZE_K']} must divide {SCALE_BLOCK}")
    if config["GROUP_SIZE_M"] < 1 or config["num_stages"] < 1:
        raise ValueError(f"kernel config {dict(config)}: GROUP_SIZE_M and num_stages must be >= 1")


def device_name_for_path(device_name: str) -> str:
    return device_name.replace(" ", "_")


def table_path(kernel: str, N: int, K: int, device_name: str, root: str | os.PathLike) -> Path:
    """``<root>/fp8_gemm,N=4096,K=7168,device=NVIDIA_H100_80GB_HBM3.json``."""
    return Path(root) / f"{kernel},N={N},K={K},device={device_name_for_path(device_name)}.json"


def config_root() -> Path:
    """Where kernels look for tables: $WARMUP_KERNEL_CONFIG_DIR, else the packaged ``tuned/``."""
    return Path(os.environ.get(CONFIG_DIR_ENV) or DEFAULT_CONFIG_DIR)


def load_table(path: str | os.PathLike) -> dict[int, Config]:
    """Read a table: a JSON object {"<M>": config}. Keys come back as ints, ascending."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: a kernel config table is a non-empty JSON object keyed by M")
    table = {}
    for key, config in raw.items():
        try:
            m = int(key)
        except ValueError:
            raise ValueError(f"{path}: table key {key!r} is not an integer M") from None
        try:
            validate_config(config)
        except ValueError as exc:
            raise ValueError(f"{path}: entry {key}: {exc}") from None
        table[m] = {k: int(config[k]) for k in CONFIG_KEYS}
    return dict(sorted(table.items()))


def save_table_atomic(path: str | os.PathLike, table: Mapping[int, Mapping[str, int]]) -> None:
    """Write a table so that readers see the old file or the new one, never a partial one."""
    path = Path(path)
    for config in table.values():
        validate_config(config)
    payload = {str(m): {k: int(table[m][k]) for k in CONFIG_KEYS} for m in sorted(table)}
    write_atomic(path, json.dumps(payload, indent=2) + "\n")


def select_config(table: Mapping[int, Config], M: int) -> Config:
    """The entry whose key is nearest to M; on a tie, the smaller key."""
    if not table:
        raise ValueError("empty kernel config table")
    best = min(table, key=lambda key: (abs(int(key) - M), int(key)))
    return dict(table[best])


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


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
