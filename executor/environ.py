"""Environment variables set for a block and restored after it."""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def scoped_environ(values: dict):
    """Set `values` in os.environ while the block runs, then restore each name as it was (unset
    included): a caller that runs `main` in its own process keeps its own environment."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
