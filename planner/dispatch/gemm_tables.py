"""Launch configs of the block-FP8 GEMMs and their tuned per-(kernel, N, K, device) tables.

A config is a dict with the keys of vLLM's tuned block-FP8 tables (``BLOCK_SIZE_M``,
``BLOCK_SIZE_N``, ``BLOCK_SIZE_K``, ``GROUP_SIZE_M``, ``num_warps``, ``num_stages``),
so vLLM's JSON files load as they are. A table maps M thresholds to configs; a call
with M rows takes the entry whose key is nearest to M, ties to the smaller key, as
``get_w8a8_block_fp8_configs`` does. Without a table, ``default_config`` picks by M.

Tables are an input of planning, as vLLM ships its tuned configs: the planner reads
them to enumerate compile keys, the kernels read the same files to launch, and the
expanded plan's digest covers their content so that a changed table makes a saved
plan stale. They live in ``$WARMUP_KERNEL_CONFIG_DIR`` or, by default, in the
packaged ``plans/kernel-configs/``, named ``<kernel>,N=<n>,K=<k>,device=<device>.json``
with the device's short name (``H100``, ``H200``: ``device_key``), so that the engine
config (which names the device) and the GPU (which torch names) find the same file.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from pathlib import Path
from typing import Mapping

CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
SCALE_BLOCK = 128  # the 1x128 activation groups and 128x128 weight blocks
CONFIG_DIR_ENV = "WARMUP_KERNEL_CONFIG_DIR"
TABLE_DEVICE_ENV = "WARMUP_TABLE_DEVICE"  # the device whose tables the kernels read (executor/kernels/fp8_gemm.py)

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


def config_key(config: Mapping[str, int]) -> tuple[int, ...]:
    """Hashable form of a config, in CONFIG_KEYS order."""
    return tuple(int(config[key]) for key in CONFIG_KEYS)


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


def default_config_root() -> Path:
    """The packaged tables: plans/kernel-configs in a checkout, planner/_data/... when installed."""
    from ..resources import plans_dir

    return Path(plans_dir()) / "kernel-configs"


def config_root() -> Path:
    """Where tables are read and written: $WARMUP_KERNEL_CONFIG_DIR, else the packaged ones."""
    return Path(os.environ.get(CONFIG_DIR_ENV) or default_config_root())


def table_path(kernel: str, N: int, K: int, device_name: str, root=None) -> Path:
    return Path(root if root is not None else config_root()) / table_name(kernel, N, K, device_name)


class TableReader:
    """The tables one plan expansion consults, each read once and remembered, so that the
    plan's digest covers exactly the tables that shaped it (a missing table counts too:
    adding one changes the plan)."""

    def __init__(self, device_name: str, root=None):
        self.device_name = device_name
        self.root = Path(root if root is not None else config_root())
        self._read: dict[str, Table | None] = {}

    def get(self, kernel: str, N: int, K: int) -> Table | None:
        name = table_name(kernel, N, K, self.device_name)
        if name not in self._read:
            path = self.root / name
            try:
                self._read[name] = load_table(path) if path.is_file() else None
            except (OSError, ValueError) as e:
                from ..errors import PlanError

                raise PlanError(f"unreadable kernel config table: {e}", file=str(path)) from None
        return self._read[name]

    def consulted(self) -> dict:
        """{table file name: its content, or None when absent}, for the digest."""
        return {name: (t.as_json() if t is not None else None) for name, t in sorted(self._read.items())}

    @classmethod
    def reread(cls, names, root=None) -> dict:
        """The same tables read again now (stale-plan check): {name: content or None}."""
        reader = cls("", root)
        out = {}
        for name in sorted(names):
            path = reader.root / name
            out[name] = load_table(path).as_json() if path.is_file() else None
        return out
