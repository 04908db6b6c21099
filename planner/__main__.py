"""`python -m planner`: the `warmup` command (pyproject's console script, planner.cli:main), for an
environment whose bin/ is not on PATH. It imports what `warmup` imports (planner.cli, under the
start-up rule of planner/__init__.py) and nothing more; tests/test_packaging.py checks both.

There is no `python -m warmup`: that would need a top-level module named `warmup` in the wheel, a
fifth generic top-level name in vLLM's environment (PyPI has a distribution called `warmup`), for
what `python -m planner` already does."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
