"""Opening a bundle to read it, bounded (issue 55 item 3): every read of an input ends.

A bundle is a regular file: a FIFO would block the open and a device such as /dev/zero never
ends, so anything else is refused in one line (exit 2, bad input) before a byte is read. Even a
regular file is read no further than what is read of it needs: tarfile keeps a member's extended
header (pax, GNU long name) in memory whole, whatever size its header declares, and a gzip stream
can inflate a small file to any size, so the decompressed stream tarfile reads is capped: the
manifest's reader at MAX_MANIFEST_BYTES and its headers, the members' reader at what the manifest
lists (plus each member's headers).
"""

from __future__ import annotations

import bz2
import fcntl
import gzip
import lzma
import os
import stat
import tarfile
from contextlib import contextmanager

from planner.errors import PlanError

MAX_MANIFEST_BYTES = 64 << 20      # a manifest lists each file in about 200 bytes: some 300,000 files
HEADERS_PER_MEMBER = 64 << 10      # a member's tar headers: 512-byte blocks, a pax header for a long name
END_OF_ARCHIVE = 20 << 10          # the two zero blocks and the padding to the record size tarfile writes
# what each compressed stream starts with (the bundle writer writes gzip; tarfile's "r:*" reads all three)
_COMPRESSED = ((b"\x1f\x8b", gzip.GzipFile), (b"BZh", bz2.BZ2File), (b"\xfd7zXZ\x00", lzma.LZMAFile))


def manifest_limit() -> int:
    """What reading the manifest (the first member) may read of the decompressed tar."""
    return MAX_MANIFEST_BYTES + HEADERS_PER_MEMBER


def members_limit(sizes) -> int:
    """What reading members of these sizes, after the manifest, may read of the decompressed tar."""
    sizes = list(sizes)
    return manifest_limit() + sum(sizes) + len(sizes) * HEADERS_PER_MEMBER + END_OF_ARCHIVE


@contextmanager
def open_tar(path: str, limit: int, why: str):
    """The bundle at `path` open as a tar, reading no more than `limit` bytes of the decompressed
    stream (PlanError past it, saying `why` that is wrong); PlanError for a path that is not a
    regular file."""
    with _open_regular(path) as raw:
        stream = _decompressed(raw)
        try:
            with tarfile.open(fileobj=_Capped(stream, limit, path, why), mode="r:") as tar:
                yield tar
        finally:
            if stream is not raw:
                stream.close()


def _open_regular(path: str):
    """`path` open for reading, when it is a regular file (a link to one included). Opened without
    blocking (a FIFO with no writer blocks a plain open), then checked on the open file itself."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise PlanError(f"{_kind(mode)}, expected a warmup bundle (a regular file)", file=path)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "is a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device"
    return "is a socket" if stat.S_ISSOCK(mode) else "is not a regular file"


def _decompressed(raw):
    """The tar inside `raw`, decompressed as tarfile's "r:*" would, by the stream's first bytes."""
    head = raw.peek(6)[:6]
    for magic, opener in _COMPRESSED:
        if head.startswith(magic):
            return opener(fileobj=raw, mode="rb")
    return raw


class _Capped:
    """The decompressed tar as tarfile reads it (read, seek, tell), never past `limit` bytes:
    a header or member that would take it further is refused in one line."""

    def __init__(self, f, limit: int, path: str, why: str):
        self._f, self._limit, self._path, self._why = f, limit, path, why

    def read(self, size: int = -1) -> bytes:
        room = self._limit - self._f.tell()
        data = self._f.read(room + 1 if size is None or size < 0 or size > room else size)
        if len(data) > room:
            raise self._over()
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET and offset > self._limit:  # a member skipped: as far as if read
            raise self._over()
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def _over(self) -> PlanError:
        return PlanError(f"refused: {self._why} (read {self._limit:,} bytes of its tar and stopped)", file=self._path)
