"""Warmup bundles on CPU: caches planted in temporary directories the way each DeepGEMM version and
Triton write them; the warmup itself is stood in for (a fake `run_execute` that fills the fresh caches)
and so is the GPU part of the fingerprint. What is real: the tar, the manifest, the checks, the
re-keying of DeepGEMM 2.5/2.6 entries for another install path, placement under the lock."""

from __future__ import annotations

import json
import multiprocessing
import os
import tarfile

import pytest

from executor import precompile
from executor.bundle import archive, cli, environment, inspect_report, ops
from executor.caches import deep_gemm_install, deep_gemm_rekey, registry
from executor.caches import triton as triton_family
from executor.caches.registry import CacheRoots

OLD_INC = "/build/site-packages/vllm/third_party/deep_gemm/include"
NEW_INC = "/serve/other/deep_gemm/include"
CODE = (b"// Includes' hash value: 0123\n#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>\n"
        b"auto ptr = reinterpret_cast<void*>(&sm90_fp8_gemm_1d2d_impl<\n cute::UMMA::Major::K,\n 0, 7168, 2048,\n"
        b" 1,\n 64, 112, 128,\n 128, 128, 64,\n 9,\n 128, 128,\n 1, false,\n 132, GemmType::Normal,\n"
        b" cutlass::bfloat16_t, EpilogueIdentity\n>);\n")
KEY = "sm90_fp8_gemm_1d2d:n=7168,k=2048,block_m=64,block_n=112,block_k=128,stages=9,multicast=1,sms=132"
CONTEXT = deep_gemm_rekey.candidates("13.0", "90a")[0]


def elf(payload: bytes = b"") -> bytes:
    """A whole little-endian 64-bit ELF file: its header, `payload`, then one section header at the
    end, where compilers put them (so a file cut short loses it): what the install's check of a
    cubin or a shared library takes (executor/caches/checks.py elf_problem)."""
    shoff = 64 + len(payload)
    header = bytearray(b"\x7fELF" + bytes([2, 1, 1]) + bytes(57))
    header[0x28:0x30] = shoff.to_bytes(8, "little")
    header[0x3A:0x3E] = (64).to_bytes(2, "little") + (1).to_bytes(2, "little")
    return bytes(header) + payload + bytes(64)


def fingerprint(version="2.5.0", include=OLD_INC, **changes):
    fp = {"gpu": "NVIDIA H100 80GB HBM3", "num_sms": 132, "capability": "9.0", "driver_major": "580",
          "cuda": "13.0", "nvcc": "13.0", "torch": "2.11.0+cu130", "triton": "3.6.0", "flashinfer": None,
          "deep_gemm_version": version, "deep_gemm_headers": "sha256:h", "deep_gemm_include_dir": include}
    return {**fp, **changes}


def legacy_entry(root, name="sm90_fp8_gemm_1d2d", code=CODE, include=OLD_INC):
    """A 2.5/2.6 entry named by the hash DeepGEMM gives it (deep_gemm_rekey reproduces the formula)."""
    path = root / "cache" / f"kernel.{name}.{CONTEXT.key(name, code, include)}"
    path.mkdir(parents=True)
    (path / "kernel.cu").write_bytes(code)
    (path / "kernel.cubin").write_bytes(elf(name.encode()))
    return path


def deepjit_entry(root, name="sm90_fp8_gemm_1d2d", digest="ab" * 16):
    path = root / "cache" / f"{name}.{digest}"
    path.mkdir(parents=True)
    for f, data in (("kernel.cu", CODE), ("kernel.cubin", elf()), ("meta.json", b"{}"), (".committed", b"")):
        (path / f).write_bytes(data)
    return path


@pytest.fixture
def built(tmp_path, monkeypatch):
    """build() with a stand-in warmup that fills the fresh caches as a 2.5.0 run would."""
    def fake_run(plan, engine, dirs, extra, report_path, keep_report=True):
        root = type(tmp_path)(dirs.deep_gemm)
        legacy_entry(root)
        legacy_entry(root, "transpose_fp32", code=b"// transpose_fp32<512, 64, 16>\n")
        (root / "tmp").mkdir()
        os.makedirs(os.path.join(dirs.triton, "TRITONHASH1"))
        with open(os.path.join(dirs.triton, "TRITONHASH1", "k.cubin"), "wb") as f:
            f.write(elf(b"cubin"))
        with open(os.path.join(dirs.triton, "TRITONHASH1", "__grp__k.json"), "w") as f:  # absolute paths, as Triton
            json.dump({"child_paths": {"k.cubin": os.path.join(dirs.triton, "TRITONHASH1", "k.cubin")}}, f)
        with open(os.path.join(dirs.triton, precompile.MANIFEST_NAME), "w") as f:
            json.dump({"keys": {"triton": ["fp8_gemm:BM=64"], "deep_gemm": [KEY]}}, f)
        with open(dirs.flashinfer, "w") as f:
            f.write("{}")
        return 0, {"digest": "sha256:" + "d" * 64, "status": "ok"}

    monkeypatch.setattr(ops, "run_execute", fake_run)
    monkeypatch.setattr(environment, "measure", lambda: fingerprint())
    out = tmp_path / "b.warmup"
    manifest = ops.build("vllm", "deepseek-v3-fp8-tp8-h200", str(out), [])
    return out, manifest


def test_build_packs_the_plans_caches_with_a_typed_manifest(built):
    out, manifest = built
    assert archive.read_manifest(str(out)) == manifest
    assert manifest.plan_digest == "sha256:" + "d" * 64 and manifest.fingerprint == fingerprint()
    kernels = {k.name: k for k in manifest.deep_gemm}
    assert kernels["sm90_fp8_gemm_1d2d"].key == KEY and kernels["transpose_fp32"].key is None
    assert kernels["sm90_fp8_gemm_1d2d"].context == list(CONTEXT)  # the hash was reproduced
    paths = [f.path for f in manifest.files]
    assert "triton/TRITONHASH1/k.cubin" in paths and "flashinfer/autotune.json" in paths
    assert not any("/tmp/" in p for p in paths)
    assert manifest.keys == {"triton": ["fp8_gemm:BM=64"], "deep_gemm": [KEY]}


def dirs_in(tmp_path, name="dest"):
    return CacheRoots({"deep_gemm": str(tmp_path / name / "dg"), "triton": str(tmp_path / name / "triton"),
                       "flashinfer": str(tmp_path / name / "fi" / "autotune.json")})


def test_install_at_the_same_path(built, tmp_path):
    out, manifest = built
    dirs = dirs_in(tmp_path)
    placed = ops.install(str(out), dirs, fingerprint())
    assert (placed.families["deep_gemm"].new, placed.families["deep_gemm"].rekeyed, placed.families["triton"].new) == (2, 0, 1)
    assert sorted(e.dirname for e in deep_gemm_install.scan(dirs.deep_gemm)) == sorted(k.entry for k in manifest.deep_gemm)
    assert os.path.isfile(dirs.flashinfer)
    doc = json.load(open(os.path.join(dirs.triton, precompile.MANIFEST_NAME)))
    assert doc["keys"]["triton"] == ["fp8_gemm:BM=64"]
    assert not [n for n in os.listdir(dirs.deep_gemm + "/cache") if n.startswith(".warmup")]


def test_installed_triton_entries_name_their_installed_files(built, tmp_path):
    """Triton finds an entry's files through its group file's absolute paths: after install they
    are the installed files, not the building machine's (issue 25: the Triton half never hit)."""
    out, _ = built
    dirs = dirs_in(tmp_path)
    ops.install(str(out), dirs, fingerprint())
    group = json.load(open(os.path.join(dirs.triton, "TRITONHASH1", "__grp__k.json")))
    assert group == {"child_paths": {"k.cubin": os.path.join(dirs.triton, "TRITONHASH1", "k.cubin")}}


def test_install_at_another_path_rekeys_legacy_entries(built, tmp_path):
    out, manifest = built
    dirs = dirs_in(tmp_path)
    placed = ops.install(str(out), dirs, fingerprint(include=NEW_INC))
    assert placed.families["deep_gemm"].rekeyed == 2
    names = {e.name: e.dirname for e in deep_gemm_install.scan(dirs.deep_gemm)}
    assert names["sm90_fp8_gemm_1d2d"] == f"kernel.sm90_fp8_gemm_1d2d.{CONTEXT.key('sm90_fp8_gemm_1d2d', CODE, NEW_INC)}"
    assert names["sm90_fp8_gemm_1d2d"] not in {k.entry for k in manifest.deep_gemm}


def test_an_unreproducible_legacy_key_is_refused_at_another_path(built, tmp_path):
    out, manifest = built
    kernels = [k._replace(context=None) for k in manifest.deep_gemm]
    bad = tmp_path / "bad.warmup"
    rewrite(out, bad, manifest._replace(deep_gemm=kernels))
    with pytest.raises(Exception, match="cannot be reproduced for /serve/other/deep_gemm/include"):
        ops.install(str(bad), dirs_in(tmp_path), fingerprint(include=NEW_INC))
    ops.install(str(bad), dirs_in(tmp_path, "same"), fingerprint())  # at the same path: fine


def test_deepjit_entries_need_no_rekeying(tmp_path, monkeypatch):
    def fake_run(plan, engine, dirs, extra, report_path, keep_report=True):
        deepjit_entry(type(tmp_path)(dirs.deep_gemm))
        return 0, {"digest": "sha256:x"}

    monkeypatch.setattr(ops, "run_execute", fake_run)
    monkeypatch.setattr(environment, "measure", lambda: fingerprint("2.8.1"))
    out = tmp_path / "b.warmup"
    ops.build("vllm", "deepseek-v3-fp8-tp8-h200", str(out), [])
    dirs = dirs_in(tmp_path)
    placed = ops.install(str(out), dirs, fingerprint("2.8.1", include=NEW_INC))
    assert (placed.families["deep_gemm"].new, placed.families["deep_gemm"].rekeyed) == (1, 0)
    [entry] = deep_gemm_install.scan(dirs.deep_gemm)
    assert entry.layout == "deepjit" and entry.dirname == "sm90_fp8_gemm_1d2d." + "ab" * 16


@pytest.mark.parametrize("field, value", [("gpu", "NVIDIA H200"), ("deep_gemm_version", "2.8.1"),
                                          ("driver_major", "575"), ("deep_gemm_headers", "sha256:other")])
def test_fingerprint_mismatch_is_one_line_naming_field_and_values(built, tmp_path, capsys, monkeypatch, field, value):
    out, _ = built
    monkeypatch.setattr(environment, "measure", lambda: fingerprint(**{field: value}))
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "dest"))
    code = cli.cmd_bundle(parse(["install", str(out), "--triton-cache", str(tmp_path / "t")]))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"({field}: bundle {fingerprint()[field]!r}, here {value!r})" in err
    assert not (tmp_path / "dest" / "cache").exists() and not (tmp_path / "t").exists()


def parse(argv):
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers())
    return parser.parse_args(["bundle", *argv])


def rewrite(src, dest, manifest, drop=None, corrupt=None):
    """A copy of the bundle with another manifest, a member dropped or a member's bytes changed."""
    with tarfile.open(src) as tin, tarfile.open(dest, "w:gz") as tout:
        for member in tin:
            data = tin.extractfile(member).read()
            if member.name == archive.MANIFEST:
                data = manifest.to_json().encode()
            if member.name == drop:
                continue
            if member.name == corrupt:
                data = data[:-1] + b"!"
            member.size = len(data)
            import io
            tout.addfile(member, io.BytesIO(data))


def test_truncated_corrupted_and_foreign_files_are_one_line_and_write_nothing(built, tmp_path):
    out, manifest = built
    cubin = next(f.path for f in manifest.files if f.path.endswith("kernel.cubin"))
    cases = {"truncated": out.read_bytes()[: out.stat().st_size // 2], "foreign": b"hello\n"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    rewrite(out, tmp_path / "corrupted", manifest, corrupt=cubin)
    rewrite(out, tmp_path / "missing", manifest, drop=cubin)
    for name, why in (("truncated", "truncated or corrupted|not a readable"), ("foreign", "not a readable"),
                      ("corrupted", "does not match its sha256"), ("missing", "listed files missing")):
        dirs = dirs_in(tmp_path, "d-" + name)
        with pytest.raises(Exception, match=why) as caught:
            ops.install(str(tmp_path / name), dirs, fingerprint())
        assert "\n" not in str(caught.value)
        assert not os.path.exists(os.path.join(dirs.deep_gemm, "cache")) or not os.listdir(
            os.path.join(dirs.deep_gemm, "cache"))


def test_an_existing_complete_entry_wins(built, tmp_path):
    out, manifest = built
    dirs = dirs_in(tmp_path)
    legacy = next(k for k in manifest.deep_gemm if k.key)
    mine = os.path.join(dirs.deep_gemm, "cache", legacy.entry)
    os.makedirs(mine)
    with open(os.path.join(mine, "kernel.cubin"), "wb") as f:
        f.write(b"theirs")
    placed = ops.install(str(out), dirs, fingerprint())
    assert (placed.families["deep_gemm"].new, placed.families["deep_gemm"].kept) == (1, 1)
    assert open(os.path.join(mine, "kernel.cubin"), "rb").read() == b"theirs"


def _install_in_child(path, dirs):
    ops.install(path, CacheRoots(dirs), fingerprint())


def test_concurrent_installers_leave_complete_entries_once(built, tmp_path):
    out, manifest = built
    dirs = dirs_in(tmp_path)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_install_in_child, args=(str(out), dict(dirs))) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    entries = deep_gemm_install.scan(dirs.deep_gemm)
    assert sorted(e.dirname for e in entries) == sorted(k.entry for k in manifest.deep_gemm)
    assert not [n for n in os.listdir(os.path.join(dirs.deep_gemm, "cache")) if n.startswith(".warmup")]


def test_inspect_checks_members_and_prints_a_table_per_family(built, capsys):
    out, manifest = built
    assert cli.cmd_bundle(parse(["inspect", str(out)])) == 0
    lines = capsys.readouterr().out.splitlines()
    text = "\n".join(lines)
    assert "plan vllm, engine deepseek-v3-fp8-tp8-h200" in text
    start = lines.index("fingerprint (install refuses a machine that differs):")
    rows = {line.split()[0]: line.split(None, 1)[1].strip() for line in lines[start + 1:start + 13]}
    assert rows["deep_gemm_version"] == "2.5.0" and rows["gpu"] == fingerprint()["gpu"]
    assert "(may differ: re-keyed)" in lines[start + 12]
    assert f"members: {len(manifest.files)} files, each a listed regular file matching its size and sha256" in text
    table = lines[lines.index(next(line for line in lines if line.startswith("family"))):][:5]
    sizes = {k: sum(f.size for f in manifest.files if f.path.startswith(k + "/")) for k in registry.names()}
    assert [row.split() for row in table] == [
        ["family", "entries", "bytes", "plan", "keys", "present", "missing", "extra"],
        ["triton", "1", str(sizes["triton"]), "0", "0", "0", "1"],  # its precompile manifest is no entry
        ["deep_gemm", "2", str(sizes["deep_gemm"]), "141", "1", "140", "0"],
        ["flashinfer", "1", str(sizes["flashinfer"]), "0", "0", "0", "0"],
        ["total", "4", str(sum(sizes.values())), "141", "1", "140", "1"]]
    missing = lines.index("deep_gemm: plan keys missing (140):")
    assert len([line for line in lines[missing + 1:missing + 21] if line.startswith("  sm90_")]) == inspect_report.LIST_LIMIT
    assert lines[missing + 21] == "  ... and 120 more"
    assert lines[lines.index("triton: keys in the bundle, not in the plan (1):") + 1] == "  fp8_gemm:BM=64"
    assert "helper kernels (no plan key, compiled with the first call): transpose_fp32" in text
    assert "re-keyable for another install path: 2 of 2" in text


def test_inspect_output_is_deterministic(built, capsys):
    out, _ = built
    runs = []
    for _ in range(2):
        assert cli.cmd_bundle(parse(["inspect", str(out)])) == 0
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1]


def test_inspect_without_the_plan_here_still_shows_the_bundle(built, tmp_path, capsys):
    out, manifest = built
    moved = tmp_path / "moved.warmup"
    rewrite(out, moved, manifest._replace(plan="/gone/my-plan.yaml"))
    assert cli.cmd_bundle(parse(["inspect", str(moved)])) == 0
    lines = capsys.readouterr().out.splitlines()
    assert ["deep_gemm", "2"] == next(line for line in lines if line.startswith("deep_gemm ")).split()[:2]
    assert next(line for line in lines if line.startswith("total")).split()[3:] == ["-"] * 4
    assert any(line.startswith("plan keys not compared: plan /gone/my-plan.yaml on deepseek-v3-fp8-tp8-h200 "
                               "does not expand here (") for line in lines)


def test_verify_installs_fresh_and_fails_on_any_compile(built, monkeypatch, capsys):
    out, _ = built
    runs = []

    def fake_run(plan, engine, dirs, extra, report_path, keep_report=True):
        runs.append((plan, engine, extra, sorted(e.dirname for e in deep_gemm_install.scan(dirs.deep_gemm))))
        return 0, {"stages": [{"stage": "deep_gemm", "wall_s": 0.08}], "jit_monitor": {"post_seal_events": []}}

    monkeypatch.setattr(ops, "run_execute", fake_run)
    assert cli.cmd_bundle(parse(["verify", str(out), "--runner", "none"])) == 0
    [(plan, engine, extra, entries)] = runs
    assert (plan, engine, len(entries)) == ("vllm", "deepseek-v3-fp8-tp8-h200", 2)
    assert {"--expect-cached", "error", "0"} <= set(extra)
    assert "bundle verify: ok: 0 compiles" in capsys.readouterr().out
    report = {"jit_monitor": {"post_seal_events": [{"kernel": "sm90_fp8_gemm_1d2d"}]}}
    assert cli.verdict(1, report) == 1
    assert "FAILED: 1 compiles (sm90_fp8_gemm_1d2d)" in capsys.readouterr().out


def test_verify_names_what_the_run_never_loaded_and_fails_on_it_when_asked(built, monkeypatch, capsys):
    from executor.bundle import usage

    out, _ = built
    monkeypatch.setattr(usage, "records_reads", lambda root: True)

    def loads_one_kernel(plan, engine, dirs, extra, report_path, keep_report=True):
        first = sorted(e.path for e in deep_gemm_install.scan(dirs.deep_gemm))[0]
        with open(os.path.join(first, "kernel.cubin"), "rb") as f:  # DeepGEMM loads one of the two
            f.read()
        return 0, {"stages": [], "jit_monitor": {"post_seal_events": []}}

    monkeypatch.setattr(ops, "run_execute", loads_one_kernel)
    assert cli.cmd_bundle(parse(["verify", str(out), "--runner", "none"])) == 0
    printed = capsys.readouterr().out
    assert "bundle use: deep_gemm: 2 installed, 1 loaded, 1 never loaded, 0 compiled again, 0 new" in printed
    assert cli.cmd_bundle(parse(["verify", str(out), "--runner", "none", "--inert", "error"])) == 1
    assert "bundle verify: FAILED: " in capsys.readouterr().out


def test_fingerprint_fields_and_mismatch():
    assert environment.mismatch(fingerprint(), fingerprint(include=NEW_INC)) is None  # handled by re-keying
    assert environment.mismatch(fingerprint(), fingerprint(nvcc="12.9")) == "nvcc: bundle '13.0', here '12.9'"
    assert {"gpu", "num_sms", "capability", "driver_major", "cuda", "nvcc", "torch", "triton", "deep_gemm_version",
            "deep_gemm_headers", "flashinfer"} == set(environment.FIELDS)


def test_a_bundle_leaves_the_precompile_claims_behind(tmp_path):
    """Claims say which process of the building machine compiles what: not the installer's business."""
    base = tmp_path / "triton"
    (base / "HASH1").mkdir(parents=True)
    (base / "HASH1" / "k.cubin").write_bytes(b"cubin")
    (base / "warmup-claims" / "ns" / "key").mkdir(parents=True)
    (base / "warmup-claims" / "ns" / "key" / "done").write_text("{}")
    assert sorted(triton_family.collect(str(base), {})[0]) == ["triton/HASH1/k.cubin"]


def test_a_bundle_that_does_not_fit_is_refused_in_one_line_before_anything_is_written(built, tmp_path, monkeypatch):
    from collections import namedtuple

    from planner.errors import PlanError

    out, manifest = built
    total = sum(f.size for f in manifest.files)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(archive.shutil, "disk_usage", lambda path: usage(10 * total, 9 * total, total - 1))
    dirs = dirs_in(tmp_path)
    with pytest.raises(PlanError) as caught:
        ops.install(str(out), dirs, fingerprint())
    line = str(caught.value)
    assert "\n" not in line and f"needs {total / 1048576:.1f} MiB on the filesystem of" in line
    assert "nothing was written" in line and not os.path.exists(tmp_path / "dest")
    monkeypatch.setattr(archive.shutil, "disk_usage", lambda path: usage(10 * total, 0, 10 * total))
    assert ops.install(str(out), dirs, fingerprint()).families["deep_gemm"].new == 2      # room enough: installed


def test_the_free_space_is_counted_per_filesystem_for_staging_and_each_destination(tmp_path, monkeypatch):
    from collections import namedtuple

    files = [archive.FileRecord("triton/a", "0" * 64, 700), archive.FileRecord("deep_gemm/b", "0" * 64, 300)]
    manifest = archive.Manifest(format=archive.FORMAT, plan="p", engine="e", plan_digest="", fingerprint={},
                                files=files, deep_gemm=[], keys={})
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(archive.shutil, "disk_usage", lambda path: usage(0, 0, 1999))
    dest = {"triton": str(tmp_path / "t" / "new"), "deep_gemm": str(tmp_path / "d")}
    # one filesystem: the staging copy (1000 bytes) and both families (1000 more) do not fit in 1999
    assert archive.space_problem(manifest, str(tmp_path), dest).startswith("needs 0.0 MiB on the filesystem of")
    monkeypatch.setattr(archive.shutil, "disk_usage", lambda path: usage(0, 0, 2000))
    assert archive.space_problem(manifest, str(tmp_path), dest) is None


def test_a_member_never_writes_more_than_the_manifest_lists(built, tmp_path, monkeypatch):
    from planner.errors import PlanError

    out, manifest = built
    first = manifest.files[0]
    shrunk = manifest._replace(files=[f._replace(size=f.size - 1) if f is first else f for f in manifest.files])
    monkeypatch.setattr(archive, "member_problem", lambda member, expected, seen: None)  # a header that lies
    with pytest.raises(PlanError, match=f"member '{first.path}' holds more than the {first.size - 1} bytes"):
        archive.verify_members(str(out), shrunk, str(tmp_path / "staging"))
