"""Issue 37 item 4: every `--help` line of every command reads as a sentence (capitalised, ended
with a full stop), the commands other packages register (`execute`, `bundle`) included, and every
argument says what it is. planner/cli.py's Parser renders each help text as a sentence."""

from __future__ import annotations

import argparse

import pytest

from planner.cli import COMMANDS, build_parser, sentence

# Arguments with no help text: none now. A new one fails the test below unless it is listed here
# with the reason it has none.
NO_HELP_YET: set = set()


def parsers() -> dict:
    """{"warmup COMMAND [ACTION]": its parser}: every built-in command built for real, then the
    commands other packages register (entry points), then the top level."""
    found: dict = {}

    def walk(parser, name):
        found.setdefault(name, parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    if sub_name not in COMMANDS or name != "warmup":
                        walk(sub, f"{name} {sub_name}")

    for command in COMMANDS:
        root = build_parser(command, with_plugins=False)
        walk(root._subparsers._group_actions[0].choices[command], f"warmup {command}")
    walk(build_parser(None, with_plugins=True), "warmup")
    return found


def name_of(action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def test_every_help_line_of_every_command_is_a_sentence():
    found = parsers()
    assert {"warmup plan", "warmup execute", "warmup check", "warmup bundle install"} <= set(found)
    bad, missing = [], set()
    for name, parser in found.items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if action.help is argparse.SUPPRESS:
                continue
            if not action.help:
                missing.add((name, name_of(action)))
                continue
            text = formatter._expand_help(action)
            if text[0].islower() or not text.endswith((".", "!", "?")):
                bad.append(f"{name} {name_of(action)}: {text!r}")
        choices = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for action in (c for sub in choices for c in sub._choices_actions):   # the command lists
            text = formatter._expand_help(action)
            if text[0].islower() or not text.endswith("."):
                bad.append(f"{name} {action.dest}: {text!r}")
    assert bad == []
    assert missing - NO_HELP_YET == set(), "an argument without help"
    assert NO_HELP_YET - missing == set(), "written at last: take it off NO_HELP_YET"


def test_the_help_output_itself_has_sentences(capsys):
    with pytest.raises(SystemExit):
        build_parser("plan", with_plugins=False).parse_args(["plan", "--help"])
    out = capsys.readouterr().out
    assert "-h, --help            Show this help message and exit." in out
    assert "Write here (atomically) instead of stdout (`-` is stdout)." in " ".join(out.split())


@pytest.mark.parametrize("text, expected", [
    ("expand a plan", "Expand a plan."), ("Ends already.", "Ends already."), ("(default: 3)", "(default: 3)."),
    ("`warmup plans` lists them", "`warmup plans` lists them."), ("", "")])
def test_sentence(text, expected):
    assert sentence(text) == expected
