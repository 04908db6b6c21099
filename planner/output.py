"""Write what a command made where `-o` says, as shell redirection would: all or nothing.

`emit` writes to stdout or a file; `write_atomic` replaces a file whole (the executor's reports,
manifests and caches use it too); `check_output` and `check_writable` refuse a target before
anything is written.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile

from .errors import WriteError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def emit(text: str, output: str | None) -> None:
    """`-o FILE`: write the file (see write_output); without -o (None), stdout."""
    if output is None:
        sys.stdout.write(text)
    else:
        write_output(output, text)


def write_output(path: str | os.PathLike, text: str) -> None:
    """`-o PATH`, as shell redirection writes it: see check_output, then write_atomic."""
    check_output(path)
    write_atomic(path, text)


def check_output(path: str | os.PathLike) -> None:
    """Refuse an `-o` the shell would refuse, before anything is written: an empty name (`-o ''`
    is no file, and not stdout either) and a directory that does not exist (`> out/p.yaml` does
    not make `out/`), besides what check_writable refuses. WriteError names the path."""
    name = os.fspath(path)
    if not name:
        raise WriteError("''", "an empty file name (leave out -o to write to stdout)")
    check_writable(name)
    try:
        target, _ = _output_target(name)
    except OSError as e:
        raise WriteError(name, e.strerror or str(e)) from None
    if not os.path.isdir(os.path.dirname(target)):
        folder = os.path.dirname(target if os.path.islink(name) else name)
        raise WriteError(name, f"directory {folder} does not exist (create it first)")


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` at `path` the way shell redirection (`>`) would, all or nothing where it can.

    The one writer of the project's output files (`-o`, `--report`, tuned kernel tables, the
    precompile manifest). `-o` is how scripts throw output away (`-o /dev/null`), so:

    * a symlink is followed: its target is written, and the link stays a link;
    * a target that exists and is not a regular file (a character device, a FIFO) is opened and
      written, never replaced: renaming over /dev/null would delete the device node;
    * a regular file, or a missing one, is written to a temporary file in the same directory
      and renamed over it: readers see the old file or the new one, never a partial one, and a
      failed write leaves the old file as it was. An existing file keeps its mode. Missing
      directories above it are created.

    Every failure raises WriteError (exit 2 at the command line) naming the path and the reason.
    """
    name = os.fspath(path)
    try:
        target, existing = _output_target(name)
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            with open(target, "w", encoding="utf-8") as f:  # a device or a pipe: write through it
                f.write(text)
            return
        # An existing file keeps its mode; a new one gets the mode a plain open() would give
        # (mkstemp makes 0600, but plans, tables and manifests are read by other users).
        mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o666 & ~_umask()
        folder = os.path.dirname(target)
        os.makedirs(folder, exist_ok=True)
        _replace(target, text, mode)
    except OSError as e:
        raise WriteError(name, e.strerror or str(e)) from None


def check_writable(path: str | os.PathLike) -> None:
    """Refuse now what write_atomic would refuse at the end (a command that runs for minutes
    before writing its report should fail before it starts, not after)."""
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


def _replace(target: str, text: str, mode: int) -> None:
    """A temporary file in the target's directory, renamed over it once complete."""
    folder = os.path.dirname(target)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
