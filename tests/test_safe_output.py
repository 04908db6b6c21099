"""`-o` (and every output file) writes the way shell redirection does, and a refused write is exit 2.

Issue 19: the atomic write renamed a temporary file over whatever was at the path, so `-o /dev/null`
run as root deleted the device node and `-o link.yaml` replaced the link; an unwritable target
ended in exit 3 "internal error".
"""

import os
import stat
import threading

import pytest

from planner.cli import main
from planner.errors import PlanError, WriteError
from planner.output import check_writable, write_atomic

ENGINE = "llama-3.1-8b-fp8-h100"
HF = "tests/fixtures/hf/llama-3.1-8b-instruct-fp8-block.json"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def plan_text(capsys) -> str:
    code, out, _ = run(capsys, "plan", "triton", "-e", ENGINE)
    assert code == 0
    return out


# The three commands with -o, each as (argv without -o, what they print to stdout).
COMMANDS = {
    "plan": ["plan", "triton", "-e", ENGINE],
    "engine": ["engine", "--from-hf", HF, "--num-blocks", "1024"],
    "diff": ["diff", "--plan", "triton", "-e", ENGINE, "-e", "qwen3-30b-a3b-fp8-h100"],
}


def expected_output(capsys, command: str) -> str:
    main(COMMANDS[command])
    return capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_symlink_is_written_through_and_stays_a_link(tmp_path, capsys, command):
    target = tmp_path / "real.yaml"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to("real.yaml")
    main([*COMMANDS[command], "-o", str(link)])
    capsys.readouterr()
    assert link.is_symlink() and os.readlink(link) == "real.yaml"
    assert target.read_text() == expected_output(capsys, command)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # an existing file keeps its mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.yaml", "real.yaml"]  # no temporary left


def test_a_dangling_symlink_creates_its_target(tmp_path, capsys):
    link = tmp_path / "link.yaml"
    link.symlink_to("made.yaml")
    assert run(capsys, "plan", "triton", "-e", ENGINE, "-o", str(link))[0] == 0
    assert link.is_symlink() and (tmp_path / "made.yaml").read_text() == plan_text(capsys)


def test_a_character_device_is_written_not_replaced(tmp_path, capsys):
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot make a device node here: {e}")
    code, out, err = run(capsys, "plan", "triton", "-e", ENGINE, "-o", str(null))
    assert (code, out, err) == (0, "", "")
    assert stat.S_ISCHR(null.lstat().st_mode) and os.listdir(tmp_path) == ["null"]


def test_a_fifo_receives_the_plan(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(open(fifo).read()))
    reader.start()
    code = run(capsys, "plan", "triton", "-e", ENGINE, "-o", str(fifo))[0]
    reader.join(30)
    assert code == 0 and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert received == [plan_text(capsys)]


def test_a_new_file_gets_the_mode_of_a_plain_open(tmp_path, capsys):
    old = os.umask(0o027)
    try:
        assert run(capsys, "plan", "triton", "-e", ENGINE, "-o", str(tmp_path / "p.yaml"))[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "p.yaml").stat().st_mode) == 0o640


@pytest.mark.parametrize("setup,target,reason", [
    (lambda d: (d / "dir").mkdir(), "dir", "is a directory"),
    (lambda d: None, "dir/", "names a directory, expected a file"),
    (lambda d: (d / "file").write_text("x"), "file/p.yaml", "file is not a directory"),
    (lambda d: (d / "file").write_text("x"), "file/sub/p.yaml", "file is not a directory"),
    (lambda d: (d / "loop").symlink_to("loop"), "loop", "Too many levels of symbolic links"),
])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_target_that_cannot_be_written_is_exit_2(tmp_path, capsys, command, setup, target, reason):
    setup(tmp_path)
    before = sorted(os.listdir(tmp_path))
    path = f"{tmp_path}/{target}"  # (pathlib would drop the trailing slash of "dir/")
    code, out, err = run(capsys, *COMMANDS[command], "-o", path)
    assert code == 2 and out == ""
    assert err == f"warmup: error: {path}: cannot write: {reason}\n" or (
        err.startswith(f"warmup: error: {path}: cannot write: ") and reason in err and err.count("\n") == 1), err
    assert sorted(os.listdir(tmp_path)) == before  # nothing created, nothing left behind


def test_a_failed_rename_keeps_the_old_file_and_is_exit_2(tmp_path, capsys, monkeypatch):
    # Root ignores permission bits, so "no permission" is the error os.replace would raise.
    path = tmp_path / "p.yaml"
    path.write_text("old\n")

    def denied(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", denied)
    code, _, err = run(capsys, "plan", "triton", "-e", ENGINE, "-o", str(path))
    assert code == 2 and err == f"warmup: error: {path}: cannot write: Permission denied\n"
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["p.yaml"]


def test_write_error_is_an_os_error_and_a_plan_error(tmp_path):
    # Library callers that treat a failed write as an OSError (the best-effort precompile
    # manifest, autotune's tables) keep working; the command line exits 2.
    with pytest.raises(WriteError) as info:
        write_atomic(tmp_path, "x")
    assert isinstance(info.value, OSError) and isinstance(info.value, PlanError)
    assert str(info.value) == f"{tmp_path}: cannot write: is a directory"


def test_check_writable_refuses_what_the_write_would(tmp_path):
    (tmp_path / "file").write_text("x")
    check_writable(tmp_path / "new" / "report.json")  # missing directories are made later
    for bad in (tmp_path, tmp_path / "file" / "r.json"):
        with pytest.raises(WriteError):
            check_writable(bad)


def test_execute_refuses_an_unwritable_report_before_running(tmp_path, capsys):
    pytest.importorskip("executor.cli")
    from executor.cli import main as execute_main

    code = execute_main(["execute", "triton", "--engine", ENGINE, "--dry-run", "--report", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err == f"warmup: error: {tmp_path}: cannot write: is a directory\n"


def test_execute_whose_report_cannot_be_written_at_the_end_is_exit_2(tmp_path, capsys, monkeypatch):
    from executor import report as report_mod
    from executor.cli import main as execute_main

    def full(path, text):
        raise WriteError(path, "No space left on device")

    monkeypatch.setattr(report_mod, "write_atomic", full)
    path = tmp_path / "r.json"
    code = execute_main(["execute", "triton", "--engine", ENGINE, "--dry-run", "--no-progress",
                         "--report", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and f"warmup: error: {path}: cannot write: No space left on device" in err
    assert not path.exists()


def test_execute_refuses_a_table_folder_it_cannot_write_before_tuning(tmp_path, capsys, monkeypatch):
    from executor.cli import main as execute_main

    # --kernel-config-dir sets this variable for the run only (issue 36 item 5): restored afterwards
    monkeypatch.setenv("WARMUP_KERNEL_CONFIG_DIR", str(tmp_path / "unused"))
    blocker = tmp_path / "tables"
    blocker.write_text("a file where the tables would go")
    code = execute_main(["execute", "triton-tune", "--engine", ENGINE, "--no-progress", "--jobs", "0",
                         "--device", "cpu", "--kernel-config-dir", str(blocker)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == (f"warmup: error: {blocker}: the tuned tables (--kernel-config-dir, $WARMUP_KERNEL_CONFIG_DIR) "
                   f"cannot be written here: {blocker} is not a directory\n")
    assert blocker.read_text() == "a file where the tables would go"
    assert os.environ["WARMUP_KERNEL_CONFIG_DIR"] == str(tmp_path / "unused")   # the caller's, as it was
    monkeypatch.delenv("WARMUP_KERNEL_CONFIG_DIR")
    execute_main(["execute", "triton-tune", "--engine", ENGINE, "--no-progress", "--jobs", "0",
                  "--device", "cpu", "--kernel-config-dir", str(blocker)])
    assert "WARMUP_KERNEL_CONFIG_DIR" not in os.environ                         # none before, none after
