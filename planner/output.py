"""Write what a command made where `-o` says, as shell redirection would: all or nothing.

`open_output` is the one writer of every file the tool writes (`write_atomic` for a text,
`append_line` for a log it adds to); `check_output` (`check_outputs` for all of a command's output
flags) and `check_writable` refuse a target before anything is written, `check_output` also one
that is an input of the command (no output flag writes over what the command reads). `-o -` is stdout, as for most Unix tools. `named_stdout_errors`
makes a failed write to stdout (a full disk, a closed descriptor) one line naming stdout.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from contextlib import contextmanager

from .errors import WriteError

STDOUT = "-"  # `-o -`: stdout, as most Unix tools take it (never a file named "-")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def is_stdout(output: str | os.PathLike | None) -> bool:
    """Whether an `-o` value means stdout: left out (None), or `-`."""
    return output is None or os.fspath(output) == STDOUT


def emit(text: str, output: str | None, inputs: Iterable[str] = ()) -> None:
    """`-o FILE`: write the file (see write_output); without -o (None), or `-o -`, stdout."""
    if is_stdout(output):
        sys.stdout.write(text)
    else:
        write_output(output, text, inputs)


def write_output(path: str | os.PathLike, text: str, inputs: Iterable[str] = ()) -> None:
    """`-o PATH`, as shell redirection writes it: see check_output, then write_atomic."""
    check_output(path, inputs)
    write_atomic(path, text)


def check_output(path: str | os.PathLike, inputs: Iterable[str] = ()) -> None:
    """Refuse an `-o` the shell would refuse, before anything is written: an empty name (`-o ''`
    is no file, and not stdout either) and a directory that does not exist (`> out/p.yaml` does
    not make `out/`), besides what check_writable refuses; and a file among `inputs`, the files
    the command reads (see check_not_an_input). WriteError names the path."""
    name = os.fspath(path)
    if not name:
        raise WriteError("''", "an empty file name (leave out -o, or give -o -, to write to stdout)")
    check_not_an_input(name, inputs)
    check_writable(name)
    try:
        target, _ = _output_target(name)
    except OSError as e:
        raise WriteError(name, e.strerror or str(e)) from None
    _check_folder(name, target)


def check_outputs(outputs: dict, inputs: Iterable[str] = ()) -> None:
    """check_output for each of a command's output flags ({flag: path or None}; None: not given),
    before anything runs: every one against every input, none of them stdout."""
    for flag, path in outputs.items():
        if path is None:
            continue
        if os.fspath(path) == STDOUT:
            raise WriteError(STDOUT, f"{flag} names a file (- is stdout only for -o of a text output)")
        check_output(path, inputs)


def _check_folder(name: str, target: str) -> None:
    """The writer never creates a directory (`> out/p.yaml` does not make `out/` either): a
    missing one is refused, naming the folder as it was given."""
    if not os.path.isdir(os.path.dirname(target) or "."):
        folder = os.path.dirname(target if os.path.islink(name) else name) or "."
        raise WriteError(name, f"directory {folder} does not exist (create it first)")


def check_not_an_input(path: str | os.PathLike, inputs: Iterable[str]) -> None:
    """Refuse to write over a file the command reads (`engine --from-hf config.json -o config.json`,
    a plan onto its own file, `absorb s.log -o s.log`): the input would be lost to the output, and
    the output made from it would claim a source that no longer exists. The same file however it
    is named (a symlink, a relative path, a hard link): same device and inode. Only regular files
    are at stake: reading /dev/stdin and writing /dev/stdout overwrite nothing."""
    name = os.fspath(path)
    target = _regular_file_id(name)
    if target is None:
        return
    for source in inputs:
        if _regular_file_id(source) == target:
            same = os.path.normpath(os.fspath(source)) == os.path.normpath(name)
            what = "an input of this command" if same else f"it is {source}, an input of this command"
            raise WriteError(name, f"{what} (write the output to another file)")


def _regular_file_id(path: str | os.PathLike) -> tuple | None:
    """(device, inode) of the regular file at `path` (symlinks followed), else None."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):  # missing, unreadable, a NUL in the name: nothing to overwrite
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISREG(found.st_mode) else None


def write_atomic(path: str | os.PathLike, text: str, make_folder: bool = False) -> None:
    """Write `text` at `path` the way shell redirection (`>`) would: see open_output. `make_folder`:
    the executor's own records (a precompile claim, the cost table) under a cache root it owns
    create their folder first; a file the user named never does (open_output refuses it)."""
    if make_folder:
        os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
    with open_output(path) as f:
        f.write(text)


@contextmanager
def open_output(path: str | os.PathLike, binary: bool = False):
    """The one writer of every file the tool writes (`-o`, `--report`, the FlashInfer cache, the
    bundle built or pulled, the executor's manifests and tables): a file object to write, for a
    text or for a stream (a download checks its digest as it writes, and raises to keep nothing).

    `-o` is how scripts throw output away (`-o /dev/null`), so, as `>` does:

    * a symlink is followed: its target is written, and the link stays a link;
    * a target that exists and is not a regular file (a character device, a FIFO) is opened and
      written, never replaced: renaming over /dev/null would delete the device node;
    * a regular file, or a missing one, is written into a replacement (see ``replacement``): it
      appears whole when the block ends without an error, or not at all, also when the process is
      killed. An existing file keeps its mode; a new one gets a plain open()'s (0666 less the umask);
    * a missing directory above it is refused, never created.

    Every failure to write raises WriteError (exit 2 at the command line) naming the path and the
    reason; an error of the block itself (a digest that does not match) propagates as it is.
    """
    name = os.fspath(path)
    try:
        target, existing = _output_target(name)
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            stream = open(target, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"}))
        else:
            _check_folder(name, target)
            # mkstemp would make 0600, but plans, reports and bundles are read by other users.
            mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o666 & ~_umask()
            stream = replacement(target, mode, binary)
        with stream as f:
            yield f
    except OSError as e:
        if isinstance(e, WriteError):
            raise
        raise WriteError(name, e.strerror or str(e)) from None


def read_back(f) -> str | None:
    """A path to read back what `f` (from open_output, flushed) holds before it is named: a check
    of the whole file (is the download a bundle?) before it appears. None for a device or a FIFO,
    which stream on and cannot be read back."""
    found = os.fstat(f.fileno())
    return f"/proc/self/fd/{f.fileno()}" if stat.S_ISREG(found.st_mode) and os.path.isdir("/proc/self/fd") else None


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append one line to `path` (`>>`): a log a run adds to as it goes (--jit-log), so neither
    atomic nor replaced; a symlink, a FIFO or a device is written through, a new file gets a plain
    open()'s mode, and a missing directory is refused (WriteError naming the path)."""
    name = os.fspath(path)
    try:
        target, _ = _output_target(name)
        _check_folder(name, target)
        with open(target, "a", encoding="utf-8") as f:
            f.write(line if line.endswith("\n") else line + "\n")
    except OSError as e:
        if isinstance(e, WriteError):
            raise
        raise WriteError(name, e.strerror or str(e)) from None


def check_writable(path: str | os.PathLike) -> None:
    """Refuse now what write_atomic would refuse at the end, for a file in a folder its writer
    makes itself (the tuned tables: a run that tunes for minutes should fail before it starts,
    not after); a file a command's flag names goes through check_output instead, which also
    refuses a missing folder and an input of the command."""
    name = os.fspath(path)
    try:
        target, existing = _output_target(name)
        folder = _nearest_folder(os.path.dirname(target))
        if existing is None or stat.S_ISREG(existing.st_mode):  # the temporary file goes there
            if not os.access(folder, os.W_OK):
                raise PermissionError(errno.EACCES, f"{folder} is not writable")
        elif not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, "Permission denied")
    except OSError as e:
        raise WriteError(name, e.strerror or str(e)) from None


def _output_target(name: str) -> tuple[str, os.stat_result | None]:
    """(the file to write, its stat or None): symlinks followed; directories refused."""
    if name.endswith(os.sep):  # `> dir/` fails in a shell too, rather than writing `dir`
        raise IsADirectoryError(errno.EISDIR, "names a directory, expected a file")
    target = os.path.realpath(name)
    try:
        existing = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        _nearest_folder(os.path.dirname(target))
        return target, None
    if stat.S_ISDIR(existing.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    return target, existing


def _nearest_folder(folder: str) -> str:
    """The closest existing directory at or above `folder`; a file in the way is refused."""
    probe = folder
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise NotADirectoryError(errno.ENOTDIR, f"{probe} is not a directory")
    return probe


@contextmanager
def replacement(target: str, mode: int, binary: bool = False):
    """A file to write that becomes `target` whole when the block ends without an error, and
    nothing otherwise. On Linux it is an unnamed file in the target's directory (O_TMPFILE): a
    process killed while writing (a server that dies while it packs its bundle) leaves nothing
    behind, since the kernel drops a file no name points at; elsewhere a hidden temporary file
    beside the target, removed on any error but not on a kill."""
    folder = os.path.dirname(target) or "."
    fd, tmp = _unnamed_file(folder, mode), None
    if fd is None:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            os.fchmod(f.fileno(), mode)
            yield f
            f.flush()
            os.fsync(f.fileno())
            if tmp is None:
                _name_unnamed(f.fileno(), target)
        if tmp is not None:
            os.replace(tmp, target)
    except BaseException:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _unnamed_file(folder: str, mode: int) -> int | None:
    """A writable file in `folder` with no name (Linux's O_TMPFILE), or None where the OS or the
    file system has none, or /proc (through which it gets its name) is not mounted."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return os.open(folder, flag | os.O_WRONLY | os.O_CLOEXEC, mode)
    except OSError:  # EOPNOTSUPP (the file system), EISDIR (a kernel without it), ...
        return None


def _name_unnamed(fd: int, target: str) -> None:
    """The unnamed file becomes `target`. linkat cannot replace a file, so it takes a hidden name
    for the instant between the link and the rename."""
    folder = os.path.dirname(target) or "."
    hidden = f".{os.path.basename(target)}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        # a dir fd makes Python call linkat(..., AT_SYMLINK_FOLLOW): the open file itself, not the
        # /proc link (plain link(2), its default, would try to link the symlink: EXDEV)
        os.link(f"/proc/self/fd/{fd}", hidden, dst_dir_fd=dir_fd, follow_symlinks=True)
        try:
            os.replace(hidden, os.path.basename(target), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            os.unlink(hidden, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


# --- stdout -------------------------------------------------------------------------------------

@contextmanager
def named_stdout_errors():
    """While a command runs, sys.stdout is _NamedStdout: a write to stdout that fails (a full disk,
    a descriptor closed or opened for reading) is a WriteError naming stdout, one line and exit 2
    at the command line, not an OSError the last guard calls an internal error. What is still
    buffered is flushed here, at the end (or at argparse's exit after --help), where a failure
    is still the command's, not at interpreter exit past every guard."""
    real = sys.stdout
    if isinstance(real, _NamedStdout):  # a guarded command run inside another (`warmup bundle`)
        yield
        return
    named = sys.stdout = _NamedStdout(real)
    try:
        try:
            yield
        except SystemExit:
            named.flush()
            raise
        named.flush()
    finally:
        if sys.stdout is named:
            sys.stdout = real


class _NamedStdout:
    """The real stdout (None where the process started with descriptor 1 closed), whose write and
    flush raise WriteError("stdout", reason); BrokenPipeError stays itself (the reader went away:
    the CLI exits quietly, as Unix tools do). Everything else is the real stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._do("write", text)

    def writelines(self, lines) -> None:
        self._do("writelines", lines)

    def flush(self) -> None:
        if self._stream is not None:  # nothing written to a closed stdout, nothing to fail
            self._do("flush")

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)

    def _do(self, method: str, *args):
        if self._stream is None:
            raise WriteError("stdout", "closed (the command was started with no standard output)")
        try:
            return getattr(self._stream, method)(*args)
        except WriteError:
            raise
        except (OSError, ValueError) as e:  # ValueError: "I/O operation on closed file"
            _drop_pending(self._stream)
            if isinstance(e, BrokenPipeError):
                raise
            raise WriteError("stdout", getattr(e, "strerror", None) or str(e)) from None


def _drop_pending(stream) -> None:
    """After a failed write, the process's stdout still holds what it could not write, and the
    interpreter's last flush would fail on it again ("Exception ignored ...", exit 120): point
    descriptor 1 at /dev/null, as Python's documentation does for a closed pipe. Only the
    process's own stdout: a stream that stands in for it (a test's capture) is left alone."""
    if stream is not sys.__stdout__:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
