"""Every output flag of every command, through the same cases (issue 55 item 2).

`warmup execute --report plan.yaml` wrote the JSON report over the command's own plan, and
`bundle pull -o` replaced a symlink, a FIFO or a device with a regular file, wrote mode 0600 and
created missing directories. Every file the tool writes now goes through planner.output's one
writer (open_output / write_atomic / append_line), and every output flag is checked against the
command's inputs before anything runs. The flags are found in the argparse parsers themselves, so
a flag added later without a case here fails `test_every_output_flag_has_its_cases`.
"""

from __future__ import annotations

import argparse
import os
import stat
import threading
from pathlib import Path

import pytest

from planner.cli import COMMANDS, build_parser, main
from planner.errors import WriteError
from planner.output import append_line, open_output, write_atomic

ENGINE = "llama-3.1-8b-fp8-h100"
ENGINE_FILE = Path(f"plans/engines/{ENGINE}.yaml")
HF = "tests/fixtures/hf/llama-3.1-8b-instruct-fp8-block.json"
LOG = "tests/fixtures/logs/vllm-0.25-llama-stock.server.log"

# Options that name files or folders the command reads, or cache folders it fills: not outputs.
NOT_OUTPUTS = {("bundle install", "--deep-gemm-cache"), ("bundle install", "--triton-cache"),
               ("bundle install", "--vllm-cache-root"), ("bundle verify", "--vllm-cache-root")}


def file_options() -> set:
    """(command, flag) of every option, in every command's parser, that looks like a file it writes:
    `-o`, a report, a log, a cache, or a FILE metavar."""
    found = set()

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif action.option_strings and (action.metavar == "FILE" or action.dest in ("output", "report")
                                            or action.dest.endswith(("_log", "_cache", "_output", "_report"))):
                found.add((" ".join(path), action.option_strings[-1]))

    for command in COMMANDS:
        walk(build_parser(command), [])
    return found - NOT_OUTPUTS


def make_bundle(path: Path) -> None:
    """A small real bundle (one Triton member): what verify and install read."""
    import hashlib

    from executor.bundle import archive
    from executor.bundle.archive import FORMAT, FileRecord, Manifest

    data = b"member"
    src = path.with_suffix(".member")
    src.write_bytes(data)
    record = FileRecord("triton/HASH/k.bin", hashlib.sha256(data).hexdigest(), len(data))
    archive.write_bundle(str(path), Manifest(FORMAT, "triton", ENGINE, "sha256:plan", {"gpu": "NVIDIA H200"},
                                             [record], [], {}), {record.path: str(src)})
    src.unlink()


def inputs_in(d: Path) -> None:
    (d / "engine.yaml").write_text(ENGINE_FILE.read_text())
    (d / "plan.yaml").write_text("name: mine\nextends: triton\nstages: []\n")
    (d / "config.json").write_text(Path(HF).read_text())
    (d / "server.log").write_text(Path(LOG).read_text())
    make_bundle(d / "b.warmup")


# (command, flag): (argv with {d} for the inputs' folder, an input the flag may not name or None)
FLAGS = {
    ("plan", "--output"): (["plan", "{d}/plan.yaml", "-e", "{d}/engine.yaml"], "plan.yaml"),
    ("engine", "--output"): (["engine", "--from-hf", "{d}/config.json", "--num-blocks", "1024"], "config.json"),
    ("diff", "--output"): (["diff", "--plan", "triton", "-e", ENGINE, "-e", "{d}/engine.yaml"], "engine.yaml"),
    ("check", "--output"): (["check", "{d}/plan.yaml", "-e", ENGINE], "plan.yaml"),
    ("absorb", "--output"): (["absorb", "{d}/server.log", "--plan", "vllm-0.25", "-e", ENGINE], "server.log"),
    ("execute", "--report"): (["execute", "{d}/plan.yaml", "-e", "{d}/engine.yaml", "--dry-run", "--no-progress"],
                              "plan.yaml"),
    ("execute", "--jit-log"): (["execute", "triton", "-e", "{d}/engine.yaml", "--dry-run", "--no-progress"],
                               "engine.yaml"),
    ("execute", "--flashinfer-cache"): (["execute", "{d}/plan.yaml", "-e", ENGINE, "--dry-run", "--no-progress"],
                                        "plan.yaml"),
    ("bundle build", "--output"): (["bundle", "build", "triton", "-e", "{d}/engine.yaml"], "engine.yaml"),
    ("bundle build", "--report"): (["bundle", "build", "triton", "-e", "{d}/engine.yaml", "-o", "{d}/new.warmup"],
                                   "engine.yaml"),
    ("bundle verify", "--report"): (["bundle", "verify", "{d}/b.warmup"], "b.warmup"),
    ("bundle install", "--flashinfer-cache"): (["bundle", "install", "{d}/b.warmup"], "b.warmup"),
    ("bundle pull", "--output"): (["bundle", "pull", "oci://127.0.0.1:9/w:v1"], None),  # reads nothing here
}
IDS = [f"{c}{f}" for c, f in FLAGS]


def test_every_output_flag_has_its_cases():
    assert file_options() == set(FLAGS)


def run(capsys, argv, d, flag, target) -> tuple:
    code = main([*(a.format(d=d) for a in argv), flag, str(target)])
    out, err = capsys.readouterr()
    return code, out, err


# bundle pull reads no local file: it has no input to write over (a parametrized skip would be a
# skip CI's --allowed-skips-only refuses, so the case is not made)
WITH_INPUTS = [key for key in FLAGS if FLAGS[key][1] is not None]


@pytest.mark.parametrize("key", WITH_INPUTS, ids=[f"{c}{f}" for c, f in WITH_INPUTS])
def test_an_output_over_an_input_is_refused_and_the_input_kept(tmp_path, capsys, key):
    argv, victim = FLAGS[key]
    inputs_in(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, out, err = run(capsys, argv, tmp_path, key[1], tmp_path / victim)
    assert (code, out) == (2, "")
    assert err == f"warmup: error: {tmp_path / victim}: cannot write: an input of this command (write the " \
                  "output to another file)\n"
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("key", list(FLAGS), ids=IDS)
def test_a_missing_directory_is_refused_in_one_line_and_not_made(tmp_path, capsys, key):
    argv, _ = FLAGS[key]
    inputs_in(tmp_path)
    before = sorted(os.listdir(tmp_path))
    target = tmp_path / "missing" / "out"
    code, out, err = run(capsys, argv, tmp_path, key[1], target)
    assert (code, out) == (2, "")
    assert err == f"warmup: error: {target}: cannot write: directory {target.parent} does not exist (create it " \
                  "first)\n"
    assert sorted(os.listdir(tmp_path)) == before


# --- what each flag's writer does with the target: the writer each command calls -----------------

def _through_the_cli(key):
    def write(target: Path, d: Path) -> None:
        argv, _ = FLAGS[key]
        assert main([*(a.format(d=d) for a in argv), key[1], str(target)]) in (0, 1)  # diff: 1, they differ
    return write


def _jit_log(target: Path, d: Path) -> None:
    from executor.jit_monitor import Monitor

    Monitor("warn", str(target))._record({"backend": "triton", "event": "compile", "kernel": "k"})


def _flashinfer_cache(target: Path, d: Path) -> None:
    from executor.backends.flashinfer import atomic_save_configs

    class Tuner:
        def save_configs(self, path):
            Path(path).write_text('{"configs": {}}\n')

    atomic_save_configs(Tuner(), str(target))


def _bundle(target: Path, d: Path) -> None:  # bundle build -o and bundle pull -o: a binary stream
    with open_output(target, binary=True) as f:
        f.write((d / "b.warmup").read_bytes())


WRITERS = {
    **{key: _through_the_cli(key) for key in FLAGS if key[0] in ("plan", "engine", "diff", "check", "absorb")},
    ("execute", "--report"): _through_the_cli(("execute", "--report")),
    ("bundle build", "--report"): _through_the_cli(("execute", "--report")),   # execute --report writes it
    ("bundle verify", "--report"): _through_the_cli(("execute", "--report")),  # execute --report writes it
    ("execute", "--jit-log"): _jit_log,
    ("execute", "--flashinfer-cache"): _flashinfer_cache,
    ("bundle install", "--flashinfer-cache"): _flashinfer_cache,
    ("bundle build", "--output"): _bundle,
    ("bundle pull", "--output"): _bundle,
}


def test_every_flag_has_a_writer():
    assert set(WRITERS) == set(FLAGS)


@pytest.mark.parametrize("key", list(FLAGS), ids=IDS)
def test_a_symlink_is_written_through_and_keeps_its_mode(tmp_path, capsys, key):
    inputs_in(tmp_path)
    (tmp_path / "real").write_text("")
    (tmp_path / "real").chmod(0o640)
    (tmp_path / "link").symlink_to("real")
    WRITERS[key](tmp_path / "link", tmp_path)
    assert (tmp_path / "link").is_symlink() and (tmp_path / "real").stat().st_size > 0
    assert stat.S_IMODE((tmp_path / "real").stat().st_mode) == 0o640
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary left


@pytest.mark.parametrize("key", list(FLAGS), ids=IDS)
def test_a_fifo_is_written_not_replaced(tmp_path, capsys, key):
    # a FIFO stands in for /dev/null: a device node needs root, and both are written the same way
    inputs_in(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(open(fifo, "rb").read()))
    reader.start()
    WRITERS[key](fifo, tmp_path)
    reader.join(30)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and received and received[0]


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600)])
@pytest.mark.parametrize("key", list(FLAGS), ids=IDS)
def test_a_new_file_gets_the_mode_the_umask_gives(tmp_path, capsys, key, umask, mode):
    inputs_in(tmp_path)
    old = os.umask(umask)
    try:
        WRITERS[key](tmp_path / "new", tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == mode


# a log is appended to (`>>`), not replaced: test_a_log_line_is_appended covers --jit-log
REPLACED = [key for key in FLAGS if key != ("execute", "--jit-log")]


@pytest.mark.parametrize("key", REPLACED, ids=[f"{c}{f}" for c, f in REPLACED])
def test_a_failed_write_leaves_the_old_file_whole(tmp_path, capsys, monkeypatch, key):
    inputs_in(tmp_path)
    target = tmp_path / "old"
    target.write_text("old\n")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(WriteError, match="No space left on device"):
        try:
            WRITERS[key](target, tmp_path)
        except AssertionError:  # the command caught it: exit 2, and the error line said so
            raise WriteError(str(target), capsys.readouterr().err.split("cannot write: ")[-1]) from None
    assert target.read_text() == "old\n"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_a_log_line_is_appended_and_a_missing_directory_refused(tmp_path):
    log = tmp_path / "jit.jsonl"
    append_line(log, "one")
    append_line(log, "two\n")
    assert log.read_text() == "one\ntwo\n"
    with pytest.raises(WriteError, match="does not exist"):
        append_line(tmp_path / "no" / "jit.jsonl", "x")


def test_write_atomic_refuses_a_missing_directory(tmp_path):
    with pytest.raises(WriteError, match=f"directory {tmp_path / 'no'} does not exist"):
        write_atomic(tmp_path / "no" / "p.yaml", "x")
    assert os.listdir(tmp_path) == []
