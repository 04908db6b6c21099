"""The `warmup` command line: a few verbs, each a function returning an exit code.

Exit codes: 0 ok, 1 a difference or lint error (diff, check), 2 invalid input (an
output that cannot be written, stdout included), 3 internal error, 130 interrupted,
141 stdout's reader went away (`| head`: quiet, the status of a Unix tool killed by
SIGPIPE). Bad input is one line on stderr, never a traceback (set WARMUP_DEBUG=1 to
see one for internal errors).

Start-up is where `warmup plan` spends most of its time (bench/RESULTS.md, part A; what it
may import: planner/__init__.py), so this module keeps the commands' share of it: the
command table below names the module of each command, and only the module of the command
being run is imported (every module imports at its top); commands other packages register
(`warmup execute`) cost an entry-point scan, paid only when no built-in command is named;
and a planner command runs without the cyclic garbage collector.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import sys
from importlib import import_module

from .errors import PlanError
from .output import named_stdout_errors
from .plugins import load_plugins_by_group

EXIT_OK, EXIT_INVALID, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 2, 3, 130
# 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away, so that
# `set -o pipefail` does not take `warmup check ... | head -1` for a clean check.
EXIT_BROKEN_PIPE = 141

# The lazy-import table: command -> (the module that adds its arguments and runs it, its help).
COMMANDS = {
    "plan": ("planner.commands.plan", "expand a plan for an engine (dry run)"),
    "validate": ("planner.commands.validate", "check plan, engine or expanded-plan files"),
    "plans": ("planner.commands.plan", "list the built-in plans and engines"),
    "engine": ("planner.commands.engine", "write an engine config from a Hugging Face config.json"),
    "diff": ("planner.review.commands",
             "compare two expanded plans, or a plan for two engines (exit 1 if they differ)"),
    "check": ("planner.review.commands",
              "lint a plan for an engine, or an expanded plan file (exit 1 on lint errors)"),
    "absorb": ("planner.commands.absorb",
               "what a server compiled after ready (its logs), the plan stage that covers each, and an overlay"),
}
PLUGIN_GROUP = "warmup.commands"


def sentence(text: str) -> str:
    """A help text as the help shows it: one sentence or more, capitalised and ended with a full stop."""
    text = text.strip()
    if not text:
        return text
    if text[0].islower():
        text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


class _Sentences:
    """A help formatter's mixin: every argument's and command's help reads as a sentence, whoever
    wrote it (the commands other packages register included), argparse's own -h too."""

    def _expand_help(self, action):
        return sentence(super()._expand_help(action))


_FORMATTERS: dict = {}


def _sentence_formatter(base):
    if not issubclass(base, _Sentences):
        base = _FORMATTERS.setdefault(base, type(f"Sentence{base.__name__}", (_Sentences, base), {}))
    return base


class Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit 2 with one line, like every other bad input, and every help
    line is a sentence (_Sentences)."""

    def __init__(self, *args, formatter_class=argparse.HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=_sentence_formatter(formatter_class), **kwargs)

    def error(self, message):
        self.exit(EXIT_INVALID, f"{self.prog}: error: {message}\n")


def version_text() -> str:
    """What `warmup --version` prints: the package, the plan format it writes, the vLLM releases."""
    from . import __version__
    from .engine.releases import VLLM_RELEASES, supported
    from .plan.expanded import FORMAT

    lines = [f"warmup-planner {__version__}",
             f"expanded plan format: {FORMAT} (schemas/expanded-plan.schema.json)",
             "supported vLLM releases (the plugin accepts exactly these versions):"]
    lines += [f"  vllm {version}  plan {VLLM_RELEASES[version].plan}" for version in supported()]
    return "\n".join(lines) + "\n"


class _Version(argparse.Action):
    """`warmup --version`: version_text, whose imports are paid only when asked."""

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(version_text())
        parser.exit(EXIT_OK)


def build_parser(command: str | None = None, with_plugins: bool = True) -> argparse.ArgumentParser:
    """The parser, with the full arguments of `command` (a built-in command's name) only: the
    other built-in commands are listed with their help, and their modules are not imported."""
    parser = Parser(prog="warmup", description="Plan, review and execute GPU kernel warmup for LLM serving.")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print the version, the expanded-plan format and the supported vLLM releases, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser,
                                help="the command to run; `warmup COMMAND --help` says more")
    sub.required = True
    for name, (module, help) in COMMANDS.items():
        if name == command:
            import_module(module).add_command(sub, name, help)
        else:
            sub.add_parser(name, help=help, add_help=False)  # `warmup NAME ...` builds it for real
    if with_plugins:
        add_plugin_commands(sub)
    return parser


def add_plugin_commands(sub) -> None:
    """Commands other packages register (entry points `warmup.commands`), e.g. `execute`.

    The planner never imports the executor: the executor registers itself here, so
    a planner-only install simply has no `execute` command.
    """
    for name, add_commands in load_plugins_by_group(PLUGIN_GROUP).items():
        try:
            add_commands(sub)
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break `warmup plan`
            print(f"warmup: warning: {PLUGIN_GROUP} plugin {name!r} failed to add its commands: {e}",
                  file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    program = argv is None  # run as `warmup`, not called inside a longer-lived process (the tests)
    argv = sys.argv[1:] if program else argv
    builtin = argv[0] if argv and argv[0] in COMMANDS else None
    if program and builtin:
        _without_cyclic_gc()

    def parse_and_run() -> int:  # parsing too: --help and --version write to stdout
        args = build_parser(builtin, with_plugins=builtin is None).parse_args(argv)
        return args.func(args)

    return _guarded(parse_and_run)


def run_guarded(func, args) -> int:
    """Run one command: bad input is one line and exit 2, never a traceback; a command another
    package registers (`warmup bundle`) goes through the same guard when run on its own."""
    return _guarded(lambda: func(args))


def _guarded(call) -> int:
    try:
        with named_stdout_errors():  # a failed write to stdout is a WriteError: one line, exit 2
            return call()
    except PlanError as e:
        print(f"warmup: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("warmup: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_BROKEN_PIPE  # quiet, as `cat big | head -1` is
    except Exception as e:  # noqa: BLE001 - the last line of defence: report, exit 3
        if os.environ.get("WARMUP_DEBUG"):
            raise
        print(f"warmup: internal error: {type(e).__name__}: {e} (set WARMUP_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL


def _without_cyclic_gc() -> None:
    """A planner command is one short pass over data without reference cycles, where the cyclic
    garbage collector only costs time, in the run and in the collections at interpreter exit
    (bench/RESULTS.md, part A3). Off for the run, and everything frozen at exit so that
    those collections skip it (objects are still freed, output flushed, atexit handlers run).
    Plugin commands (`warmup execute`) run long and keep the collector."""
    gc.disable()
    atexit.register(gc.freeze)


if __name__ == "__main__":
    sys.exit(main())
