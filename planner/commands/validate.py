"""`warmup validate`: plan, engine and expanded-plan files, each against its schema."""

from __future__ import annotations

import sys

from .. import progress
from ..errors import PlanError
from ..plan.loading import load_any

EXIT_OK, EXIT_INVALID = 0, 2


def add_command(sub, name: str, help: str) -> None:
    p = sub.add_parser("validate", help=help, description=cmd_validate.__doc__,
                       epilog="exit codes: 0 every file is valid, 2 one or more is not")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="a plan, engine or expanded-plan YAML or JSON file; each is checked and reported")
    p.set_defaults(func=cmd_validate)


def cmd_validate(args) -> int:
    """Validate each FILE (a plan, an engine config or an expanded plan) against its schema
    with the full JSON-Schema validator, plus every check `plan` makes; one line per file
    (`FILE: ok (KIND)` on stdout, or its error on stderr), every file checked."""
    bad = 0
    for path in args.files:
        try:
            with progress.shown("warmup validate"):  # a line on a terminal, for a long file
                kind, _ = load_any(path, strict=True)
        except PlanError as e:
            sys.stdout.flush()  # the lines in the order of the files, where both streams are one
            print(f"warmup: error: {e}", file=sys.stderr)
            bad += 1
            continue
        print(f"{path}: ok ({kind})")
    return EXIT_INVALID if bad else EXIT_OK
