"""Where a bundle comes from, one module per scheme, in one table (SCHEMES): the CLI's
`install|verify|inspect` and the vLLM plugin (WARMUP_BUNDLE) both open what they are given here.

    protocol.py    what a scheme's module gives: a Source (pin, path, fetch) and the records it returns (Fetched, Local)
    file.py        a bundle file: itself
    directory.py   a directory holding one bundle (a Kubernetes image volume, mounted read-only)
    oci.py         an `oci://` reference, pulled once per node into the node's cache

A new scheme is a module beside these (its SCHEME, `claims` and `opened`) and one row of SCHEMES
(tests/executor/test_bundle_source_schemes.py adds a fictitious one). The process choreography of
an oci:// start (which process pins, hands the pinned name down, pulls in the background, waits)
is the plugin's (vllm_bridge/bundles/source.py); what a bundle's place is, is here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import contextmanager

from . import directory, file, oci
from .protocol import AlreadyFailed, Fetched, Local, Source

__all__ = ["SCHEMES", "AlreadyFailed", "Fetched", "Local", "Source", "open_source", "local_file"]

# scheme -> its module; asked in this order, the first whose `claims` takes the text opens it (a
# plain path is a file when nothing before it claims it: the last row)
SCHEMES = {
    oci.SCHEME: oci,
    directory.SCHEME: directory,
    file.SCHEME: file,
}


def open_source(value: str, *, where: str = "reference") -> Source:
    """The bundle `value` names, by the first scheme that claims it (nothing is read or fetched
    yet); PlanError, one line naming `where` the text came from, for a name its scheme refuses."""
    for module in SCHEMES.values():
        if module.claims(value):
            return module.opened(value, where=where)
    raise ValueError(f"no bundle scheme claims {value!r}")  # the file row claims any text


@contextmanager
def local_file(value: str, *, timeout_s: float, plain_http: bool = False, environ=os.environ):
    """The local file of the bundle `value` names, for a command that reads it once (a Local: the
    file, and the origin an install records): a file or a directory's bundle where it is, its origin
    the name given; a remote bundle pinned and fetched into a temporary directory, removed
    afterwards, its origin the pinned name (`oci://...@sha256:...`), never the temporary path.
    PlanError for bad input, the scheme's own error where it cannot fetch."""
    source = open_source(value)
    if not source.remote:
        yield Local(source.path(), source.name)
        return
    deadline = time.monotonic() + timeout_s  # the pin and the fetch together
    work = tempfile.mkdtemp(prefix="warmup-bundle-source-")
    try:
        pinned = source.pin(timeout_s=timeout_s, plain_http=plain_http, environ=environ)
        left = max(0.0, deadline - time.monotonic())
        yield Local(pinned.fetch(work, timeout_s=left, plain_http=plain_http, environ=environ).path, pinned.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
