"""The precompile pool's manifest and claims take the cache roots the run resolved once and handed
down (executor/caches/roots.py's Env; issue 56 item 1), and without one (a pool started ahead of
the run) read this process's environment, as before."""

from __future__ import annotations

from executor.caches.roots import MANIFEST_NAME, Env
from executor.precompile.claims import node
from executor.precompile.jobs import manifest


def test_the_claims_and_the_manifest_take_the_roots_handed_down(tmp_path, monkeypatch):
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "process_dg"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "process_triton"))
    handed = Env.of({"DG_JIT_CACHE_DIR": str(tmp_path / "run_dg"), "TRITON_CACHE_DIR": str(tmp_path / "run_triton")})
    assert node.cache_dir("deep_gemm", None, handed) == str(tmp_path / "run_dg")
    assert node.cache_dir("triton", None, handed) == str(tmp_path / "run_triton")
    assert node.cache_dir("deep_gemm", None) == str(tmp_path / "process_dg")  # none handed: this process's
    assert manifest.RunManifest(handed).path == str(tmp_path / "run_triton" / MANIFEST_NAME)
    assert manifest.RunManifest().path == str(tmp_path / "process_triton" / MANIFEST_NAME)
    elsewhere = Env.of({"TRITON_CACHE_MANAGER": "my.Manager"})
    assert manifest.manifest_path(env=elsewhere) is None and node.cache_dir("triton", None, elsewhere) is None
    claims = node.NodeClaims(note=lambda line: None, env=handed)
    claims.open({"v": 1}, ("deep_gemm",))
    assert claims.roots["deep_gemm"].startswith(str(tmp_path / "run_dg"))


def test_the_manifest_s_deep_gemm_cache_is_the_one_handed_down(tmp_path, monkeypatch):
    """A manifest written against the run's DeepGEMM cache lists its DeepGEMM keys only for that cache."""
    (tmp_path / "run_dg").mkdir()
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "process_dg"))
    handed = Env.of({"DG_JIT_CACHE_DIR": str(tmp_path / "run_dg")})
    path = str(tmp_path / MANIFEST_NAME)
    fp = {"v": 1}
    assert manifest.update_manifest(path, {"deep_gemm": {"k1"}}, fp, env=handed) == 1
    assert manifest.read_manifest(path, fp, env=handed) == {"deep_gemm": {"k1"}}
    assert manifest.read_manifest(path, fp) == {}  # this process's DeepGEMM cache is another (absent) one
