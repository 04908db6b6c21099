"""What an installed bundle's entries became after ready (issue 35 item 3, executor/bundle/usage.py)
and the one check of its members per machine (item 2, executor/bundle/staging.py), on CPU."""

from __future__ import annotations

import os
import threading
import time

import pytest

from executor.bundle import archive, staging, startup, usage
from executor.caches.tree import files_under
from executor.caches.registry import CacheRoots
from test_startup_bundle import environ, fill_startup, vllm_fp


@pytest.fixture(autouse=True)
def reads_recorded(monkeypatch):
    """Every root records reads, as relatime does (the probe itself is tested below)."""
    monkeypatch.setattr(usage, "records_reads", lambda root: True)
    for key in ("TRITON_CACHE_DIR", "DG_JIT_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)


def put(path, text="x"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def installed_tree(tmp_path):
    """A Triton root and a DeepGEMM root with two entries each, as an install placed them."""
    triton, dg = tmp_path / "triton", tmp_path / "dg"
    placed = {"triton": [str(tmp_path / "triton" / h) for h in ("AAAA", "BBBB")],
              "deep_gemm": [str(dg / "cache" / "kernel.sm90_fp8_gemm_1d2d.1111"), str(dg / "cache" / "kernel.m_grouped.2222")]}
    for h, name in (("AAAA", "_topk_topp_kernel"), ("BBBB", "fused_moe_kernel")):
        put(str(triton / h / f"{name}.json"), "{}")
        put(str(triton / h / f"{name}.cubin"))
        put(str(triton / h / f"__grp__{name}.json"), "{}")
    for entry in placed["deep_gemm"]:
        put(os.path.join(entry, "kernel.cubin"))
    return {"triton": str(triton), "deep_gemm": str(dg)}, placed


def test_a_read_entry_is_loaded_an_unread_one_is_named(tmp_path):
    roots, placed = installed_tree(tmp_path)
    record = usage.mark("b.warmup", roots, placed)
    assert all(os.stat(f).st_atime == usage.UNREAD for p in placed["triton"] for f in files_under(p))
    open(os.path.join(roots["triton"], "AAAA", "_topk_topp_kernel.cubin")).read()  # Triton loads one kernel
    uses = {u.family: u for u in usage.check(record)}
    assert (uses["triton"].installed, uses["triton"].loaded, uses["triton"].never_loaded) == (2, 1, ("BBBB",))
    assert uses["deep_gemm"].never_loaded == ("cache/kernel.m_grouped.2222", "cache/kernel.sm90_fp8_gemm_1d2d.1111")
    assert usage.inert_count(list(uses.values())) == 3


def test_the_same_kernel_written_again_beside_an_unread_one_is_compiled_again(tmp_path):
    roots, placed = installed_tree(tmp_path)
    record = usage.mark("b.warmup", roots, placed)
    open(os.path.join(roots["triton"], "AAAA", "_topk_topp_kernel.cubin")).read()
    put(os.path.join(roots["triton"], "CCCC", "fused_moe_kernel.json"), "{}")      # BBBB's kernel, another key
    put(os.path.join(roots["triton"], "DDDD", "_fwd_kernel.json"), "{}")           # a kernel the bundle lacked
    put(os.path.join(roots["deep_gemm"], "cache", "kernel.m_grouped.9999", "kernel.cubin"))
    put(os.path.join(roots["triton"], "warmup-precompiled.json"), "{}")            # the warmup's own file
    put(os.path.join(roots["triton"], "warmup-claims", "k"), "")
    uses = {u.family: u for u in usage.check(record)}
    assert uses["triton"].compiled_again == ("BBBB",) and uses["triton"].new == ("DDDD",)
    assert uses["triton"].inert == ("BBBB",)
    assert uses["deep_gemm"].compiled_again == ("cache/kernel.m_grouped.2222",) and uses["deep_gemm"].new == ()
    assert "  compiled again: triton/BBBB" in usage.lines([uses["triton"]])


def test_a_torch_compile_directory_under_another_hash_is_compiled_again(tmp_path):
    root = tmp_path / "tc"
    put(str(root / "abcdef0123" / "rank_0_0" / "backbone" / "artifact"))
    record = usage.mark("b", {"torch_compile": str(root)}, {"torch_compile": [str(root / "abcdef0123")]})
    put(str(root / "99887766aa" / "rank_0_0" / "backbone" / "artifact"))
    (use,) = usage.check(record)
    assert use.never_loaded == use.compiled_again == ("abcdef0123/rank_0_0/backbone",) and use.new == ()


def test_where_reads_are_not_recorded_nothing_is_called_never_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(usage, "records_reads", lambda root: False)
    roots, placed = installed_tree(tmp_path)
    (triton, _) = sorted(usage.check(usage.mark("b", roots, placed)), key=lambda u: u.family != "triton")
    assert triton.never_loaded == () and not triton.tracked
    assert "reads not recorded on this filesystem" in usage.lines([triton])[0]


def test_the_probe_says_whether_the_filesystem_records_reads(tmp_path, monkeypatch):
    monkeypatch.undo()
    assert usage.records_reads(str(tmp_path)) in (True, False)
    assert os.listdir(tmp_path) == []  # the probe file is gone
    assert usage.records_reads(str(tmp_path / "missing")) is False


def test_the_record_round_trips_and_merges_the_early_install(tmp_path):
    roots, placed = installed_tree(tmp_path)
    first = usage.mark("b", roots, {"triton": placed["triton"]})
    later = usage.mark("b", roots, {"deep_gemm": placed["deep_gemm"]})
    path = usage.record_path(str(tmp_path / "vllm"), "d" * 64)
    usage.save(first, path)
    usage.save(later, path)
    again = usage.load(path)
    assert set(again.entries) == {"triton", "deep_gemm"} and again.at["triton"] == first.at["triton"]
    assert usage.load(str(tmp_path / "none.json")) is None


# --- staging: one check of the members per machine ---------------------------------------------

@pytest.fixture
def startup_bundle(tmp_path, monkeypatch):
    monkeypatch.setattr(staging.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    out = tmp_path / "s.warmup"
    manifest = startup.build(str(out), fill_startup(tmp_path / "build"), vllm_fp(), startup.Origin())
    return out, manifest


def counting(monkeypatch):
    calls = []
    real = archive.verify_members

    def verify(path, manifest, dest=None, only=None):
        calls.append(only)
        return real(path, manifest, dest, only)
    monkeypatch.setattr(archive, "verify_members", verify)
    return calls


def test_the_members_are_checked_once_and_the_install_only_renames(startup_bundle, tmp_path, monkeypatch):
    out, manifest = startup_bundle
    calls = counting(monkeypatch)
    threads = [staging.prepare_in_background(str(out)) for _ in range(3)]  # API server, engine core, worker
    for t in threads:
        t.join(30)
    assert calls == [None]
    roots = CacheRoots.resolve(environ(tmp_path / "serve"))
    placed = startup.install(str(out), roots, vllm_fp(), str(tmp_path / "serve" / "vllm"))
    assert calls == [None] and placed.families["torch_compile"].new > 0
    assert not os.path.exists(staging.staging_dir(manifest))  # consumed, then removed
    assert os.path.isfile(usage.record_path(str(tmp_path / "serve" / "vllm"), manifest.digest()))


def test_an_install_waits_for_a_check_in_progress_then_uses_it(startup_bundle, tmp_path, monkeypatch):
    out, manifest = startup_bundle
    calls = counting(monkeypatch)
    folder = staging.staging_dir(manifest)
    release = threading.Event()
    with staging._lock(folder):
        worker = threading.Thread(target=lambda: (startup.install(str(out), CacheRoots.resolve(
            environ(tmp_path / "serve")), vllm_fp(), str(tmp_path / "r")), release.set()))
        worker.start()
        time.sleep(0.3)
        assert not release.is_set()  # waiting on the lock of the check in progress
        staging._check_into(str(out), manifest, folder)
    worker.join(30)
    assert release.is_set() and calls == [None]


def test_a_half_extracted_staging_directory_is_checked_again(startup_bundle):
    out, manifest = startup_bundle
    folder = staging.staging_dir(manifest)
    put(os.path.join(folder, "triton", "partial"))  # its process was killed: no .checked
    assert staging.prepare(str(out)) == folder
    assert os.path.exists(os.path.join(folder, staging.CHECKED))
    assert not os.path.exists(os.path.join(folder, "triton", "partial"))


def test_a_refused_bundle_leaves_no_staging_directory(startup_bundle, tmp_path):
    out, manifest = startup_bundle
    staging.prepare(str(out))
    with pytest.raises(archive.PlanError, match="another environment"):
        startup.install(str(out), CacheRoots.resolve(environ(tmp_path / "serve")),
                        vllm_fp(gpu="NVIDIA H200"))
    assert not os.path.exists(staging.staging_dir(manifest))


def test_the_early_install_reads_only_the_model_info_at_the_head_of_the_tar(startup_bundle, tmp_path, monkeypatch):
    out, manifest = startup_bundle
    calls = counting(monkeypatch)
    members = archive.tarfile.open(str(out)).getnames()
    assert members[1].startswith("vllm_modelinfo/")  # written first, after the manifest
    roots = CacheRoots.resolve(environ(tmp_path / "serve"))
    placed = startup.install_early(str(out), roots, "0.25.0", str(tmp_path / "r"))
    assert calls == [("vllm_modelinfo",)] and placed.families["vllm_modelinfo"].new == 1
    assert not os.path.exists(roots.torch_compile)


def test_a_second_rank_finds_the_bundle_placed_and_checks_nothing_again(startup_bundle, tmp_path, monkeypatch):
    out, manifest = startup_bundle
    roots = CacheRoots.resolve(environ(tmp_path / "serve"))
    first = startup.install(str(out), roots, vllm_fp(), str(tmp_path / "r"))
    assert first.installed is not None
    calls = counting(monkeypatch)
    again = startup.install(str(out), roots, vllm_fp(), str(tmp_path / "r"))  # rank 1, after rank 0
    assert calls == [] and again.installed is None
    assert all(p.new == 0 and p.kept > 0 for p in again.families.values())
    assert startup.all_in_place(manifest, roots) and not os.path.exists(staging.staging_dir(manifest))
    os.unlink(os.path.join(roots.torch_compile, "torch_aot_compile", os.listdir(
        os.path.join(roots.torch_compile, "torch_aot_compile"))[0], "rank_0_0", "model"))
    assert not startup.all_in_place(manifest, roots)  # one file gone: the bundle is placed again
