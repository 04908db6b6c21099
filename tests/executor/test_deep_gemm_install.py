"""DeepGEMM as users have it (executor.caches.deep_gemm_install): found the way vLLM imports it,
without importing it; vLLM's cache directory; both cache layouts, planted in temporary directories
as each version writes them (2.5/2.6: cache/kernel.<name>.<hash>/ with kernel.cu and kernel.cubin;
2.8: cache/<name>.<hash>/ with meta.json and the .committed marker)."""

from __future__ import annotations

import os
import sys

import pytest

from executor.caches import deep_gemm_install
from executor.backends import deep_gemm as backend
from kernel_model import deep_gemm as model

HASH = "5b0c29cdac95fd74b26b4316a7f7e6a6"


def fake_package(where, version="2.5.0", header="// v1"):
    """A DeepGEMM package directory: __init__.py with its version, include/deep_gemm headers."""
    where.mkdir(parents=True)
    (where / "__init__.py").write_text(f"import torch\n__version__ = '{version}'\npersistent_envs = dict()\n")
    (where / "include" / "deep_gemm" / "impls").mkdir(parents=True)
    (where / "include" / "deep_gemm" / "impls" / "sm90.cuh").write_text(header)
    return where


@pytest.fixture
def no_dg(monkeypatch, tmp_path):
    """No deep_gemm or vllm importable or imported; sys.path gets tmp_path/site."""
    for name in ("deep_gemm", "vllm", "vllm.third_party", "vllm.third_party.deep_gemm"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [str(site)] + [p for p in sys.path if "site-packages" not in p])
    return site


def test_vendored_copy_is_found_without_importing_vllm(no_dg):
    root = fake_package(no_dg / "vllm" / "third_party" / "deep_gemm", "2.8.1")
    (no_dg / "vllm" / "__init__.py").write_text("raise RuntimeError('vllm must not be imported')\n")
    install = deep_gemm_install.find_install()
    assert install == (deep_gemm_install.MODULES[1], str(root), "2.8.1")
    assert install.include_dir == str(root / "include")
    assert install.label() == f"2.8.1@{root / 'include'}"
    assert "vllm" not in sys.modules


def test_top_level_deep_gemm_wins_over_the_vendored_one(no_dg):
    fake_package(no_dg / "vllm" / "third_party" / "deep_gemm", "2.8.1")
    (no_dg / "vllm" / "__init__.py").write_text("")
    top = fake_package(no_dg / "deep_gemm", "2.6.1")
    assert deep_gemm_install.find_install() == ("deep_gemm", str(top), "2.6.1")


def test_no_copy_at_all(no_dg):
    assert deep_gemm_install.find_install() is None


def test_headers_digest_follows_content_not_path(tmp_path):
    a = fake_package(tmp_path / "a" / "deep_gemm")
    b = fake_package(tmp_path / "b" / "deep_gemm")
    c = fake_package(tmp_path / "c" / "deep_gemm", header="// v2")
    digest = deep_gemm_install.headers_digest(str(a / "include"))
    assert digest.startswith("sha256:") and digest == deep_gemm_install.headers_digest(str(b / "include"))
    assert deep_gemm_install.headers_digest(str(c / "include")) != digest
    assert deep_gemm_install.headers_digest(str(tmp_path)) is None


def test_cache_dir_is_vllms_when_unset(tmp_path):
    env = {"HOME": str(tmp_path)}
    assert deep_gemm_install.vllm_cache_dir(env).endswith(os.path.join(".cache", "vllm", "deep_gemm"))
    assert deep_gemm_install.vllm_cache_dir({"XDG_CACHE_HOME": "/x"}) == "/x/vllm/deep_gemm"
    assert deep_gemm_install.vllm_cache_dir({"VLLM_CACHE_ROOT": "/v", "XDG_CACHE_HOME": "/x"}) == "/v/deep_gemm"
    env = {"VLLM_CACHE_ROOT": "/v"}
    assert deep_gemm_install.environment(env) == {"DG_JIT_CACHE_DIR": "/v/deep_gemm"} and env == {"VLLM_CACHE_ROOT": "/v"}
    assert deep_gemm_install.environment({"VLLM_CACHE_ROOT": "/v", "DG_JIT_CACHE_DIR": "/mine"}) == {}


def test_cache_roots_list_and_defaults():
    """Under vLLM DeepGEMM reads DG_JIT_CACHE_DIR's list, else vLLM's own directory (which vLLM sets
    before DeepGEMM starts): the executor's target is vLLM, so its runs and workers read the same."""
    assert deep_gemm_install.cache_roots({"DG_JIT_CACHE_DIR": "/w:/ro1::/ro2"}) == ["/w", "/ro1", "/ro2"]
    assert deep_gemm_install.writable_root({"DG_JIT_CACHE_DIR": "/w:/ro1"}) == "/w"
    assert deep_gemm_install.cache_roots({"VLLM_CACHE_ROOT": "/v"}) == ["/v/deep_gemm"]


def test_execute_scopes_deep_gemms_directory_to_its_run(monkeypatch, tmp_path):
    """Issue 43: `execute` leaves the process's environment as it found it (no process-wide write)."""
    from executor import run

    monkeypatch.delenv("DG_JIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "v"))
    seen = []
    monkeypatch.setattr(run, "_execute", lambda *args: seen.append(os.environ.get("DG_JIT_CACHE_DIR")))
    run.execute(None)
    assert seen == [str(tmp_path / "v" / "deep_gemm")] and "DG_JIT_CACHE_DIR" not in os.environ


def plant(root, dirname, cubin=True, committed=None, meta=False):
    path = root / "cache" / dirname
    path.mkdir(parents=True, exist_ok=True)
    (path / "kernel.cu").write_text("// code")
    if cubin:
        (path / "kernel.cubin").write_bytes(b"\x7fELF")
    if meta:
        (path / "meta.json").write_text("{}")
    if committed:
        (path / ".committed").write_text("")
    return path


def test_entries_of_both_layouts(tmp_path):
    plant(tmp_path, f"kernel.sm90_fp8_gemm_1d2d.{HASH}")
    plant(tmp_path, f"sm90_m_grouped_fp8_gemm_contiguous_1d2d.{HASH}", committed=True, meta=True)
    plant(tmp_path, f"transpose_fp32.{HASH}", meta=True)  # no .committed: DeepJIT's miss
    plant(tmp_path, f"kernel.transpose_fp32.{HASH}", cubin=False)  # nvcc still writing
    (tmp_path / "cache" / "README").write_text("x")
    entries = deep_gemm_install.scan(str(tmp_path))
    assert [(e.layout, e.name, e.hash) for e in entries] == [
        ("legacy", "sm90_fp8_gemm_1d2d", HASH), ("deepjit", "sm90_m_grouped_fp8_gemm_contiguous_1d2d", HASH)]
    assert entries[0].mtime_ns is None and entries[1].mtime_ns > 0
    assert entries[1].path == str(tmp_path / "cache" / f"sm90_m_grouped_fp8_gemm_contiguous_1d2d.{HASH}")
    assert deep_gemm_install.scan(str(tmp_path / "nowhere")) == []


@pytest.mark.parametrize("name, parsed", [
    (f"kernel.sm90_fp8_gemm_1d2d.{HASH}", ("legacy", "sm90_fp8_gemm_1d2d", HASH)),
    (f"sm90_fp8_gemm_1d2d.{HASH}", ("deepjit", "sm90_fp8_gemm_1d2d", HASH)),
    ("README", None), ("kernel.nohash", None), ("bad-name.00", None), (".x", None)])
def test_parse_entry(name, parsed):
    assert deep_gemm_install.parse_entry(name) == parsed


def test_model_states_the_versions_it_was_checked_against():
    assert "2.6.1" in model.CHECKED_VERSIONS
    checked = deep_gemm_install.Install("deep_gemm", "/x", "2.6.1")
    other = deep_gemm_install.Install("vllm.third_party.deep_gemm", "/v/deep_gemm", "2.8.1")
    assert backend.unchecked_warning(checked) is None
    line = backend.unchecked_warning(other)
    assert line.startswith("warmup: warning: DeepGEMM 2.8.1 (vllm.third_party.deep_gemm at /v/deep_gemm)")
    assert "2.6.1" in line and "\n" not in line


def test_warning_is_said_once_per_install(capsys):
    install = deep_gemm_install.Install("deep_gemm", "/once", "2.5.0")
    backend.warn_unchecked(install)
    backend.warn_unchecked(install)
    assert capsys.readouterr().err.count("DeepGEMM 2.5.0") == 1


def test_key_from_source_reads_the_template_arguments():
    code = ("#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>\nauto ptr = reinterpret_cast<void*>(&"
            "sm90_fp8_gemm_1d2d_impl<\n cute::UMMA::Major::K,\n 0, 7168, 2048,\n 1,\n 64, 112, 128,\n"
            " 128, 128, 64,\n 9,\n 128, 128,\n 1, false,\n 132, GemmType::Normal,\n"
            " cutlass::bfloat16_t\n>);\n")
    want = "sm90_fp8_gemm_1d2d:n=7168,k=2048,block_m=64,block_n=112,block_k=128,stages=9,multicast=1,sms=132"
    assert model.key_from_source(code) == want
    assert want in model.dense_keys(range(1, 8193), 7168, 2048, 132)
    assert model.key_from_source("transpose_fp32<512, 64, 16>") is None
