"""A bundle's place in an OCI registry: ``oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]``.

The grammar is the distribution spec's (the one `docker`, `oras` and Kubernetes take), with one
restriction: the registry is always written out, so that a reference never means Docker Hub by
accident. A reference with a digest names bytes; one with only a tag names whatever the tag points
at when it is read (``pinned`` turns it into the digest it resolved to, and that is what a node
pulls and logs).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from planner.errors import PlanError

SCHEME = "oci://"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REGISTRY = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                       r"|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?")
# Docker's and containerd's rule: these speak plain HTTP unless told otherwise; any other registry TLS.
_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")


class Reference(NamedTuple):
    registry: str          # host[:port]
    repository: str        # path in the registry
    tag: str | None
    digest: str | None     # sha256:<64 hex>

    def __str__(self) -> str:
        text = f"{SCHEME}{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    def pinned(self, digest: str) -> "Reference":
        """This reference resolved: the digest it names now (the tag kept, for the log line)."""
        return self._replace(digest=digest)

    @property
    def manifest_name(self) -> str:
        """What the registry's manifests endpoint is asked for: the digest where there is one."""
        return self.digest or self.tag or "latest"

    @property
    def host(self) -> str:
        return self.registry.rsplit(":", 1)[0] if not self.registry.endswith("]") else self.registry

    def plain_http(self) -> bool:
        """Whether the registry is spoken to without TLS: loopback only (WARMUP_REGISTRY_PLAIN_HTTP=1
        or `--plain-http` asks for it elsewhere, as `oras --plain-http` does)."""
        return self.host in _LOOPBACK


def is_reference(value: str) -> bool:
    return value.startswith(SCHEME)


def parse(value: str, *, where: str = "reference") -> Reference:
    """``oci://REGISTRY/REPO[:TAG][@sha256:HEX]`` (the ``oci://`` may be left out on the command
    line); one line naming what is wrong otherwise."""
    text = value[len(SCHEME):] if value.startswith(SCHEME) else value
    registry, slash, rest = text.partition("/")
    if not slash or not _REGISTRY.fullmatch(registry):
        raise _bad(value, where, "it must start with the registry's host (oci://HOST[:PORT]/REPOSITORY[:TAG][@sha256:DIGEST])")
    rest, at, digest = rest.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        raise _bad(value, where, f"its digest {digest!r} is not sha256:<64 lowercase hex digits>")
    repository, tag = _split_tag(rest)
    if not _REPOSITORY.fullmatch(repository):
        raise _bad(value, where, f"its repository {repository!r} is not lowercase path components")
    if tag is not None and not _TAG.fullmatch(tag):
        raise _bad(value, where, f"its tag {tag!r} is not a valid tag")
    return Reference(registry, repository, tag, digest or None)


def _split_tag(rest: str) -> tuple[str, str | None]:
    """'repo/name:tag' -> ('repo/name', 'tag'); a colon only counts after the last slash."""
    head, slash, last = rest.rpartition("/")
    name, colon, tag = last.partition(":")
    return f"{head}{slash}{name}", (tag if colon else None)


def _bad(value: str, where: str, why: str) -> PlanError:
    return PlanError(f"not a valid {where}: {why}", file=value)
