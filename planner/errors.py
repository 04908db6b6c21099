"""The one exception users see: bad input, located in a file, a line and a YAML path."""

from __future__ import annotations


def one_line(text, limit: int | None = None) -> str:
    """Any text (an exception's, a tool's) as one line; cut to `limit` characters, ending '...'."""
    line = " ".join(str(text).split())
    if limit is not None and len(line) > limit:
        return line[: max(0, limit - 3)] + "..."
    return line


class PlanError(Exception):
    """Invalid input. Printed as one line: ``FILE:LINE: PATH: MESSAGE`` and exit code 2."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 path: str | None = None):
        super().__init__(message)
        self.message = one_line(message)
        self.file = file
        self.line = line
        self.path = path

    def __str__(self) -> str:
        where = location(self.file, self.line)
        if self.path:
            return f"{where}: {self.path}: {self.message}"
        return f"{where}: {self.message}"


class WriteError(PlanError, OSError):
    """An output file that cannot be written (`-o`, `--report`, tuned tables, the precompile
    manifest): exit 2 at the command line, like any bad input, and still an OSError for the
    library callers that already treat a failed write as one (the manifest is best effort)."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"cannot write: {reason}", file=path)


def location(file: str | None, line: int | None) -> str:
    """'FILE:LINE', or 'FILE' when the line is unknown."""
    where = file or "<input>"
    return where if line is None else f"{where}:{line}"


def format_path(path: tuple) -> str:
    """('model', 'linear', 0, 'n') -> 'model.linear[0].n' (the YAML path users read)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"
