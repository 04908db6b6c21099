"""The one entry-point loader: what other packages register for the planner and the executor.

Modelled on vLLM's `load_plugins_by_group` (vllm/plugins/__init__.py): the entry points of one
group, each loaded, and one that fails to load named in a warning and left out, so a broken
plugin never breaks the command that looked (`warmup plan` keeps working with a broken
`execute`). The groups: `warmup.commands` (planner/cli.py), `warmup.engine_sources`
(planner/commands/engine.py), `warmup.backends` (executor/registry.py). The planner never
imports the packages above it: they come in only through here, when a group is asked for.
"""

from __future__ import annotations

import sys
from typing import Collection


def load_plugins_by_group(group: str, names: Collection[str] | None = None) -> dict:
    """{name: the loaded object} of the group's entry points, by name; `names`: only those (a
    command that needs one plugin imports no other). A plugin whose load raises is left out with
    one warning line on stderr naming it, its group and why."""
    from importlib.metadata import entry_points  # scanning costs: only when a group is asked for

    plugins = {}
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        if (names is not None and ep.name not in names) or ep.name in plugins:
            continue
        try:
            plugins[ep.name] = ep.load()
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break the command that scans
            print(f"warmup: warning: {group} plugin {ep.name!r} failed to load: {e}", file=sys.stderr)
    return plugins
