"""One method of a vLLM class wrapped by the plugin once per process, vLLM's function kept on the class.

vLLM loads its plugins in each process, and a test registers more than once: a method wrapped a
second time would run the plugin's work twice. So each wrapper has a marker attribute of its own on
the class (several wrappers of one method stack, each undone by its own marker), holding the
function it wrapped.
"""

from __future__ import annotations

import functools
import sys


def imported(module: str, name: str):
    """`module`.`name` where this process has imported the module, else None: a class the plugin wraps
    only where vLLM itself loaded it (the API server's EngineArgs), never imported just to patch it."""
    return getattr(sys.modules.get(module), name, None)


def wrap_once(cls, method: str, marker: str, wrap) -> bool:
    """cls.method = wrap(vLLM's cls.method), unless `marker` says this was done; True if it was wrapped now."""
    if marker in vars(cls):
        return False
    original = getattr(cls, method)
    setattr(cls, marker, original)
    setattr(cls, method, functools.wraps(original)(wrap(original)))
    return True


def unwrap(cls, method: str, marker: str) -> None:
    """The function `marker`'s wrapper replaced, back in place (tests); nothing where it was not wrapped."""
    if marker in vars(cls):
        setattr(cls, method, vars(cls)[marker])
        delattr(cls, marker)
