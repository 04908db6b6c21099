"""`-o` (and every output file) writes the way shell redirection does, and a refused write is exit 2.

Issue 19: the atomic write renamed a temporary file over whatever was at the path, so `-o /dev/null`
run as root deleted the device node and `-o link.yaml` replaced the link; an unwritable target
ended in exit 3 "internal error". Issue 44: `-o` wrote over the command's own input
(`engine --from-hf config.json -o config.json`), `-o -` wrote a file named "-", and a failed write
to stdout was an "internal error" (exit 3).
"""

import errno
import io
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

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

    def denied(src, dst, **dir_fds):
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


# --- issue 44 item 4: no command writes over its own input; `-o -` is stdout; stdout's failures ----

LOG = "tests/fixtures/logs/vllm-0.25-llama-stock.server.log"
ENGINE_FILE = Path(f"plans/engines/{ENGINE}.yaml")


def inputs_in(folder) -> dict:
    """Copies of a command's inputs in `folder`: an engine, a plan that extends another, a
    config.json, a server log, and an expanded plan."""
    files = {"engine.yaml": ENGINE_FILE.read_text(),
             "base.yaml": "name: base\nextends: triton\nstages: []\n",
             "plan.yaml": "name: mine\nextends: base.yaml\nstages: []\n",
             "config.json": Path(HF).read_text(), "server.log": Path(LOG).read_text()}
    for name, text in files.items():
        (folder / name).write_text(text)
    assert main(["plan", "triton", "-e", str(folder / "engine.yaml"), "-o", str(folder / "expanded.yaml")]) == 0
    return {name: (folder / name).read_bytes() for name in [*files, "expanded.yaml"]}


# (argv with {d} for the folder of inputs_in, the input that -o names)
OWN_INPUTS = [
    (["engine", "--from-hf", "{d}/config.json", "--num-blocks", "1024"], "config.json"),
    (["plan", "triton", "--engine", "{d}/engine.yaml"], "engine.yaml"),
    (["plan", "{d}/plan.yaml", "--engine", "{d}/engine.yaml"], "plan.yaml"),
    (["plan", "{d}/plan.yaml", "--engine", "{d}/engine.yaml"], "base.yaml"),  # the plan it extends
    (["absorb", "{d}/server.log", "--plan", "vllm-0.25", "--engine", "{d}/engine.yaml"], "server.log"),
    (["absorb", "{d}/server.log", "--plan", "{d}/plan.yaml", "--engine", ENGINE], "plan.yaml"),
    (["diff", "{d}/expanded.yaml", "triton", "--engine", ENGINE], "expanded.yaml"),
    (["diff", "--plan", "{d}/plan.yaml", "-e", ENGINE, "-e", "{d}/engine.yaml"], "engine.yaml"),
    (["check", "{d}/plan.yaml", "--engine", ENGINE], "base.yaml"),
    (["check", "triton", "--engine", ENGINE, "--logs", "{d}/server.log"], "server.log"),
    (["check", "{d}/expanded.yaml", "--engine", "{d}/engine.yaml"], "expanded.yaml"),
]


@pytest.mark.parametrize("argv,victim", OWN_INPUTS, ids=[f"{a[0]}-{v}" for a, v in OWN_INPUTS])
def test_output_over_an_input_is_refused_and_nothing_is_written(tmp_path, capsys, argv, victim):
    before = inputs_in(tmp_path)
    capsys.readouterr()
    target = tmp_path / victim
    code, out, err = run(capsys, *[a.format(d=tmp_path) for a in argv], "-o", str(target))
    assert (code, out) == (2, "")
    assert err == f"warmup: error: {target}: cannot write: an input of this command (write the output to " \
                  "another file)\n"
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert sorted(os.listdir(tmp_path)) == sorted(before)  # no temporary file left either


@pytest.mark.parametrize("spelling", ["symlink", "hard link", "relative"])
def test_the_same_file_under_another_name_is_refused_and_named(tmp_path, capsys, monkeypatch, spelling):
    inputs_in(tmp_path)
    engine = tmp_path / "engine.yaml"
    original = ENGINE_FILE.read_text()
    if spelling == "symlink":
        (tmp_path / "out.yaml").symlink_to("engine.yaml")
        target = str(tmp_path / "out.yaml")
    elif spelling == "hard link":
        os.link(engine, tmp_path / "out.yaml")
        target = str(tmp_path / "out.yaml")
    else:
        (tmp_path / "sub").mkdir()
        monkeypatch.chdir(tmp_path / "sub")
        target = "../engine.yaml"
    code, out, err = run(capsys, "plan", "triton", "--engine", str(engine), "-o", target)
    assert (code, out) == (2, "")
    assert err == (f"warmup: error: {target}: cannot write: it is {engine}, an input of this command (write the "
                   "output to another file)\n")
    assert engine.read_text() == original


def test_an_output_beside_the_inputs_is_still_written(tmp_path, capsys):
    inputs_in(tmp_path)
    assert run(capsys, "plan", str(tmp_path / "plan.yaml"), "-e", str(tmp_path / "engine.yaml"),
               "-o", str(tmp_path / "new.yaml"))[0] == 0
    assert (tmp_path / "new.yaml").read_text().startswith("# warmup-planner expanded plan")


@pytest.mark.parametrize("command", sorted(COMMANDS) + ["check"])
def test_dash_is_stdout_not_a_file_named_dash(tmp_path, capsys, monkeypatch, command):
    argv = [os.path.abspath(a) if a == HF else a for a in COMMANDS.get(command, ["check", "triton", "-e", ENGINE])]
    expected = run(capsys, *argv)
    monkeypatch.chdir(tmp_path)
    assert run(capsys, *argv, "-o", "-") == expected and expected[1]
    assert os.listdir(tmp_path) == []


def test_absorb_dash_writes_the_overlay_on_stdout_and_the_report_on_stderr(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = os.path.join(REPO, LOG)
    code, out, err = run(capsys, "absorb", log, "--plan", "vllm-0.25", "--engine", ENGINE, "-o", "-")
    assert code == 0 and os.listdir(tmp_path) == []
    assert out.startswith("# Written by `warmup absorb`") and "extends: vllm-0.25" in out
    assert "_topk_topp_kernel" in err and "Overlay written to stdout (saved as overlay.yaml, say)" in err
    (tmp_path / "overlay.yaml").write_text(out)  # `> overlay.yaml` is a plan that covers the miss
    assert run(capsys, "check", "overlay.yaml", "--engine", ENGINE, "--logs", log)[0] == 0


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def warmup(*argv, **popen):
    """`warmup ARGV` in a process of its own (its stdout as the shell gave it), as (rc, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", *argv], cwd=REPO, stderr=subprocess.PIPE,
                            text=True, **popen)
    if popen.get("stdout") is subprocess.PIPE:
        proc.stdout.close()  # the reader went away before the first write (`| head -1`, early)
    err = proc.stderr.read()
    return proc.wait(60), err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["plan", "vllm", "-e", ENGINE], ["plans"], ["check", "triton", "-e", ENGINE],
                                  ["--version"]])
def test_a_full_stdout_is_one_line_exit_2(argv):
    with open("/dev/full", "w") as full:
        code, err = warmup(*argv, stdout=full)
    assert (code, err) == (2, "warmup: error: stdout: cannot write: No space left on device\n")


@pytest.mark.parametrize("how,reason", [("read-only", "Bad file descriptor"),
                                        ("closed", "closed (the command was started with no standard output)")])
def test_a_stdout_that_cannot_be_written_is_one_line_exit_2(how, reason):
    if how == "read-only":  # `warmup plan ... 1</dev/null`
        with open(os.devnull) as null:
            code, err = warmup("plan", "vllm", "-e", ENGINE, stdout=null)
    else:  # `warmup plan ... >&-`
        code, err = warmup("plan", "vllm", "-e", ENGINE, preexec_fn=lambda: os.close(1))
    assert (code, err) == (2, f"warmup: error: stdout: cannot write: {reason}\n")


def test_a_closed_stdout_is_no_error_when_nothing_is_written_to_it(tmp_path):
    code, err = warmup("plan", "vllm", "-e", ENGINE, "-o", str(tmp_path / "p.yaml"), preexec_fn=lambda: os.close(1))
    assert (code, err) == (0, "") and (tmp_path / "p.yaml").stat().st_size > 0


def test_a_reader_that_went_away_is_quiet_as_unix_tools_are():
    code, err = warmup("plan", "vllm", "-e", "deepseek-v3-fp8-tp8-h200", stdout=subprocess.PIPE)
    assert (code, err) == (141, "")  # 128 + SIGPIPE, as the shell reports `cat` in `cat big | head -1`


def test_a_failed_stdout_write_in_process_names_stdout(capsys, monkeypatch):
    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sys, "stdout", Full())
    assert main(["plan", "triton", "-e", ENGINE]) == 2
    assert capsys.readouterr().err == "warmup: error: stdout: cannot write: No space left on device\n"
    assert isinstance(sys.stdout, Full)  # the command's stand-in for stdout is gone with it


# --- a writer killed while writing leaves nothing (issue 53 item 4: a dying server's bundle) -------------

KILLED_WRITER = """
import os, sys, time
from planner.output import replacement
with replacement(sys.argv[1], 0o644, binary=True) as f:
    f.write(b"x" * 4096)
    f.flush()
    print("writing", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("unnamed", [True, False])
def test_a_writer_killed_mid_write_leaves_nothing_where_the_file_was_asked_for(tmp_path, unnamed):
    import signal
    import subprocess

    from planner import output

    if unnamed:  # Linux's, on tmpfs, ext4, xfs and btrfs alike
        fd = output._unnamed_file(str(tmp_path), 0o644)
        assert fd is not None, "no O_TMPFILE here"
        os.close(fd)
    target = tmp_path / "b.warmup"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    script = KILLED_WRITER if unnamed else KILLED_WRITER.replace(
        "from planner.output import replacement", "from planner import output\noutput._unnamed_file = "
        "lambda folder, mode: None\nfrom planner.output import replacement")
    proc = subprocess.Popen([sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout.readline() == b"writing\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = sorted(p.name for p in tmp_path.iterdir())
    if unnamed:
        assert left == [], "nothing, not even a hidden temporary file"
    else:  # the fallback: a hidden temporary file the kill left, never the target itself
        assert "b.warmup" not in left and all(n.startswith(".b.warmup.") for n in left)


@pytest.mark.parametrize("unnamed", [True, False])
def test_a_replacement_is_whole_with_its_mode_or_absent_on_an_error(tmp_path, monkeypatch, unnamed):
    from planner import output

    if not unnamed:
        monkeypatch.setattr(output, "_unnamed_file", lambda folder, mode: None)
    target = tmp_path / "out.yaml"
    target.write_text("old")
    with output.replacement(str(target), 0o640) as f:
        f.write("new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640
    with pytest.raises(RuntimeError):
        with output.replacement(str(target), 0o640) as f:
            f.write("half")
            raise RuntimeError("the writer failed")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml"]
