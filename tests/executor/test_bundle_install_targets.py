"""`warmup bundle install` into caches it cannot write (issue 55 item 3): a cache path that is a
file, a read-only file system, a full disk. Each is one line naming the path and the cause, exit 2
(an output that cannot be written, README "Exit codes"), and nothing stays placed without the
install's record. A file in the way is real; read-only and full disks are injected as the
OSError the kernel gives (EROFS, ENOSPC) at the calls the install writes with, so that the tests
run unprivileged, without mounting anything."""

from __future__ import annotations

import errno
import os

import pytest

from executor.bundle import archive, cli, environment, ops, usage
from executor.caches import targets
from planner.errors import WriteError
from test_bundle import built, dirs_in, fingerprint, parse  # noqa: F401 - fixtures
from test_startup_bundle import bundle, environ, no_cache_variables, vllm_fp  # noqa: F401 - fixtures


def files_in(folder) -> list[str]:
    """Every file under `folder` but the installers' lock."""
    return sorted(os.path.join(base, n) for base, _, names in os.walk(folder) for n in names
                  if n != ops.LOCK)


def install(argv, capsys) -> tuple[int, str]:
    code = cli.cmd_bundle(parse(["install", *argv]))
    return code, capsys.readouterr().err


@pytest.fixture
def serve(bundle, tmp_path, monkeypatch):
    """A start-up bundle and the environment of a machine to install it on (nothing there yet)."""
    monkeypatch.setattr(environment, "measure", lambda: vllm_fp(vllm_config_hash=None))
    for key, value in environ(tmp_path / "serve").items():
        monkeypatch.setenv(key, value)
    return str(bundle[0]), tmp_path / "serve"


def fail_after(monkeypatch, under, placed: int, err: int) -> None:
    """The file system under `under` fails with `err` once `placed` entries have landed there: the
    renames and links that put an entry in place (not those into a temporary directory beside it)."""
    real = {"rename": os.rename, "link": os.link}
    count = [0]

    def call(name):
        def wrapped(src, dst, *args, **kwargs):
            final = str(dst).startswith(str(under)) and "/.warmup-staging-" not in str(dst)
            if final and count[0] >= placed:
                raise OSError(err, os.strerror(err), str(dst))
            result = real[name](src, dst, *args, **kwargs)
            count[0] += final
            return result
        return wrapped

    monkeypatch.setattr(os, "rename", call("rename"))
    monkeypatch.setattr(os, "link", call("link"))


def test_a_cache_path_that_is_a_file_is_one_line_naming_it_exit_2(built, tmp_path, monkeypatch, capsys):
    out, _ = built
    monkeypatch.setattr(environment, "measure", lambda: fingerprint())
    in_the_way = tmp_path / "cache"
    in_the_way.write_text("not a directory\n")
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(in_the_way))
    code, err = install([str(out), "--triton-cache", str(tmp_path / "t")], capsys)
    assert code == 2
    assert err == (f"warmup: error: {in_the_way}: cannot write: is a file, expected a directory "
                   "(the deep_gemm cache); nothing was written\n")
    assert not (tmp_path / "t").exists() and in_the_way.read_text() == "not a directory\n"


def test_a_file_above_the_cache_path_is_named(built, tmp_path, monkeypatch, capsys):
    out, _ = built
    monkeypatch.setattr(environment, "measure", lambda: fingerprint())
    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "dg"))
    code, err = install([str(out), "--triton-cache", str(tmp_path / "f" / "triton")], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"warmup: error: {tmp_path / 'f'}: cannot write: is a file, expected a directory "
                          f"(the triton cache {tmp_path / 'f' / 'triton'})")
    assert not (tmp_path / "dg").exists()


def test_a_read_only_file_system_is_refused_before_anything_is_written(serve, monkeypatch, capsys):
    path, root = serve
    monkeypatch.setattr(targets.os, "access", lambda p, mode: False)  # what access(2) says there: EROFS

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(targets.os, "statvfs", lambda p: ReadOnly())
    code, err = install([path], capsys)
    assert code == 2 and err.count("\n") == 1
    assert ": cannot write: read-only file system (the " in err and err.endswith("; nothing was written\n")
    assert not root.exists()


@pytest.mark.parametrize("err, cause", [(errno.EROFS, "read-only file system"),
                                        (errno.ENOSPC, "no space left on device")])
def test_a_disk_that_fails_half_way_leaves_nothing_placed(serve, monkeypatch, capsys, err, cause):
    """Remounted read-only or full after two entries landed: they are removed (no record lists
    them), and the line names the entry that failed and the cause."""
    path, root = serve
    fail_after(monkeypatch, root, placed=2, err=err)
    code, line = install([path], capsys)
    assert code == 2 and line.count("\n") == 1
    assert line.startswith(f"warmup: error: {root}") and f": cannot write: {cause}; " in line
    assert line.endswith("the 2 entries this install had placed were removed\n")
    assert files_in(root) == []


def test_a_record_that_cannot_be_written_takes_back_what_was_placed(serve, monkeypatch, capsys):
    path, root = serve

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(usage.tempfile, "mkstemp", full)
    code, err = install([path], capsys)
    record = usage.record_path(str(root / "vllm"), archive.read_manifest(path).digest())
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"warmup: error: {record}: cannot write: no space left on device; the install record "
                          "could not be written, so the ")
    assert files_in(root) == []


def test_a_plan_bundle_that_meets_a_full_disk_leaves_nothing_placed(built, tmp_path, monkeypatch):
    out, _ = built
    dirs = dirs_in(tmp_path)
    fail_after(monkeypatch, tmp_path / "dest", placed=1, err=errno.ENOSPC)
    with pytest.raises(WriteError, match="cannot write: no space left on device; the 1 entry this install had "
                                         "placed was removed"):
        ops.install(str(out), dirs, fingerprint())
    assert files_in(tmp_path / "dest") == []


def test_a_full_staging_directory_is_not_called_a_corrupted_bundle(built, tmp_path, monkeypatch):
    out, _ = built

    class Full:
        """A member's file in the staging directory, on a disk that is full."""

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, block):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self):
            pass

        def close(self):
            pass

    real = open
    monkeypatch.setattr(archive, "open", lambda f, mode="r", *a, **k: Full() if mode == "wb" else real(f, mode, *a, **k),
                        raising=False)
    with pytest.raises(WriteError) as caught:
        ops.install(str(out), dirs_in(tmp_path), fingerprint())
    assert "cannot write: no space left on device" in str(caught.value)
    assert "corrupted" not in str(caught.value) and not os.path.exists(tmp_path / "dest" / "triton")


def test_read_only_caches_that_hold_the_bundle_already_are_fine(serve, monkeypatch, capsys):
    """An image whose caches were filled at build time and are mounted read-only: nothing to place,
    nothing refused."""
    path, root = serve
    assert install([path], capsys)[0] == 0
    monkeypatch.setattr(targets.os, "access", lambda p, mode: False)
    code, err = install([path], capsys)
    assert (code, err) == (0, "")
