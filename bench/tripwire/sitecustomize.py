"""The proof's tripwire (issue 43 item 5): every Python process of a bundle-cold run records each
attempt to open, list or load a path under the building machine's caches.

bench/vllm_startup_proof.sh puts this directory first on PYTHONPATH of a bundle-cold run, with
WARMUP_TRIPWIRE_ROOTS (the bundle's building roots, os.pathsep-separated) and WARMUP_TRIPWIRE_LOG (a
file). Python imports ``sitecustomize`` at start in every process (vLLM's API server, its engine
core and the processes they spawn inherit the environment), and the audit hook added here sees
every ``open``, ``os.listdir``, ``os.scandir`` and ``ctypes.dlopen`` of the process, before the call:
an attempt on a path that is not there is recorded too. The run is failed when the log is not
empty. The building caches are moved away for the run as well (or were on another machine), so
a reader that would open them there fails visibly either way. A sitecustomize this one shadows
is run after it.
"""

from __future__ import annotations

import os
import sys

EVENTS = ("open", "os.listdir", "os.scandir", "ctypes.dlopen", "os.chdir")


def _install() -> None:
    roots = tuple(r.rstrip(os.sep) for r in os.environ.get("WARMUP_TRIPWIRE_ROOTS", "").split(os.pathsep) if r)
    log = os.environ.get("WARMUP_TRIPWIRE_LOG")
    if not roots or not log:
        return
    prefixes = tuple(r + os.sep for r in roots)
    busy = []  # the hook's own write opens the log: not an event

    def hook(event, args):
        if event not in EVENTS or busy or not args:
            return
        path = args[0]
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        if not isinstance(path, str) or not (path in roots or path.startswith(prefixes)):
            return
        busy.append(1)
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()} {event} {path}\n")
        except OSError:
            pass
        finally:
            busy.pop()

    sys.addaudithook(hook)


def _chain() -> None:
    """Run the sitecustomize this one shadows, if any (an image's own)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.abspath(entry or ".") != here and os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as f:
                code = compile(f.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})  # noqa: S102 - the image's own file
            return


_install()
_chain()
