"""Ending processes with what they started, by their handles and pids, never by name.

A worker cut short (a cancelled pool, a hung job) or the build-ahead process leaves behind what
it started: a FlashInfer build's ninja and nvcc would go on writing the files vLLM's process then
builds itself. So the processes below each one are found (Linux's /proc) before it is ended, and
killed with it.
"""

from __future__ import annotations

import os
import signal
import time

JOIN_S = 5.0  # how long a finished pool's workers get to exit before they are terminated


def join(processes, seconds: float) -> None:
    """Wait for `processes` to exit, at most `seconds` in all."""
    deadline = time.perf_counter() + seconds
    for proc in processes:
        try:
            proc.join(max(0.0, deadline - time.perf_counter()))
        except Exception:  # noqa: BLE001
            pass


def terminate(processes) -> None:
    """Terminate those of `processes` still alive (by their handles) and what they started
    (a FlashInfer build's ninja and nvcc), and reap them."""
    started = [pid for proc in processes if _alive(proc) for pid in descendants(proc.pid)]
    for proc in processes:
        try:
            if proc.is_alive():
                proc.terminate()
        except Exception:  # noqa: BLE001
            pass
    kill(started)
    join(processes, JOIN_S)


def kill(pids) -> None:
    """SIGKILL each of `pids` that is still there."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _alive(proc) -> bool:
    try:
        return proc.is_alive()
    except Exception:  # noqa: BLE001
        return False


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (Linux's /proc; none elsewhere), children first."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])  # the name may hold spaces and ')'
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(0), [])
        out += below
        todo += below
    return out
