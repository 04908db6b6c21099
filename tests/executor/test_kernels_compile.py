"""Every kernel variant compiles for sm_90 (H100) on a machine without a GPU, and the
compiles happen exactly where the specialization docs say (sm90_compile.py does the work
in a fresh process, outside the interpreter)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
if importlib.util.find_spec("triton.backends.nvidia") is None:
    pytest.skip("this triton has no NVIDIA backend", allow_module_level=True)

SCRIPT = Path(__file__).with_name("sm90_compile.py")
H100_MAX_SHARED = 232448  # bytes of shared memory per block on sm_90


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton-cache"))
    run = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def signature(key: str) -> list[tuple]:
    """The per-argument part of a Triton 3.6 in-memory cache key."""
    return ast.literal_eval(key[: key.index("]{") + 1])


def pick(variants, kernel, **match):
    return [v for v in variants if v["kernel"] == kernel and all(v.get(k) == x for k, x in match.items())]


def test_all_variants_fit_h100_shared_memory(variants):
    assert len(variants) == 33
    too_big = [v for v in variants if v["shared"] > H100_MAX_SHARED]
    assert not too_big and all(v["shared"] > 0 for v in variants), too_big


def test_stand_ins_compile_the_variant_real_tensors_compile(variants):
    """A precompile worker's call (stand-in tensors, no torch) reaches the same variant as
    the call on real tensors: same in-memory key, same CompiledKernel."""
    checked = [v for v in variants if "stand_in_same" in v]
    assert len(checked) == 29  # every case but the four attention token counts (one variant)
    assert all(v["stand_in_same"] for v in checked), [v for v in checked if not v["stand_in_same"]]


def new_flags(rows) -> list[bool]:
    return [v["new"] for v in rows]


def test_gemm_m_is_not_specialized(variants):
    candidates = pick(variants, "fp8_gemm", M=1000)
    assert new_flags(candidates) == [True] * 8  # one compile per candidate config
    defaults = [v for v in pick(variants, "fp8_gemm") if v["M"] != 1000 and "N" not in v]
    assert new_flags(defaults) == [False] * 5  # M = 1, 16, 17, 33, 4096 reuse those configs' compiles
    assert signature(candidates[0]["key"])[5] == ("i32", None)  # M: type only


def test_grouped_variants_follow_the_config(variants):
    rows = pick(variants, "grouped_fp8_gemm")  # M_sum = 128, 1024, 4096, 384
    assert new_flags(rows) == [True, True, False, False]
    args = signature(rows[0]["key"])
    assert args[6] == ("i32", None)  # M_sum: type only
    assert args[5] == ("*i32", "")  # expert_ids: alignment not specialized


def test_attention_token_counts_and_window_sizes_share_a_variant(variants):
    rows = pick(variants, "prefill_attention", D=128)
    assert new_flags([v for v in rows if "tokens" in v]) == [False] * 4  # after the D=128 compile
    assert new_flags([v for v in rows if "window" in v]) == [True, False, False]
    args = signature([v for v in rows if "window" in v][0]["key"])
    assert args[4] == ("*i32", "") and args[5] == ("*i32", "")  # b_start_loc, b_seq_len
    assert args[8] == ("i32", None) and args[9] == ("i32", None)  # window_left, window_right
    assert all(v["new"] for v in pick(variants, "prefill_attention") if "tokens" not in v and "window" not in v)
