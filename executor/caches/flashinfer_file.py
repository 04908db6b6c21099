"""The FlashInfer autotune file a plan's warmup writes (``warmup execute --flashinfer-cache``,
executor/backends/flashinfer.py): family ``flashinfer`` of a plan's bundle.

- Lives in: one file, ``flashinfer-autotune.json`` in DeepGEMM's root (the CLI's default).
- Packs: the file, as ``flashinfer/<its name>``; placed at this machine's file. Relocates: nothing.
"""

from __future__ import annotations

import os

from . import checks, roots
from .family import PLAN, Family, Placing, file_member_path
from .tree import Placed, place

FILE_NAME = "autotune.json"  # its name in a fresh directory of a bundle build or verify


def root(env) -> str:
    return os.path.join(roots.deep_gemm_root(env), "flashinfer-autotune.json")


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
