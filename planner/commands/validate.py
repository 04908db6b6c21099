"""`warmup validate`: plan, engine and expanded-plan files, each against its schema."""

from __future__ import annotations

from ..loading import load_any


def add_command(sub, name: str, help: str) -> None:
    p = sub.add_parser("validate", help=help, description=cmd_validate.__doc__)
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=cmd_validate)


def cmd_validate(args) -> int:
    """Validate each FILE (a plan, an engine config or an expanded plan) against its schema
    with the full JSON-Schema validator, plus every check `plan` makes; one line per file."""
    for path in args.files:
        kind, _ = load_any(path, strict=True)
        print(f"{path}: ok ({kind})")
    return 0
