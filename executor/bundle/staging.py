"""One check of a bundle's members per machine, off vLLM's critical path (issue 35 item 2).

vLLM loads its plugins in every process of a server: the API server, the engine core, each worker.
The plugin starts ``prepare`` in a background thread at its ``register`` in each of them; the first
(the API server, some 40-60 s before a worker reaches ``load_model``) extracts every member into one
staging directory per bundle and checks its size and sha256 there, the others wait on the same
lock and find the directory checked. The worker's install at ``load_model`` then only renames the
checked files into the caches (``consume``) and removes the staging directory. A process killed while
extracting leaves a directory without its ``.checked`` mark, which the next one starts again.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from contextlib import contextmanager

from . import archive, locks
from .archive import Manifest

CHECKED = ".checked"


def staging_dir(manifest: Manifest, parent: str | None = None) -> str:
    """The one staging directory of this bundle's content on this machine."""
    return os.path.join(parent or tempfile.gettempdir(), f"warmup-bundle-{manifest.digest()[:20]}")


def _lock(folder: str):
    """One check of a bundle's members per machine: the others wait, then find it done."""
    return locks.exclusive(folder + ".lock")


def _check_into(path: str, manifest: Manifest, folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)  # a half-extracted one (its process was killed)
    os.makedirs(folder)
    archive.verify_members(path, manifest, folder)
    open(os.path.join(folder, CHECKED), "w").close()


def prepare(path: str, manifest: Manifest | None = None) -> str:
    """Every member of the bundle checked into its staging directory (done once: a process that
    finds it checked returns at once, one that finds another checking waits for it)."""
    manifest = manifest or archive.read_manifest(path)
    folder = staging_dir(manifest)
    with _lock(folder):
        if not os.path.exists(os.path.join(folder, CHECKED)):
            _check_into(path, manifest, folder)
    return folder


def prepare_in_background(path: str) -> threading.Thread:
    """``prepare`` in a daemon thread; a failure is left for the install, which says it in one line."""
    def run() -> None:
        try:
            prepare(path)
        except Exception:  # noqa: BLE001 - the install checks again and refuses in one line
            pass

    thread = threading.Thread(target=run, name="warmup-bundle-staging", daemon=True)
    thread.start()
    return thread


@contextmanager
def consume(path: str, manifest: Manifest, unless=None):
    """The checked staging directory, for files to be moved out of it; removed afterwards (a later
    process finds the caches filled, or checks the bundle again). `unless()`, asked once the lock is
    held: True yields None and touches nothing (the caches hold the bundle already)."""
    folder = staging_dir(manifest)
    with _lock(folder):
        if unless is not None and unless():
            yield None
            return
        if not os.path.exists(os.path.join(folder, CHECKED)):
            _check_into(path, manifest, folder)
        os.unlink(os.path.join(folder, CHECKED))  # moved out of from now on: never reused
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def discard(manifest: Manifest) -> None:
    """Remove the staging directory of a bundle this machine refused (the background check made it)."""
    folder = staging_dir(manifest)
    with _lock(folder):
        shutil.rmtree(folder, ignore_errors=True)
