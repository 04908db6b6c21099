"""Why a cache directory cannot take what an install places: one line naming the path and the
cause (issue 55 item 3).

The caches an install writes into are named by the user (DG_JIT_CACHE_DIR, --triton-cache,
VLLM_CACHE_ROOT, ...). One that is a file, sits on a read-only file system or meets a full disk is
an output the command cannot write, which the README's exit codes make exit 2 with the path and
the reason (as for `-o`): a ``WriteError``, never an internal error with errno's words.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat

from planner.errors import PlanError, WriteError

# errno's own words are capitalised and vary by libc; these are the ones the line uses
CAUSES = {
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


def check_directories(directories: dict) -> None:
    """Refuse, before anything is written, a cache directory (`directories`: what -> directory)
    the install could not write into: WriteError naming the path in the way and why."""
    for what, folder in sorted(directories.items()):
        problem = directory_problem(folder) if folder else None
        if problem:
            path, cause = problem
            raise WriteError(path, cause + _context(what, folder, path))


def _context(what: str, folder: str, path: str) -> str:
    where = "" if os.path.normpath(path) == os.path.normpath(folder) else f" {folder}"
    return f" (the {what} cache{where}); nothing was written"


def directory_problem(folder: str) -> tuple[str, str] | None:
    """(the path in the way, the cause) when files cannot be created under `folder`, which may not
    exist yet (install creates it): a file where a directory must be, or a directory that cannot be
    written (root may write a mode-0555 one; nobody writes on a read-only file system)."""
    probe = os.path.abspath(folder)
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return probe, f"{_kind(probe)}, expected a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return probe, _unwritable(probe)
    return None


def _kind(path: str) -> str:
    try:
        mode = os.stat(path).st_mode
    except OSError:  # a dangling symbolic link
        return "is a broken symbolic link"
    return "is a file" if stat.S_ISREG(mode) else "is not a directory"


def _unwritable(folder: str) -> str:
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError:
        pass
    return "permission denied"


def cannot_write(e: OSError, path: str | None = None, note: str = "") -> PlanError:
    """`e`, met while writing `path` into a cache (None: where `e` says), as one line naming the
    path and the cause, `note` added (what became of what was placed). `path` wins over the file
    `e` names, which may be a temporary one beside it."""
    if isinstance(e, PlanError):  # a line already (the precompile manifest's writer says its own)
        return _noted(e, note)
    e = first_error(e)
    where = os.fspath(path or e.filename or "<cache>")
    problem = directory_problem(os.fspath(e.filename or where)) if e.errno in (errno.EEXIST, errno.ENOTDIR) else None
    if problem:  # makedirs met a file on the way: name the file, not errno's "File exists"
        where, cause = problem
    else:
        cause = CAUSES.get(e.errno) or one_cause(e)
    return _noted(WriteError(where, cause), note)


def first_error(e: OSError) -> OSError:
    """A copy of a directory (shutil.copytree) goes on after a failed file and raises shutil.Error
    with every (source, destination, text) at the end: the first failure, as the OSError it was."""
    if not isinstance(e, shutil.Error) or not e.args or not isinstance(e.args[0], list) or not e.args[0]:
        return e
    _, dest, text = e.args[0][0]
    found = re.match(r"\[Errno (\d+)\] ([^:]+)", str(text))
    if found is None:
        return OSError(None, str(text), dest)
    return OSError(int(found.group(1)), found.group(2), dest)


def one_cause(e: OSError) -> str:
    text = e.strerror or str(e)
    return text[:1].lower() + text[1:]


def _noted(e: PlanError, note: str) -> PlanError:
    if note:
        e.message = f"{e.message}; {note}"
    return e
