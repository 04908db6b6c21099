"""The review workflow: `warmup diff` and `warmup check` (being built)."""


def add_commands(sub) -> None:
    """Register the review subcommands on the `warmup` parser."""
