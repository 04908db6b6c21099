"""The FlashInfer autotune file a plan's warmup writes (``warmup execute --flashinfer-cache``,
executor/backends/flashinfer.py): family ``flashinfer`` of a plan's bundle.

- Lives in: one file per FlashInfer version and GPU (what FlashInfer's autotuner chose holds for
  that pair), by default ``<dir>/<version>/<GPU name, spaces as _>/autotune_configs.json``, ``<dir>``
  being ``WARMUP_FLASHINFER_CACHE_DIR``, else ``$XDG_CACHE_HOME/warmup-planner/flashinfer_autotune``
  (``~/.cache`` for an unset XDG_CACHE_HOME): ``default_path``, the one default, where ``warmup
  execute`` keeps the file and ``warmup bundle install`` places a plan bundle's (each unless
  ``--flashinfer-cache`` names another file). From an environment alone it has no root: the version
  and the GPU are the fingerprint's (``Env.fingerprint``; at install, the bundle's, which the install
  has checked against this machine).
- Packs: the file, as ``flashinfer/<its name>``; placed at this machine's file. Relocates: nothing.
"""

from __future__ import annotations

import os
from typing import Mapping

from . import checks
from .family import PLAN, Family, Placing, file_member_path
from .tree import Placed, place

FILE_NAME = "autotune.json"  # its name in a fresh directory of a bundle build or verify


def default_path(version: str, gpu: str, environ: Mapping | None = None) -> str:
    """The file for FlashInfer `version` on the GPU named `gpu` (torch's device name), in `environ`
    (default: this process's)."""
    environ = os.environ if environ is None else environ
    folder = environ.get("WARMUP_FLASHINFER_CACHE_DIR") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "warmup-planner", "flashinfer_autotune")
    return os.path.join(folder, version, gpu.replace(" ", "_"), "autotune_configs.json")


def root(env) -> str | None:
    """default_path for the fingerprint's FlashInfer version and GPU; None where it names neither
    (no fingerprint, or a machine without them)."""
    fingerprint = env.fingerprint or {}
    if not fingerprint.get("flashinfer") or not fingerprint.get("gpu"):
        return None
    return default_path(fingerprint["flashinfer"], fingerprint["gpu"], env.environ)


def collect(path: str, fingerprint: dict) -> tuple[dict, list]:
    return ({f"flashinfer/{os.path.basename(path)}": path} if os.path.isfile(path) else {}), []


def place_file(p: Placing) -> Placed:
    files = sorted(os.listdir(p.staged)) if os.path.isdir(p.staged) else []
    if not files:
        return Placed()
    return Placed().add(place(os.path.join(p.staged, files[0]), p.dest, move=p.move), p.dest)


FAMILY = Family(name="flashinfer", label="FlashInfer autotune file", root=root, collect=collect, place=place_file,
                check=checks.file_check, origins=(PLAN,), file_name=FILE_NAME,
                member_path=file_member_path)
