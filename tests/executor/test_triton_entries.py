"""Triton cache entries copied to another directory still hit (executor/caches/triton_entries.py).

Triton's group file lists an entry's files by absolute path, and its lookup keeps only paths that
exist: an entry copied as it is (a bundle installed elsewhere, a precompile worker's private
directory) misses once its first directory is gone, and every variant compiles again. This is the
cause of issue 25's "the Triton half never hits in another cache directory". The proof compiles
a plan's variants offline for sm_90 (tests/executor/compile_only_worker.py: Triton's real
compiler, no GPU), copies the cache both ways, removes the original and compiles again."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from executor.caches.triton_entries import GROUP_PREFIX, install_entries

SCRIPT = Path(__file__).with_name("compile_only_worker.py")


def compiled_per_job(cache: Path) -> list[int]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache)
    run = subprocess.run([sys.executable, str(SCRIPT), "triton", "llama-3.1-8b-fp8-h100"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return [job["compiled"] for job in json.loads(run.stdout.splitlines()[-1])["jobs"]]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None
                    or importlib.util.find_spec("triton.backends.nvidia") is None,
                    reason="needs triton with its NVIDIA backend (offline compile for sm_90)")
def test_a_rehomed_copy_hits_where_a_verbatim_copy_compiles_again(tmp_path):
    built, verbatim, rehomed = tmp_path / "built", tmp_path / "verbatim", tmp_path / "rehomed"
    first = compiled_per_job(built)
    assert first and set(first) == {1}
    shutil.copytree(built, verbatim)
    assert install_entries(str(built), str(rehomed)) == len(first)
    shutil.rmtree(built)  # the building machine's directory is not on the installing one
    assert set(compiled_per_job(verbatim)) == {1}  # the cause: its group files point at `built`
    assert set(compiled_per_job(rehomed)) == {0}   # every variant a disk hit


def entry(root: Path, name: str, group: bool = True) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "k.cubin").write_text(name)
    if group:
        (path / f"{GROUP_PREFIX}k.json").write_text(json.dumps({"child_paths": {"k.cubin": str(path / "k.cubin")}}))
    return path


def test_install_copies_complete_entries_only_and_keeps_what_is_there(tmp_path):
    source, target = tmp_path / "a", tmp_path / "b"
    entry(source, "AAA")
    entry(source, "BBB", group=False)  # still being written
    entry(target, "CCC")
    entry(source, "CCC")
    assert install_entries(str(source), str(target)) == 1
    group = json.loads((target / "AAA" / f"{GROUP_PREFIX}k.json").read_text())
    assert group == {"child_paths": {"k.cubin": str(target / "AAA" / "k.cubin")}}
    assert not (target / "BBB").exists()
    assert install_entries(str(source), str(target)) == 0 and install_entries(str(target), str(target)) == 0
