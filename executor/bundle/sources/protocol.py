"""What each scheme's module gives (executor/bundle/sources/__init__.py holds the table of them).

A scheme's module has ``SCHEME`` (its name, the table's key), ``claims(value)`` (whether the text a
user gave names a bundle of this scheme) and ``opened(value, where=...)`` (its Source; PlanError,
one line, for a name the scheme refuses). A Source is asked in this order: ``pin`` (a remote name
made to name fixed bytes, once, by the first process), ``path`` (where its local file is, or will
be once fetched), ``fetch`` (the local file, there or brought now). A command that reads a bundle
once gets a Local: its file, and its origin (the Source's name, pinned), which is what an install
records, never a temporary file's path.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Protocol, runtime_checkable


class AlreadyFailed(Exception):
    """Another process of the same server met this failure and said it: the caller says nothing."""


class Fetched(NamedTuple):
    path: str
    # what the fetch brought, with its `reference` (the pinned name, as lines print it) and `size`
    # (bytes) at least (oci.Pulled); None: the file was here already (another process brought it)
    pulled: object | None


class Local(NamedTuple):
    """A bundle's local file for one command's length (sources.local_file), and where it came from."""

    path: str    # the file to read: the one given, a directory's bundle, or a remote one fetched (maybe temporary)
    origin: str  # what an install's record says it came from: the file or directory given, the pinned oci:// name


@runtime_checkable
class Source(Protocol):
    """A bundle's place, opened from the text that names it."""

    name: str             # what lines call it: the text given, or the pinned name
    remote: bool          # its bytes live elsewhere: pinned, then fetched into a cache directory
    digest: str | None    # the digest its name fixes (a pinned remote name); None: none named

    def pin(self, *, timeout_s: float, plain_http: bool = False, environ=os.environ) -> "Source":
        """The same bundle named by fixed bytes (a tag resolved to the digest it names now; a local
        source is itself)."""

    def path(self, cache_dir: str | None = None) -> str:
        """Where its local file is: a remote one's in `cache_dir` once fetched (pinned first)."""

    def fetch(self, cache_dir: str | None = None, *, timeout_s: float, server: str = "",
              plain_http: bool = False, environ=os.environ) -> Fetched:
        """The local file, there already or brought now (`server`: the processes that share a
        failure, AlreadyFailed for the others; `timeout_s` bounds every wait)."""
