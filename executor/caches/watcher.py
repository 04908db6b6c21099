"""What a family's watcher is: its library's hooks into the JIT monitor (executor/jit_monitor.py).

A monitored family's module defines its Watcher and names it in its row (``Monitored.watcher``);
the monitor makes one per family and calls it. What a watcher may use of its monitor:

- ``count(counter, n=1, kernel=None, compile_ms=0.0)``: add to the running step and the totals;
- ``post_seal(*events)``: events after the seal (recorded, logged, raised in mode ``error``);
- ``watch(label)``: say what is hooked (the report's ``watching``);
- ``cache_env()``: the environment its cache's roots are resolved in (executor/caches/roots.py's
  Env): the one the run resolved and handed down, else this process's when it is asked;
- ``lock``, ``current`` (the running step's counts), ``sealed``, ``loads_ok``, ``step_id`` and
  ``pool_busy`` (True while the precompile pool compiles into the same caches).

Nothing is imported here, so that a family's module stays on the ground floor.
"""

from __future__ import annotations

import sys


class Watcher:
    """One library's hooks into a Monitor.

    ``attach()`` runs once per install, as soon as ``ready()``: libraries imported after the
    install are picked up at the next step boundary. Every hook it sets pushes its undo onto
    ``restore``; ``detach()`` runs them newest first, so chained hooks unwind in order.
    ``poll()`` runs at step boundaries, for libraries that have no hook to call us."""

    library: str | None = None  # attach once this module is imported; None: at install

    def __init__(self, monitor):
        self.monitor = monitor
        self.attached = False
        self.restore: list = []

    def ready(self) -> bool:
        return self.library is None or self.library in sys.modules

    def attach(self) -> None:
        # Marked first: a library that fails to hook is not retried at every step boundary.
        self.attached = True
        self._attach()

    def _attach(self) -> None:
        raise NotImplementedError

    def poll(self) -> None:
        pass

    def details(self) -> dict | None:
        """What the report keeps of this watcher beside the counts (the monitor's summary), if anything."""
        return None

    def absorb(self, entries) -> None:
        """Cache entries another process compiled (the precompile pool, which counts them): not
        this process's compiles when they show up. Only a watcher that polls a cache has any."""

    def detach(self) -> None:
        for undo in reversed(self.restore):
            try:
                undo()
            except Exception:  # noqa: BLE001 - restoring must not fail the caller
                pass
        self.restore.clear()
        self.attached = False

    def _set(self, owner, attr: str, value, label: str | None = None) -> None:
        """Replace owner.attr (keeping the old value to restore) and report what is watched."""
        previous = getattr(owner, attr)
        setattr(owner, attr, value)
        self.restore.append(lambda: setattr(owner, attr, previous))
        if label:
            self.monitor.watch(label)
