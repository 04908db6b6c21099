"""Launch configs of the block-FP8 GEMMs and their tuned per-(kernel, N, K, device) tables.

A config is a dict with the keys of vLLM's tuned block-FP8 tables (``BLOCK_SIZE_M``,
``BLOCK_SIZE_N``, ``BLOCK_SIZE_K``, ``GROUP_SIZE_M``, ``num_warps``, ``num_stages``),
so vLLM's JSON files load as they are. A table maps M thresholds to configs; a call
with M rows takes the entry whose key is nearest to M, ties to the smaller key, as
``get_w8a8_block_fp8_configs`` does. Without a table, ``default_config`` picks by M.

Tables are an input of planning, as vLLM ships its tuned configs: the planner reads
them to enumerate compile keys, the kernels read the same files to launch, and the
expanded plan's digest covers their content so that a changed table makes a saved
plan stale. A table file is named ``<kernel>,N=<n>,K=<k>,device=<device>.json`` with
the device's short name (``H100``, ``H200``: ``device_key``), so that the engine config
(which names the device) and the GPU (which torch names) find the same file. Where the
files live is the callers' choice (planner.tables.kernel_configs: ``$WARMUP_KERNEL_CONFIG_DIR``, else the
packaged ``plans/kernel-configs/``); this module only reads the file it is given.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from typing import Mapping

CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
SCALE_BLOCK = 128  # the 1x128 activation groups and 128x128 weight blocks

Config = dict  # {key: int for key in CONFIG_KEYS}


def make_config(block_m: int, block_n: int, group_m: int, num_warps: int, num_stages: int,
                block_k: int = SCALE_BLOCK) -> Config:
    return dict(zip(CONFIG_KEYS, (block_m, block_n, block_k, group_m, num_warps, num_stages)))


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def default_config(M: int, N: int, K: int) -> Config:
    """Built-in choice by M when no tuned table exists (N only bounds BLOCK_SIZE_N)."""
    if M <= 32:
        config = make_config(16, 64, 1, 4, 3)
    elif M <= 256:
        config = make_config(64, 128, 8, 4, 3)
    else:
        config = make_config(128, 128, 8, 8, 3)
    config["BLOCK_SIZE_N"] = min(config["BLOCK_SIZE_N"], max(16, next_power_of_2(N)))
    return config


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


def config_label(config: Mapping[str, int]) -> str:
    """``64x128x128 g8 w4 s3``: tile M x N x K, GROUP_SIZE_M, num_warps, num_stages."""
    return (f"{config['BLOCK_SIZE_M']}x{config['BLOCK_SIZE_N']}x{config['BLOCK_SIZE_K']} "
            f"g{config['GROUP_SIZE_M']} w{config['num_warps']} s{config['num_stages']}")


# --- tables ----------------------------------------------------------------------------------------

class Table:
    """A tuned table: configs by M threshold, looked up by nearest key (ties: the smaller)."""

    def __init__(self, entries: Mapping[int, Config]):
        if not entries:
            raise ValueError("empty kernel config table")
        self.entries = {int(m): dict(c) for m, c in sorted(entries.items())}
        self._keys = list(self.entries)

    def select(self, M: int) -> Config:
        i = bisect.bisect_left(self._keys, M)
        if i == len(self._keys):
            best = self._keys[-1]
        elif i == 0 or self._keys[i] == M:
            best = self._keys[i]
        else:  # nearest of the two neighbours; a tie goes to the smaller key
            below, above = self._keys[i - 1], self._keys[i]
            best = below if M - below <= above - M else above
        return dict(self.entries[best])

    def as_json(self) -> dict:
        return {str(m): {k: int(c[k]) for k in CONFIG_KEYS} for m, c in self.entries.items()}


def select_config(table: "Table | Mapping[int, Config] | None", M: int, N: int, K: int) -> Config:
    """The config a call with M rows launches with: the table's nearest entry, else the default."""
    if not table:  # None or an empty mapping: no tuned table
        return default_config(M, N, K)
    if not isinstance(table, Table):
        table = Table(table)
    return table.select(M)


def parse_table(raw, where: str) -> Table:
    """A table from its JSON object {"<M>": config}; ValueError names `where`."""
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{where}: a kernel config table is a non-empty JSON object keyed by M")
    entries = {}
    for key, config in raw.items():
        try:
            m = int(key)
        except ValueError:
            raise ValueError(f"{where}: table key {key!r} is not an integer M") from None
        try:
            validate_config(config)
        except ValueError as exc:
            raise ValueError(f"{where}: entry {key}: {exc}") from None
        entries[m] = {k: int(config[k]) for k in CONFIG_KEYS}
    return Table(entries)


def load_table(path: str | os.PathLike) -> Table:
    with open(path, encoding="utf-8") as f:
        return parse_table(json.load(f), str(path))


def device_key(device_name: str) -> str:
    """Short device name of table files: 'NVIDIA H100 80GB HBM3' -> 'H100', 'H200' -> 'H200'.

    The engine config names the device ('H100'), torch names the GPU ('NVIDIA H100 80GB
    HBM3'); both must find the same table."""
    words = re.sub(r"^(NVIDIA|Tesla)\s+", "", device_name.strip()).split()
    return (words[0] if words else device_name).replace("/", "_")


def table_name(kernel: str, N: int, K: int, device_name: str) -> str:
    return f"{kernel},N={N},K={K},device={device_key(device_name)}.json"
