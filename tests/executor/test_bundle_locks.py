"""executor/bundle/locks.py: the bundle's one lock, across processes, with and without a deadline."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from executor.bundle import locks


def _hold(path: str, held, release) -> None:
    with locks.exclusive(path):
        held.set()
        release.wait(30)


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock on tmp_path/x.lock until released."""
    ctx = multiprocessing.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(tmp_path / "x.lock"), held, release))
    proc.start()
    assert held.wait(30)
    yield release
    release.set()
    proc.join(30)


def test_a_waiter_with_a_deadline_gives_up_with_its_own_error(tmp_path, holder):
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="still held"):
        with locks.exclusive(str(tmp_path / "x.lock"), deadline=time.monotonic() + 0.3,
                             waited_too_long=lambda: TimeoutError("still held")):
            pass
    assert 0.3 <= time.monotonic() - start < 10


def test_the_lock_is_taken_once_its_holder_releases_it(tmp_path, holder):
    holder.set()
    with locks.exclusive(str(tmp_path / "x.lock"), deadline=time.monotonic() + 20, waited_too_long=AssertionError):
        entered = True
    assert entered


def test_a_file_that_cannot_be_opened_is_the_callers_error(tmp_path):
    with pytest.raises(ValueError, match="no room"):
        with locks.exclusive(str(tmp_path / "missing" / "x.lock"), cannot_open=lambda e: ValueError("no room")):
            pass
    with pytest.raises(FileNotFoundError):
        with locks.exclusive(str(tmp_path / "missing" / "x.lock")):
            pass
