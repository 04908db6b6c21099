"""A worker's side of a claim (on_disk.py): taking it before a job, holding it while the job runs
(its heartbeat), and ending it: the done mark when the job succeeded, then the claim removed.

Kept apart from on_disk.py, which the waiting main process reads too, because this is the only
code that writes claims, and it runs in the pool's workers (workers/worker.py ``run_job``).
"""

from __future__ import annotations

import json
import os
import threading
import time

from planner.output import write_atomic

from .on_disk import DONE, HOST, KeyClaim, done_entries, look, read_doc, who


def take(claim: KeyClaim) -> tuple[str, object]:
    """In a worker, before it compiles: ("mine", Held), ("done", the done mark) or ("held", owner)."""
    for _ in range(5):
        seen = look(claim)
        if seen.done is not None:
            return "done", seen.done
        if seen.held and seen.gen != claim.after:
            return "held", {**seen.owner, "gen": seen.gen}
        gen = 0 if seen.gen is None else seen.gen + 1
        owner = {"host": HOST, "pid": os.getpid(), "process": claim.process, "gen": gen, "since": time.time()}
        path = os.path.join(claim.path, str(gen))
        temp = os.path.join(claim.path, f".{gen}.{HOST}.{os.getpid()}.tmp")
        write_atomic(temp, json.dumps(owner), make_folder=True)
        try:
            os.link(temp, path)  # fails when the generation exists: one taker each
        except FileExistsError:
            continue
        finally:
            os.unlink(temp)
        held = Held(claim, path, owner)
        done = read_doc(os.path.join(claim.path, DONE))
        if done is not None:  # done between the look and the link
            held.end(ok=False)
            return "done", done
        return "mine", held.beat()
    seen = look(claim)  # lost every race: others took the key
    return ("done", seen.done) if seen.done is not None else ("held", {**(seen.owner or {}), "gen": seen.gen})


class Held:
    """A worker's claim while its job runs: the heartbeat, then the done mark (ok) or the release."""

    def __init__(self, claim: KeyClaim, path: str, owner: dict):
        self.claim, self.path, self.owner = claim, path, owner
        self._stop = threading.Event()

    def beat(self) -> "Held":
        threading.Thread(target=self._beat, name="warmup-claim-heartbeat", daemon=True).start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.claim.beat_s):
            try:
                os.utime(self.path)
            except OSError:
                return

    def end(self, ok: bool, entries=(), end: float | None = None) -> None:
        """The job ended (at `end`): the done mark first when it succeeded, with the DeepGEMM entries
        it saw and its end, from which every process counts each kernel for the same job
        (pool/deep_gemm_counts.py), then this claim removed."""
        self._stop.set()
        try:
            if ok:
                done = {**self.owner, "time": end or time.time(), "entries": sorted(entries or ())}
                write_atomic(os.path.join(self.claim.path, DONE), json.dumps(done), make_folder=True)
            os.unlink(self.path)
        except Exception:  # noqa: BLE001 - a claim left behind is taken over by the bounds
            pass


def claim_key(job, out):
    """Claim the job's key before compiling it: the claim held (None when the key has no
    claims, or they cannot be written here: it compiles unclaimed, as before), and in `out.claim`
    how the key is had: "mine", "done" (another process compiled it) or "held" (one compiles it)."""
    if job.claim is None:
        return None
    try:
        how, what = take(job.claim)
    except Exception:  # noqa: BLE001 - a read-only cache: no claims, never a failed job
        return None
    if how == "mine":
        out.claim = {"how": "mine"}
        return what
    out.claim = {"how": how, "by": who(what), **(done_entries(what) if how == "done" else {})}
    return None

