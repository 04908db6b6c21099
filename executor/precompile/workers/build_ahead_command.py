"""The command line that starts the build-ahead process (build_ahead.py), for the process that starts it.

Kept apart from build_ahead.py: a module imported before `python -m` runs it makes runpy warn on
stderr, whose lines the process's starter reads as the builds' own (one line a module).
"""

from __future__ import annotations

import os
import sys

MODULE = "executor.precompile.workers.build_ahead"  # what `python -m` runs


def build_ahead_command(generators: list, arch: str, timeout_s, parent: int | None = None) -> list[str]:
    """The command line of a build-ahead process for FlashInfer's `generators` ('module:function'),
    built for `arch` ('9.0'), ending with `parent` (this process by default) or after `timeout_s`."""
    return [sys.executable, "-m", MODULE, "--arch", arch, "--parent", str(os.getpid() if parent is None else parent),
            "--timeout", str(timeout_s), *generators]
