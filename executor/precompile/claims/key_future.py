"""A compile key's future: what the book, the loop's hook and the pool's barriers wait for.

A job's executor future answers for one run of the job; the key it warms may need more than one:
a worker that finds the key held by another process answers "held", and a takeover submits the
key again (waits.py). The key's future stays the same across them, and is answered once: by the
job that compiled it, the done mark another process left, or a cancel.
"""

from __future__ import annotations

from concurrent.futures import Future, InvalidStateError


class KeyFuture(Future):
    """A key's future across the jobs that warm it (see the module docstring)."""

    inner = None  # the executor's future of the job now running for it

    def cancel(self) -> bool:
        """As the executor's future: False while a worker runs the job, else cancelled (a wait too)."""
        inner = self.inner
        if inner is not None and not inner.done() and not inner.cancel():
            return False
        return Future.cancel(self)

    def settle(self, result=None, error=None) -> None:
        """The key's answer, unless it was cancelled meanwhile (the first word stays)."""
        try:
            self.set_exception(error) if error is not None else self.set_result(result)
        except InvalidStateError:
            pass
