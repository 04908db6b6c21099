"""Where tuned kernel config tables live, and the tables one plan expansion reads.

Tables are an input of planning wherever a kernel's dispatch reads them
(kernel_model.gemm_tables says what a table is and how a call picks its config).
They are read from ``$WARMUP_KERNEL_CONFIG_DIR`` or, by default, from the packaged
``plans/kernel-configs/``; the executor's kernels and its tuner use the same root
(``config_root``), so planning and launching read the same files.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernel_model.gemm_tables import Table, load_table, table_name

from ..errors import PlanError
from ..resources import plans_dir

CONFIG_DIR_ENV = "WARMUP_KERNEL_CONFIG_DIR"


def default_config_root() -> Path:
    """The packaged tables: plans/kernel-configs in a checkout, planner/_data/... when installed."""
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
                raise PlanError(f"unreadable kernel config table: {e}", file=str(path)) from None
        return self._read[name]

    def consulted(self) -> dict:
        """{table file name: its content, or None when absent}, for the digest."""
        return {name: (t.as_json() if t is not None else None) for name, t in sorted(self._read.items())}


def reread(names, root=None) -> dict:
    """The named tables read again now (stale-plan check): {name: content or None}."""
    root = Path(root if root is not None else config_root())
    return {name: (load_table(root / name).as_json() if (root / name).is_file() else None)
            for name in sorted(names)}
