"""Progress: per stage, with counts and an ETA, redrawn in place on a terminal; one line per
stage otherwise (logs, CI). A failed or unavailable step is always reported on its own line,
and the precompile phase (--jobs) by one line when its workers are done or it was skipped.

Plain text on stderr: no dependency (tqdm and rich are not needed for one line).
"""

from __future__ import annotations

import sys
import time

from planner.progress import erasing, on_terminal, write

REDRAW_S = 0.1


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "--:--"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    def __init__(self, stream=None, tty: bool | None = None, enabled: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = on_terminal(self.stream) if tty is None else tty
        self.enabled = enabled
        self._stage = None
        self._last_draw = 0.0
        self._width = 0

    # --- events from the executor --------------------------------------------------------

    def stage_start(self, name: str, steps: int, calls: int) -> None:
        self._stage = {"name": name, "steps": steps, "calls": calls, "step": 0, "done": 0,
                       "start": time.monotonic(), "current": ""}
        self._draw(force=True)

    def step_start(self, step) -> None:
        if self._stage is not None:
            self._stage["step"] += 1
            self._stage["current"] = step.id
            self._draw(force=True)

    def tick(self, n: int) -> None:
        if self._stage is not None and n:
            self._stage["done"] += n
            self._draw()

    def step_end(self, record) -> None:
        if record.status in ("failed", "unavailable"):
            self.message(f"{record.status.upper()} {record.id}: {record.error or ''}")

    def stage_end(self, summary: dict) -> None:
        if not self.enabled:
            return
        self._clear()
        counts = ", ".join(f"{summary[s]} {s}" for s in ("ok", "failed", "unavailable", "skipped") if summary[s])
        compiled = f"{'-' if summary['compiled'] is None else summary['compiled']} compiled"
        if summary.get("compiled_pool"):
            compiled += f" ({summary['compiled_pool']} by workers)"
        disk = "-" if summary["disk_loads"] is None else summary["disk_loads"]
        self._write(f"stage {summary['stage']}: {summary['steps']} steps ({counts or 'none run'}), "
                    f"{summary['kernel_calls']} kernel calls, {compiled}, {disk} from disk cache, "
                    f"{summary['wall_s']:.1f} s\n")
        self._stage = None

    def precompile(self, summary: dict) -> None:
        """The precompile phase in one line (executor.report.render_precompile, first line)."""
        from .report import render_precompile

        line = render_precompile(summary).split("\n")[0]
        if line:
            self.message(line)

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        self._clear()
        self._write(text.rstrip("\n") + "\n")
        self._draw(force=True)

    # --- drawing -----------------------------------------------------------------------------

    def _draw(self, force: bool = False) -> None:
        if not (self.enabled and self.tty and self._stage):
            return
        now = time.monotonic()
        if not force and now - self._last_draw < REDRAW_S:
            return
        self._last_draw = now
        st = self._stage
        elapsed = now - st["start"]
        eta = None
        if st["done"] and st["calls"]:
            eta = max(0.0, elapsed / st["done"] * (st["calls"] - st["done"]))
        pct = 100.0 * st["done"] / st["calls"] if st["calls"] else 0.0
        line = (f"{st['name']}: step {st['step']}/{st['steps']}, calls {st['done']}/{st['calls']} "
                f"({pct:.0f}%), {fmt_duration(elapsed)} elapsed, ETA {fmt_duration(eta)}  {st['current']}")
        line = line[:160]
        pad = max(0, self._width - len(line))
        self._write("\r" + line + " " * pad)
        self._width = len(line)

    def _clear(self) -> None:
        if self.tty and self._width:
            self._write(erasing(self._width))
            self._width = 0

    def _write(self, text: str) -> None:
        write(self.stream, text)  # a terminal gone: the run goes on without its line
