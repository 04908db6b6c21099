"""Config tables of the FP8 GEMMs: nearest-key selection, atomic saves, lookup by (N, K, device).

Pure Python except where marked; none of it needs Triton or a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from execlib import config_key
from executor.kernels import configs
from executor.kernels.configs import make_config
from kernel_model import gemm_tables

REPO = Path(__file__).resolve().parents[2]
A = make_config(16, 64, 1, 4, 3)
B = make_config(64, 128, 8, 4, 3)
C = make_config(128, 128, 8, 8, 3)
TABLE = {1: A, 64: B, 1024: C}


@pytest.mark.parametrize("M,expected", [(1, A), (2, A), (32, A), (33, B), (64, B), (543, B),
                                        (544, B), (545, C), (100_000, C)])
def test_select_config_picks_nearest_key(M, expected):
    # 32: |32-1| = 31 < |32-64| = 32; 544 is equidistant from 64 and 1024, so the smaller key wins
    assert gemm_tables.Table(TABLE).select(M) == expected


def test_select_config_tie_goes_to_smaller_key():
    assert gemm_tables.Table({10: A, 20: B}).select(15) == A
    assert gemm_tables.Table({20: B, 10: A}).select(15) == A


def test_select_config_returns_a_copy():
    gemm_tables.Table(TABLE).select(1)["BLOCK_SIZE_M"] = 999
    assert TABLE[1]["BLOCK_SIZE_M"] == 16


def test_table_path_names_kernel_shape_and_device(tmp_path):
    path = configs.table_path("fp8_gemm", 4096, 7168, "NVIDIA H100 80GB HBM3", tmp_path)
    assert path == tmp_path / "fp8_gemm,N=4096,K=7168,device=H100.json"  # the short name: engine and GPU agree


def test_save_table_atomic_round_trips_and_leaves_no_temp_files(tmp_path):
    path = configs.table_path("fp8_gemm", 4096, 7168, "NVIDIA H100 80GB HBM3", tmp_path / "tables")
    configs.save_table_atomic(path, {1024: C, 1: A, 64: B})
    assert configs.load_table(path) == TABLE
    assert list(json.loads(path.read_text())) == ["1", "64", "1024"]
    configs.save_table_atomic(path, {8: B})
    assert configs.load_table(path) == {8: B}
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_failed_save_keeps_the_old_table(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    configs.save_table_atomic(path, TABLE)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)  # the write fails after the new bytes are out
    with pytest.raises(OSError, match="disk full"):
        configs.save_table_atomic(path, {8: B})
    assert configs.load_table(path) == TABLE
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_load_table_reads_vllm_style_files(tmp_path):
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps({"16": {**A, "extra": 1}, "8": B}))
    assert configs.load_table(path) == {8: B, 16: A}


@pytest.mark.parametrize("content,message", [
    ({"x": A}, "not an integer"),
    ({"1": {"BLOCK_SIZE_M": 16}}, "lacks"),
    ({"1": {**A, "BLOCK_SIZE_N": 48}}, "power of two"),
    ({"1": {**A, "BLOCK_SIZE_K": 256}}, "must divide 128"),
    ({}, "non-empty"),
])
def test_load_table_rejects_bad_tables(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=message):
        configs.load_table(path)


def test_default_and_candidate_configs_are_valid():
    for config in configs.CANDIDATE_CONFIGS:
        configs.validate_config(config)
    assert 6 <= len(configs.CANDIDATE_CONFIGS) <= 10
    assert len({config_key(c) for c in configs.CANDIDATE_CONFIGS}) == len(configs.CANDIDATE_CONFIGS)
    for M in (1, 16, 17, 128, 1000, 4096):
        configs.validate_config(configs.default_config(M, 4096, 7168))
    assert configs.default_config(1, 20, 128)["BLOCK_SIZE_N"] == 32


def test_resolve_config_reads_the_table_for_the_device(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from executor.kernels import fp8_gemm

    monkeypatch.setenv(configs.CONFIG_DIR_ENV, str(tmp_path))
    fp8_gemm.clear_table_cache()
    assert fp8_gemm.resolve_config(100, 256, 512, "cpu") == configs.default_config(100, 256, 512)
    configs.save_table_atomic(configs.table_path("fp8_gemm", 256, 512, "cpu", tmp_path), {1: A, 256: C})
    fp8_gemm.clear_table_cache()
    assert fp8_gemm.resolve_config(100, 256, 512, "cpu") == A
    assert fp8_gemm.resolve_config(200, 256, 512, "cpu") == C
    fp8_gemm.clear_table_cache()


def test_package_imports_without_triton():
    code = ("import sys; sys.modules['triton'] = None; sys.modules['triton.language'] = None\n"
            "import executor.kernels as k, executor.kernels.configs\n"
            "assert k.HAS_TRITON is False\n"
            "try:\n    import torch\nexcept ImportError:\n    raise SystemExit(0)\n"
            "from executor.kernels import fp8_gemm, grouped_gemm, prefill_attention\n"
            "assert len(fp8_gemm.specialization_classes([1, 64, 4096], 4096, 7168)) == 3\n"
            "try:\n    fp8_gemm.warmup(1, 128, 128, 'cpu')\nexcept RuntimeError as e:\n"
            "    assert 'needs Triton' in str(e)\nelse:\n    raise AssertionError('ran without triton')\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, timeout=120)
