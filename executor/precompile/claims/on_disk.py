"""Claims: each compile key compiled once by the processes that share a cache (issue 28).

The ranks of a tensor-parallel vLLM server (each with its own pool), two servers, or two
`warmup execute` may precompile the same keys into one cache at once. A worker claims a key
before it compiles it; a process that finds the key claimed by a live owner waits for its done
mark (waits.py), then loads the kernel; one that finds it done skips it. Where the claims live,
and why there: node.py; the one code that writes them: owner.py, in the workers. In a key's
directory, ``done`` says who compiled it (written whole by write_atomic), and ``<gen>`` is a claim
of generation gen: its owner (host, worker pid, process) written whole under a temporary name, then
hard-linked into place. The link fails when the name exists, so exactly one taker gets each
generation; nobody removes another's claim (taking over creates the next generation), and an owner
removes its own when its job ends, after ``done``.

Bounds: an owner touches its claim every BEAT_S seconds (its heartbeat). A claim whose owner's pid
is gone on this host, or whose heartbeat is older than STALE_S (WARMUP_CLAIM_STALE_S: another
host's owner, a reused pid), holds nothing: the next taker takes the next generation. A live owner
holding a key longer than WAIT_S (WARMUP_CLAIM_WAIT_S: a hung compile) is taken over too (waits.py).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

from ...caches.roots import CLAIMS_DIR

DONE = "done"
BEAT_S = 5.0      # an owner touches its claim this often
STALE_S = 60.0    # a claim untouched this long holds nothing (another host's dead owner, a reused pid)
WAIT_S = 600.0    # a live owner holding one key longer than this is taken over (a hung compile)
HOST = socket.gethostname()


def bound(name: str, default: float) -> float:
    """A bound from the environment (seconds > 0), else its default."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


@dataclass(frozen=True)
class KeyClaim:
    """Where a key's claims live, and what a worker needs to take one (it travels with the job)."""

    path: str
    process: int                # the process whose pool compiles it (the claim's owner with the worker pid)
    stale_s: float = STALE_S
    beat_s: float = BEAT_S
    after: int | None = None    # the generation a takeover gives up (a live owner held it past WAIT_S)


@dataclass
class Look:
    """A key's claims as one look found them."""

    done: dict | None = None    # the done mark
    gen: int | None = None      # the newest claim
    owner: dict | None = None   # its owner
    free: str | None = None     # why the newest claim holds nothing (None: a live owner holds it)

    @property
    def held(self) -> bool:
        return self.done is None and self.gen is not None and self.free is None


def pid_alive(pid) -> bool:
    """Whether a process of this host has this pid (a zombie is dead)."""
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError, TypeError) as e:
        return isinstance(e, PermissionError)
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def who(owner: dict | None) -> str:
    owner = owner or {}
    return f"pid {owner.get('pid')} of process {owner.get('process')} on {owner.get('host')}"


def done_entries(done: dict) -> dict:
    """What a waiting process keeps of a done mark: the DeepGEMM entries its job saw, and its end
    (pool/deep_gemm_counts.py: they are not this process's compiles, and what the job saw of ours stays ours)."""
    return {"entries": list(done.get("entries") or ()), "end": done.get("time")}


def read_doc(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def look(claim: KeyClaim, now: float | None = None) -> Look:
    """The key's done mark, else its newest claim and whether a live owner holds it."""
    try:
        names = os.listdir(claim.path)
    except FileNotFoundError:
        return Look()
    except OSError as e:  # unreadable claims hold nothing: the worker then compiles unclaimed (owner.py)
        return Look(free=f"its claims cannot be read ({e.strerror})")
    if DONE in names:
        return Look(done=read_doc(os.path.join(claim.path, DONE)) or {})
    gens = sorted(int(n) for n in names if n.isdigit())
    if not gens:
        return Look()
    path = os.path.join(claim.path, str(gens[-1]))
    try:
        age = (now or time.time()) - os.stat(path).st_mtime
    except FileNotFoundError:  # its owner released it just now
        return Look(gen=gens[-1], free="released by its owner")
    owner = read_doc(path) or {}
    if age > claim.stale_s:
        free = f"its heartbeat is {age:.0f} s old (bound {claim.stale_s:g} s)"
    elif owner.get("host") == HOST and not pid_alive(owner.get("pid")):
        free = f"pid {owner.get('pid')} is gone"
    else:
        free = None
    return Look(gen=gens[-1], owner=owner, free=free)
