"""The review job: what a change does to the warmup, and what a plan gets wrong.

    commands.py  `warmup diff` and `warmup check`: argument parsing, inputs, output
    diff.py      semantic diff of two expanded plans (text, markdown, json)
    lints.py     lints over an expanded plan, with their codes and fixes

Imported on every `warmup` start (planner/cli.py registers the commands), so this
imports only `commands`, which is cheap: diff and lints load inside the
commands that use them.
"""

from .commands import add_commands

__all__ = ["add_commands"]
