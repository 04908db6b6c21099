"""The bundle's one lock: an exclusive fcntl lock on a file, held across processes and released by the
kernel when its holder exits or crashes (a killed installer leaves nothing to clean up).

Three things take it: one installer at a time per cache (ops.locked), one check of a bundle's members
per machine (staging.py), one pull of an `oci://` reference per node (sources/oci.py, which waits no
longer than its deadline).
"""

from __future__ import annotations

import fcntl
import time
from contextlib import contextmanager

POLL_S = 0.05  # how often a waiter with a deadline asks again


@contextmanager
def exclusive(path: str, *, deadline: float | None = None, waited_too_long=None, cannot_open=None):
    """Hold the lock on `path` (made if missing) inside the block. Without `deadline`, wait for it;
    with one (time.monotonic()), ask every POLL_S and raise `waited_too_long()` once it has passed.
    `cannot_open(OSError)` is raised where the file cannot be opened (else the OSError)."""
    try:
        f = open(path, "a")
    except OSError as e:
        if cannot_open is None:
            raise
        raise cannot_open(e) from None
    with f:
        _acquire(f, deadline, waited_too_long)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _acquire(f, deadline: float | None, waited_too_long) -> None:
    if deadline is None:
        fcntl.flock(f, fcntl.LOCK_EX)
        return
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise waited_too_long() from None
            time.sleep(POLL_S)
