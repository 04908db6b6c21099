"""What `warmup bundle` refuses, and how: `build` on a machine without a CUDA device (one line, exit
1, before any work), and members that `install` and `inspect` refuse through one check (one line
naming the member and the reason, exit 2, nothing written). Bundles and caches as in
test_bundle.py: the warmup is stood in for, the tar and the checks are real."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import pytest

from executor.bundle import archive, cli, environment, ops
from test_bundle import built, dirs_in, fingerprint, parse, rewrite  # noqa: F401 - `built` is a fixture

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAN, ENGINE = "vllm", "deepseek-v3-fp8-tp8-h200"
NO_DEVICE = "warmup: error: bundle build needs a CUDA device (torch.cuda.is_available() is False)\n"


def no_warmup(*args, **kwargs):
    raise AssertionError("the warmup ran")


# --- build without a CUDA device --------------------------------------------------------------------

@pytest.mark.parametrize("fp, line", [(fingerprint(gpu=None, num_sms=None, capability=None), NO_DEVICE),
                                      (fingerprint(torch=None, gpu=None),
                                       "warmup: error: bundle build needs a CUDA device (torch is not installed)\n")])
def test_build_without_a_device_is_one_line_exit_1_before_any_work(tmp_path, monkeypatch, capsys, fp, line):
    monkeypatch.setattr(environment, "measure", lambda: fp)
    monkeypatch.setattr(ops, "run_execute", no_warmup)
    monkeypatch.setattr(ops.tempfile, "mkdtemp", no_warmup)
    out = tmp_path / "b.warmup"
    code = cli.cmd_bundle(parse(["build", PLAN, "--engine", ENGINE, "-o", str(out), "--report", str(tmp_path / "r")]))
    assert (code, capsys.readouterr()) == (1, ("", line))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv, why", [
    (["build", PLAN, "--engine", "no-such-engine", "-o", "OUT"], "no-such-engine"),
    (["build", "no-such-plan", "--engine", ENGINE, "-o", "OUT"], "no-such-plan"),
    (["build", PLAN, "--engine", ENGINE, "-o", "TMP"], "cannot write: is a directory"),
    (["build", PLAN, "--engine", ENGINE, "-o", ""], "'': cannot write: an empty file name"),
    (["build", PLAN, "--engine", ENGINE, "-o", "TMP/new/b.warmup"], "cannot write: directory TMP/new does not exist"),
    (["build", PLAN, "--engine", ENGINE, "-o", "OUT", "--report", "TMP/"], "cannot write: names a directory")])
def test_build_refuses_invalid_input_first_exit_2(tmp_path, monkeypatch, capsys, argv, why):
    monkeypatch.setattr(environment, "measure", no_warmup)
    argv = [a.replace("OUT", str(tmp_path / "b.warmup")).replace("TMP", str(tmp_path)) for a in argv]
    why = why.replace("TMP", str(tmp_path))
    assert cli.cmd_bundle(parse(argv)) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("warmup: error: ") and why in err
    assert os.listdir(tmp_path) == []


def test_build_refuses_an_output_it_reads_and_stdout_exit_2(tmp_path, monkeypatch, capsys):
    """-o onto the engine the build reads would lose it; -o - would send an archive to a terminal."""
    from planner.api import load_engine

    monkeypatch.setattr(environment, "measure", no_warmup)
    engine = tmp_path / "e.yaml"
    with open(load_engine(ENGINE).file, encoding="utf-8") as f:
        engine.write_text(f.read())
    before = engine.read_bytes()
    for out, why in ((str(engine), "an input of this command"), ("-", "a bundle is a binary file")):
        assert cli.cmd_bundle(parse(["build", PLAN, "--engine", str(engine), "-o", out])) == 2
        stdout, err = capsys.readouterr()
        assert stdout == "" and err.count("\n") == 1 and why in err
    assert os.listdir(tmp_path) == ["e.yaml"] and engine.read_bytes() == before


@pytest.mark.parametrize("code, status, exit_code", [(1, "failed", 1), (2, "invalid input", 2)])
def test_a_failed_warmup_writes_nothing_and_names_no_removed_file(tmp_path, monkeypatch, capsys, code, status,
                                                                   exit_code):
    kept = []

    def fake_run(plan, engine, dirs, extra, report_path, keep_report=True):
        kept.append(keep_report)
        return code, {"status": status}

    monkeypatch.setattr(environment, "measure", lambda: fingerprint())
    monkeypatch.setattr(ops, "run_execute", fake_run)
    out = tmp_path / "b.warmup"
    assert cli.cmd_bundle(parse(["build", PLAN, "--engine", ENGINE, "-o", str(out)])) == exit_code
    where = "vllm: " if code == 2 else ""
    assert capsys.readouterr().err == (f"warmup: error: {where}the plan's warmup failed (exit {code}, {status}): "
                                       "no bundle written\n")
    assert kept == [False] and os.listdir(tmp_path) == []


def test_a_temporary_report_is_not_announced_a_kept_one_is(capfd):
    script = "import sys; print('report: /tmp/gone/report.json', file=sys.stderr); print('other', file=sys.stderr)"
    assert ops._run_passing_stderr([sys.executable, "-c", script], dict(os.environ),
                                   drop="report: /tmp/gone/report.json") == 0
    assert capfd.readouterr().err == "other\n"
    assert ops._run_passing_stderr([sys.executable, "-c", script], dict(os.environ), drop=None) == 0
    assert capfd.readouterr().err == "report: /tmp/gone/report.json\nother\n"


def test_build_writes_through_a_symlink(built, tmp_path, monkeypatch):
    out, _ = built
    target, link = tmp_path / "real.warmup", tmp_path / "link.warmup"
    target.write_bytes(b"old")
    target.chmod(0o640)
    link.symlink_to(target)
    monkeypatch.setattr(ops, "run_execute", lambda *a, **k: (0, {"digest": "sha256:x"}))
    manifest = ops.build(PLAN, ENGINE, str(link), [])
    assert link.is_symlink() and archive.read_manifest(str(target)) == manifest
    assert oct(target.stat().st_mode & 0o777) == "0o640"
    assert sorted(os.listdir(tmp_path)) == sorted(["b.warmup", "real.warmup", "link.warmup"])


def test_help_says_what_build_needs_and_its_exit_codes():
    assert "1 verify saw a compile, a step failed, or build cannot" in cli.__doc__
    assert "no CUDA device" in cli.__doc__ and "must have a CUDA device (exit 1" in " ".join(cli.BUILD_HELP.split())


def test_build_on_this_machine_without_cuda(tmp_path):
    """The real command, end to end, where there is no GPU: one line, exit 1, in seconds."""
    if environment.measure().get("gpu"):
        pytest.skip("a CUDA device is here: the build would run")
    out = tmp_path / "b.warmup"
    proc = subprocess.run([sys.executable, "-m", "executor.cli", "bundle", "build", PLAN, "--engine", ENGINE,
                           "-o", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", NO_DEVICE)
    assert os.listdir(tmp_path) == []


# --- members install and inspect refuse --------------------------------------------------------------

def member(name, kind=tarfile.REGTYPE, linkname="", data=b""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, linkname, len(data)
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info, data


def with_member(src, dest, info, data=b""):
    """A copy of the bundle with one more member at the end."""
    with tarfile.open(src) as tin, tarfile.open(dest, "w:gz") as tout:
        for m in tin:
            tout.addfile(m, tin.extractfile(m))
        tout.addfile(info, io.BytesIO(data) if info.isfile() else None)


HOSTILE = {
    "absolute": (member("/tmp/evil-bundle-member", data=b"x"), "has an absolute path"),
    "dotdot": (member("triton/../../evil", data=b"x"), "has '..' in its path"),
    "symlink-out": (member("triton/link", tarfile.SYMTYPE, "/etc/passwd"),
                    "is a symbolic link out of the tree (to '/etc/passwd'); a bundle holds regular files only"),
    "symlink-up": (member("triton/link", tarfile.SYMTYPE, "../../x"), "is a symbolic link out of the tree"),
    "symlink-in": (member("triton/link", tarfile.SYMTYPE, "TRITONHASH1/k.cubin"),
                   "is a symbolic link (to 'TRITONHASH1/k.cubin')"),
    "hardlink-out": (member("triton/hard", tarfile.LNKTYPE, "/etc/passwd"), "is a hard link out of the tree"),
    "char-device": (member("triton/null", tarfile.CHRTYPE), "is a device"),
    "block-device": (member("triton/sda", tarfile.BLKTYPE), "is a device"),
    "fifo": (member("triton/fifo", tarfile.FIFOTYPE), "is a FIFO"),
    "directory": (member("triton/dir", tarfile.DIRTYPE), "is a directory"),
    "unlisted": (member("triton/extra", data=b"x"), "is not listed in the manifest"),
    "twice": (member("flashinfer/autotune.json", data=b"{}"), "appears twice"),
    "second-manifest": (member(archive.MANIFEST, data=b"{}"), "is not listed in the manifest"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_install_and_inspect_refuse_the_same_member_with_one_line(built, tmp_path, capsys, case):
    out, _ = built
    (info, data), why = HOSTILE[case]
    bad = tmp_path / f"{case}.warmup"
    with_member(out, bad, info, data)
    dirs = dirs_in(tmp_path)
    with pytest.raises(archive.PlanError) as caught:
        ops.install(str(bad), dirs, fingerprint())
    line = f"{bad}: refused: member {info.name!r} {why}"
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)
    assert not os.path.exists(tmp_path / "dest" / "dg" / "cache") or not os.listdir(tmp_path / "dest" / "dg" / "cache")
    assert not os.path.exists(tmp_path / "dest" / "triton") and not os.path.lexists("/tmp/evil-bundle-member")
    assert cli.cmd_bundle(parse(["inspect", str(bad)])) == 2
    stdout, err = capsys.readouterr()
    assert stdout == "" and err.startswith(f"warmup: error: {line}") and err.count("\n") == 1


def test_a_member_of_another_size_is_refused(built, tmp_path):
    out, manifest = built
    files = [f._replace(size=f.size + 1) if f.path == "flashinfer/autotune.json" else f for f in manifest.files]
    bad = tmp_path / "size.warmup"
    rewrite(out, bad, manifest._replace(files=files))
    with pytest.raises(archive.PlanError, match="member 'flashinfer/autotune.json' has 2 bytes where the manifest "
                                                "says 3"):
        ops.install(str(bad), dirs_in(tmp_path), fingerprint())


@pytest.mark.parametrize("change, why", [
    (lambda m: m._replace(files=[*m.files, archive.FileRecord("../evil", "0" * 64, 1)]),
     "lists the file '../evil', which has '..' in its path"),
    (lambda m: m._replace(files=[*m.files, archive.FileRecord("/etc/evil", "0" * 64, 1)]),
     "lists the file '/etc/evil', which has an absolute path"),
    (lambda m: m._replace(files=[*m.files, archive.FileRecord("other/x", "0" * 64, 1)]),
     "lists the file 'other/x', which is under no family triton/deep_gemm/flashinfer"),
    (lambda m: m._replace(deep_gemm=[m.deep_gemm[0]._replace(entry="../../cache")]),
     "lists the DeepGEMM entry '../../cache'"),
    (lambda m: m._replace(deep_gemm=[m.deep_gemm[0]._replace(name="a/b")]), "(kernel 'a/b'), not a plain directory")])
def test_a_manifest_naming_paths_out_of_the_tree_is_refused(built, tmp_path, capsys, change, why):
    out, manifest = built
    bad = tmp_path / "manifest.warmup"
    rewrite(out, bad, change(manifest))
    for argv in (["inspect", str(bad)], ["install", str(bad), "--deep-gemm-cache", str(tmp_path / "dg"),
                                         "--triton-cache", str(tmp_path / "t")]):
        assert cli.cmd_bundle(parse(argv)) == 2
        stdout, err = capsys.readouterr()
        assert stdout == "" and err.count("\n") == 1 and f"{bad}: refused: its manifest " in err and why in err
    assert sorted(os.listdir(tmp_path)) == ["b.warmup", "manifest.warmup"]


def test_a_bundle_that_cannot_be_written_is_one_line_and_leaves_nothing(built, tmp_path, monkeypatch):
    out, manifest = built

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(archive, "_write_tar", full_disk)
    with pytest.raises(archive.WriteError, match="new.warmup: cannot write: No space left on device"):
        archive.write_bundle(str(tmp_path / "new.warmup"), manifest, {})
    assert sorted(os.listdir(tmp_path)) == ["b.warmup"]
