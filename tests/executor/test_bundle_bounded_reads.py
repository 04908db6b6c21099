"""Every read of a bundle ends (issue 55 item 3): `warmup bundle inspect /dev/zero` read forever and a
FIFO blocked the open; a tar header may declare any size and a gzip stream inflate to any size.
A bundle that is not a regular file is one line, exit 2, before a byte is read; the decompressed
tar is read no further than its manifest (and then the members it lists) can take."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import pytest

from executor.bundle import archive, reading
from planner.errors import PlanError
from test_bundle import built, fingerprint  # noqa: F401 - fixtures

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def inspect_in_a_process(path: str) -> subprocess.CompletedProcess:
    """`warmup bundle inspect PATH` in a process of its own: a read that never ends fails the
    test at the timeout instead of hanging the run."""
    return subprocess.run([sys.executable, "-m", "planner", "bundle", "inspect", path], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("special, kind", [("/dev/zero", "is a device"), ("fifo", "is a FIFO")])
def test_a_bundle_that_is_no_regular_file_is_one_line_exit_2(tmp_path, special, kind):
    path = special
    if special == "fifo":  # no writer: a plain open blocks for ever
        path = str(tmp_path / "b.warmup")
        os.mkfifo(path)
    done = inspect_in_a_process(path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"warmup: error: {path}: {kind}, expected a warmup bundle (a regular file)\n"


def test_a_directory_is_refused_as_such(tmp_path):
    """Read as a bundle file, a directory is refused as such (the commands open a directory for the one
    bundle it holds: executor/bundle/sources/directory.py, tests/executor/test_bundle_cli_sources.py)."""
    with pytest.raises(PlanError) as refused:
        archive.read_manifest(str(tmp_path))
    assert str(refused.value) == f"{tmp_path}: is a directory, expected a warmup bundle (a regular file)"


def test_a_link_to_a_bundle_is_read_through(built, tmp_path):
    out, manifest = built
    os.symlink(out, tmp_path / "link.warmup")
    assert archive.read_manifest(str(tmp_path / "link.warmup")) == manifest


def rewrite_with_pax(src, dest, member_name: str, size: int) -> None:
    """A copy of the bundle where `member_name` carries a pax extended header of `size` bytes (a
    comment: tarfile reads the whole header into memory before it yields the member)."""
    with tarfile.open(src) as tin, tarfile.open(dest, "w:gz", format=tarfile.PAX_FORMAT) as tout:
        for member in tin:
            data = tin.extractfile(member).read()
            if member.name == member_name:
                member.pax_headers = {"comment": "x" * size}
            tout.addfile(member, io.BytesIO(data))


def test_a_manifest_header_past_the_limit_is_refused_after_reading_no_more(built, tmp_path, monkeypatch):
    out, _ = built
    monkeypatch.setattr(reading, "MAX_MANIFEST_BYTES", 1 << 20)
    rewrite_with_pax(out, tmp_path / "big.warmup", archive.MANIFEST, 2 << 20)
    with pytest.raises(PlanError) as caught:
        archive.read_manifest(str(tmp_path / "big.warmup"))
    assert str(caught.value).startswith(f"{tmp_path / 'big.warmup'}: refused: its manifest, the first member, is over")
    assert "\n" not in str(caught.value)


def test_a_member_header_past_what_the_manifest_lists_is_refused(built, tmp_path, monkeypatch):
    out, manifest = built
    monkeypatch.setattr(reading, "MAX_MANIFEST_BYTES", 1 << 20)
    rewrite_with_pax(out, tmp_path / "big.warmup", manifest.files[0].path, 4 << 20)
    assert archive.read_manifest(str(tmp_path / "big.warmup")) == manifest  # the manifest itself is fine
    with pytest.raises(PlanError, match="refused: it holds more than the members its manifest lists"):
        archive.verify_members(str(tmp_path / "big.warmup"), manifest, str(tmp_path / "staging"))
    archive.verify_members(str(out), manifest, str(tmp_path / "staging-ok"))  # the bundle as built passes
