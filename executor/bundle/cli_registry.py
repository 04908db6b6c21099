"""`warmup bundle push|pull`: a bundle to and from an OCI registry (executor/bundle/oci.py).

    warmup bundle push FILE oci://HOST/REPO[:TAG]     the bundle as one artifact; prints the reference
                                                      pinned to its digest (REF@sha256:...) on stdout
    warmup bundle pull oci://HOST/REPO[:TAG|@sha256:D] -o FILE
                                                      every byte checked against its digest, FILE
                                                      written whole or not at all; prints the pinned
                                                      reference on stdout

Exit codes: 0 ok; 1 the registry could not be used (down, slow, credentials refused, not found);
2 invalid input (a reference, a file that is no bundle, an output that cannot be written, a
manifest or blob whose bytes do not match their digest).
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager

from planner import progress
from planner.errors import PlanError
from planner.output import check_output

from ..report import EXIT_FAILED, EXIT_OK
from . import archive, oci, oci_ref, sources
from .ops import Failed

TIMEOUT_S = 600.0


def add_commands(cmds) -> list:
    push = cmds.add_parser("push", help="push a bundle to an OCI registry as one artifact (by tag and digest)")
    push.add_argument("bundle", help="the bundle file")
    push.add_argument("reference", help="oci://HOST[:PORT]/REPOSITORY[:TAG] (no tag: pushed by digest only)")
    pull = cmds.add_parser("pull", help="pull a bundle from an OCI registry, checked against its digest")
    pull.add_argument("reference", help="oci://HOST[:PORT]/REPOSITORY[:TAG][@sha256:DIGEST]")
    pull.add_argument("-o", "--output", required=True, help="the bundle file (written atomically)")
    for p in (push, pull):
        add_registry_options(p)
    return [push, pull]


def add_registry_options(p, what: str = "") -> None:
    """--plain-http and --timeout: how the registry is spoken to (`what`: for which argument, where
    the command also takes a local bundle)."""
    p.add_argument("--plain-http", action="store_true",
                   help=f"speak HTTP, not HTTPS, to the registry{what} (loopback registries always are)")
    p.add_argument("--timeout", type=seconds, default=TIMEOUT_S, metavar="S",
                   help=f"give up on the registry{what} after S seconds (default {TIMEOUT_S:.0f})"
                   if what else f"give up after S seconds (default {TIMEOUT_S:.0f})")


@contextmanager
def opened(value: str, args):
    """The local file of the bundle argument `value` and its origin (sources.Local), through the table
    of sources (a file, a directory holding one, an oci:// reference pulled into a temporary directory
    for the command's length): a registry that cannot be used is ops.Failed (exit 1, one line), a bad
    name PlanError (exit 2, one line)."""
    try:
        with sources.local_file(value, timeout_s=args.timeout, plain_http=args.plain_http) as local:
            yield local
    except oci.RegistryError as e:
        raise Failed(str(e)) from None


def seconds(text: str) -> float:
    """--timeout: a positive number of seconds (argparse says the rest in one line, exit 2)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def annotations_of(manifest: archive.Manifest) -> dict:
    """What a registry shows of a bundle without pulling it."""
    return {oci.ANNOTATION_BUNDLE: manifest.digest(), oci.ANNOTATION_PLAN: manifest.plan_digest,
            oci.ANNOTATION_FINGERPRINT: json.dumps(manifest.fingerprint, sort_keys=True, separators=(",", ":"))}


def cmd_push(args) -> int:
    ref = oci_ref.parse(args.reference)
    manifest = archive.read_manifest(args.bundle)
    try:
        with progress.shown("warmup bundle push"):  # a line on a terminal: the bytes sent
            pushed = oci.push(args.bundle, ref, annotations_of(manifest), timeout_s=args.timeout,
                              plain_http=args.plain_http)
    except oci.RegistryError as e:
        return _failed(e)
    print(pushed.reference)
    print(f"pushed {args.bundle} ({pushed.size / 2**20:.1f} MiB, bundle {manifest.digest()[:12]}) as "
          f"{pushed.reference}", file=sys.stderr)
    return EXIT_OK


def cmd_pull(args) -> int:
    ref = oci_ref.parse(args.reference)
    if args.output == "-":
        raise PlanError("-o -: a bundle is a binary archive; name a file")
    check_output(args.output)  # a missing directory refused before the download, not after it
    try:
        with progress.shown("warmup bundle pull"):  # a line on a terminal: the bytes received
            pulled = oci.pull(ref, args.output, timeout_s=args.timeout, plain_http=args.plain_http)
    except oci.RegistryError as e:
        return _failed(e)
    print(pulled.reference)
    print(f"pulled {pulled.reference} into {args.output} ({pulled.size / 2**20:.1f} MiB, sha256 checked)",
          file=sys.stderr)
    return EXIT_OK


def _failed(e: Exception) -> int:
    print(f"warmup: error: {e}", file=sys.stderr)
    return EXIT_FAILED


ACTIONS = {"push": cmd_push, "pull": cmd_pull}
