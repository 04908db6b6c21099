"""Progress on a terminal: one line on stderr, rewritten in place, for work that runs longer than
a second (`warmup check`, `validate` and `diff` reading a large expanded plan; `warmup bundle push`
and `pull` moving a bundle).

Nothing is written unless stderr is a terminal, so what tests, CI and pipes read stays byte for
byte what it was; and nothing before DELAY_S, so a quick command never flickers a line. The line
is erased when the work ends, before the command writes its output or its one-line error.

    with progress.shown("warmup check"):          # the command: a line only on a terminal
        task = progress.current()                 # the code doing the work, wherever it is
        task.phase(f"reading {path}", total=size) # what is under way, and its size (bytes)
        task.update(done)                         # cheap: call it as often as is convenient

`current()` is a do-nothing stand-in outside `shown`, so the readers report progress whoever
called them. A thread redraws the line four times a second, so that the time shown moves on
through a long step that reports nothing (the full JSON-Schema validator over one large step).

The project depends on neither tqdm nor rich; this is the few lines it needs of them.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

DELAY_S = 1.0       # no line for work that ends sooner
REDRAW_S = 0.25


class _Silent:
    """What `current()` gives where no progress is shown: every call does nothing."""

    def phase(self, label: str, total: int | None = None) -> None:
        pass

    def update(self, done: int) -> None:
        pass

    def close(self) -> None:
        pass


class Progress(_Silent):
    """One line on `stream` (a terminal): `PREFIX: LABEL  45% (7.0 of 15.5 MiB)  3 s`."""

    def __init__(self, prefix: str, stream, delay: float | None = None, redraw: float | None = None):
        self.prefix, self.stream = prefix, stream
        self.delay = DELAY_S if delay is None else delay
        self.redraw = REDRAW_S if redraw is None else redraw
        self.label, self.total, self.done = "", None, 0
        self.started = self.last = time.monotonic()
        self.drawn = 0          # the length of the line on screen (0: none)
        import shutil  # here: only a terminal pays for these imports
        import threading

        self.width = max(20, shutil.get_terminal_size().columns - 1)  # one row: \r returns to its start
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="warmup-progress", daemon=True)
        self.thread.start()

    def phase(self, label: str, total: int | None = None) -> None:
        self.label, self.total, self.done = label, total, 0
        self._due()

    def update(self, done: int) -> None:
        self.done = done
        self._due()

    def _due(self) -> None:
        if time.monotonic() - self.last >= self.redraw:
            self.draw()

    def _run(self) -> None:
        while not self.stop.wait(max(self.redraw, 0.05)):
            self.draw()

    def text(self) -> str:
        """The line, at most `width` characters: a long label loses its start, never the figures."""
        elapsed = time.monotonic() - self.started
        figures = []
        if self.total:
            share = min(self.done, self.total) / self.total
            figures.append(f"{share:4.0%} ({_size(self.done, self.total)})")
        figures.append(f"{elapsed:.0f} s")
        tail = "  " + "  ".join(figures)
        head = f"{self.prefix}: " if self.label else self.prefix
        label, room = self.label, self.width - len(head) - len(tail)
        if len(label) > room:
            label = "..." + label[len(label) - room + 3:] if room > 3 else ""
        return (head + label + tail)[:self.width]

    def draw(self) -> None:
        """Rewrite the line, once DELAY_S has passed (the thread calls this)."""
        now = time.monotonic()
        if now - self.started < self.delay:
            return
        with self.lock:
            if self.stop.is_set():
                return
            self.last = now
            line = self.text()
            self._write("\r" + line.ljust(self.drawn))
            self.drawn = max(self.drawn, len(line))

    def close(self) -> None:
        """Stop, and erase the line where one was drawn."""
        self.stop.set()
        self.thread.join()
        with self.lock:
            if self.drawn:
                self._write(erasing(self.drawn))
                self.drawn = 0

    def _write(self, text: str) -> None:
        if not write(self.stream, text):
            self.stop.set()


def write(stream, text: str) -> bool:
    """`text` on a terminal's stream, flushed; False where the terminal went away (the work goes on
    without a line). The executor's stage line (executor/progress.py) writes through this too."""
    try:
        stream.write(text)
        stream.flush()
        return True
    except (OSError, ValueError):
        return False


def erasing(width: int) -> str:
    """What erases a line of `width` characters drawn in place, the cursor back at its start."""
    return "\r" + " " * width + "\r"


def _size(done: int, total: int) -> str:
    if total >= 1 << 20:
        return f"{done / 2 ** 20:.1f} of {total / 2 ** 20:.1f} MiB"
    return f"{done:,} of {total:,} bytes"


_SILENT = _Silent()
_current: _Silent = _SILENT


def current() -> _Silent:
    """The progress line being shown, or a stand-in that shows nothing."""
    return _current


def on_terminal(stream=None) -> bool:
    """Whether `stream` (stderr) is a terminal: the only place a progress line is drawn."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


@contextmanager
def shown(prefix: str, stream=None, delay: float | None = None):
    """A progress line on stderr for the work inside, where stderr is a terminal (else nothing):
    `current()` is it meanwhile. Nested use keeps the outer line."""
    global _current
    stream = sys.stderr if stream is None else stream
    if _current is not _SILENT or not on_terminal(stream):
        yield _current
        return
    line = Progress(prefix, stream, delay)
    _current = line
    try:
        yield line
    finally:
        _current = _SILENT
        line.close()
