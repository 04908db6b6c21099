"""`warmup bundle push` and `pull` show the bytes sent and received on a terminal (issue 55 item 4), one
line rewritten in place and erased before the command's own lines; elsewhere (tests, CI, a pipe) not a
byte more on stderr than before."""

from __future__ import annotations

import io
import re
import sys

import pytest

from planner import progress
from planner.cli import main
from registry_server import serve
from test_bundle_oci import make_bundle, sha


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def registry(tmp_path, monkeypatch):
    server = serve("open", str(tmp_path), monkeypatch)
    yield server
    server.kill()


def bundle_command(capsys, monkeypatch, *argv, terminal: bool):
    """(exit code, stdout, stderr) of `warmup bundle ARGV`, its stderr a terminal or not."""
    stream = Terminal() if terminal else io.StringIO()
    with monkeypatch.context() as m:
        m.setattr(sys, "stderr", stream)
        code = main(["bundle", *argv])
    return code, capsys.readouterr().out, stream.getvalue()


def test_push_and_pull_show_the_bytes_on_a_terminal_only(tmp_path, registry, capsys, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)   # a line from the start (a real one waits a second)
    monkeypatch.setattr(progress, "REDRAW_S", 0.0)  # and at every update
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle, size=3 << 20)
    size = bundle.stat().st_size
    target = f"oci://{registry.address}/warmup/b:v1"

    code, ref, err = bundle_command(capsys, monkeypatch, "push", str(bundle), target, terminal=False)
    assert code == 0 and err.startswith("pushed ") and "\r" not in err and err.count("\n") == 1, err
    other = tmp_path / "other.warmup"  # (a blob the registry has is not sent again)
    make_bundle(other, size=3 << 20, seed=1)
    code, again, shown = bundle_command(capsys, monkeypatch, "push", str(other), target + "-2", terminal=True)
    assert code == 0 and again.startswith(target + "-2@sha256:")
    line, _, message = shown.rpartition("\r")
    assert message.startswith("pushed ") and message.count("\n") == 1  # the command's own line, after the erase
    drawn = [part.strip() for part in line.split("\r") if part.strip()]
    total = f"{size / 2 ** 20:.1f} MiB"
    assert f"warmup bundle push: sending other.warmup  100% ({total[:-4]} of {total})" in " ".join(
        re.sub(r"  \d+ s$", "", part) for part in drawn), drawn
    assert any(re.search(r" (?:[1-9]|[1-9]\d)% ", part) for part in drawn), drawn  # on the way, not only at the end

    out = tmp_path / "p.warmup"
    code, _, err = bundle_command(capsys, monkeypatch, "pull", ref.strip(), "-o", str(out), terminal=False)
    assert code == 0 and err.startswith("pulled ") and "\r" not in err, err
    out.unlink()
    code, pinned, shown = bundle_command(capsys, monkeypatch, "pull", ref.strip(), "-o", str(out), terminal=True)
    assert code == 0 and pinned == ref and sha(out) == sha(bundle)
    line, _, message = shown.rpartition("\r")
    assert message.startswith("pulled ")
    drawn = " ".join(re.sub(r"  \d+ s$", "", part.strip()) for part in line.split("\r"))
    assert f"warmup bundle pull: receiving warmup/b  100% ({total[:-4]} of {total})" in drawn, drawn
