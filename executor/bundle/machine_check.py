"""Installs checked against the bundle's own fingerprint, checked against the machine at start
(issue 43 item 6).

An image built on a machine without the GPU it will run on can bake a start-up bundle into its
caches: ``warmup bundle install FILE --target bundle`` takes the bundle's fingerprint as the target
and leaves, beside the install's record (executor/bundle/usage.py), a mark that the machine is still
to be checked. When vLLM starts with the plugin on, the first worker to reach ``load_model`` (under
a lock: every rank waits for it) compares each such record's fingerprint with the real machine's:
a match clears the mark; a difference removes every entry that install placed, in one line, and
vLLM compiles for the machine it is on.
"""

from __future__ import annotations

import os
import shutil

from . import environment, usage
from .ops import locked
from .records import UNCHECKED, pending, records_dir


def check(vllm_cache_root: str, here: dict) -> list[str]:
    """Check every pending install against `here` (this machine's fingerprint, with vLLM's config
    hash); one line each: kept, or removed with the field that differs."""
    if not pending(vllm_cache_root):
        return []
    lines = []
    with locked(records_dir(vllm_cache_root)):
        for record in pending(vllm_cache_root):  # again, under the lock: another rank may have done it
            lines.append(_check_one(record, here))
            os.unlink(record + UNCHECKED)
    return lines


def _check_one(record: str, here: dict) -> str:
    installed = usage.load(record)
    if installed is None:
        return f"the install recorded at {record} cannot be read; nothing checked"
    problem = environment.mismatch(installed.fingerprint or {}, here)
    if problem is None:
        return f"bundle {installed.bundle}, installed against its own fingerprint: this machine matches it"
    removed = remove_install(installed)
    return (f"bundle {installed.bundle} was installed for another machine ({problem}): its {removed} entries "
            "removed, vLLM compiles for this one")


def remove_install(installed: usage.Installed) -> int:
    """Remove every entry the install placed; how many."""
    count = 0
    for family, entries in installed.entries.items():
        root = installed.roots[family]
        for entry in entries:
            path = os.path.join(root, entry)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)
            count += 1
    return count
