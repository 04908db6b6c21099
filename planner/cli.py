"""The `warmup` command line: a few verbs, each a function returning an exit code.

Exit codes: 0 ok, 1 a difference or lint error (diff, check), 2 invalid input,
3 internal error, 130 interrupted. Bad input is one line on stderr, never a
traceback (set WARMUP_DEBUG=1 to see one for internal errors).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import sys

from .errors import PlanError

EXIT_OK, EXIT_INVALID, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 2, 3, 130


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit 2 with one line, like every other bad input."""

    def error(self, message):
        self.exit(EXIT_INVALID, f"{self.prog}: error: {message}\n")


BUILTIN_COMMANDS = ("plan", "validate", "plans", "engine", "diff", "check")
REVIEW_COMMANDS = ("diff", "check")


def build_parser(with_plugins: bool = True, with_review: bool = True) -> argparse.ArgumentParser:
    parser = _Parser(prog="warmup", description="Plan, review and execute GPU kernel warmup for LLM serving.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("plan", help="expand a plan for an engine (dry run)", description=cmd_plan.__doc__)
    p.add_argument("plan", help="built-in plan name (see `warmup plans`) or path to a plan YAML")
    p.add_argument("--engine", "-e", required=True, help="built-in engine name or path to an engine YAML")
    p.add_argument("--format", "-f", choices=("yaml", "json", "table"), default="yaml")
    p.add_argument("-o", "--output", help="write here (atomically) instead of stdout")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("validate", help="check plan, engine or expanded-plan files", description=cmd_validate.__doc__)
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("plans", help="list the built-in plans and engines", description=cmd_plans.__doc__)
    p.set_defaults(func=cmd_plans)

    p = sub.add_parser("engine", help="write an engine config from a Hugging Face config.json",
                       description=cmd_engine.__doc__)
    p.add_argument("--from-hf", required=True, metavar="CONFIG_JSON", help="path to a Hugging Face config.json")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--dp", type=int, default=1, help="data-parallel size")
    p.add_argument("--enable-expert-parallel", action="store_true", help="shard experts over tp*dp ranks")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--num-blocks", type=int, help="KV blocks (default: estimated from GPU memory)")
    p.add_argument("--block-size", type=int)
    p.add_argument("--gpu", default="H100", help="GPU model: sets SM count and capability (default H100)")
    p.add_argument("--name", help="engine name")
    p.add_argument("-o", "--output", help="write here (atomically) instead of stdout")
    p.set_defaults(func=cmd_engine)

    if with_review:
        from . import review  # diff and check: the review workflow

        review.add_commands(sub)
    if with_plugins:
        add_plugin_commands(sub)
    return parser


def cmd_plan(args) -> int:
    """Expand PLAN for ENGINE into explicit steps and print them (nothing runs)."""
    from .engine import load_engine
    from .expand import expand
    from .output import RENDERERS
    from .plan import load_plan

    plan = load_plan(args.plan)
    engine = load_engine(args.engine)
    emit(RENDERERS[args.format](expand(plan, engine)), args.output)
    return EXIT_OK


def cmd_validate(args) -> int:
    """Validate each FILE (a plan, an engine config or an expanded plan) against its schema
    with the full JSON-Schema validator, plus every check `plan` makes; one line per file."""
    from .loading import load_any

    for path in args.files:
        kind, _ = load_any(path, strict=True)
        print(f"{path}: ok ({kind})")
    return EXIT_OK


def cmd_plans(args) -> int:
    """List the built-in plans (with their descriptions) and engine configs."""
    from .plan import load_plan
    from .resources import builtin_engines, builtin_plans

    print("Plans:")
    for name in builtin_plans():
        first = load_plan(name).description.strip().split("\n")[0]
        print(f"  {name:<12} {first}")
    print("Engines:")
    for name in builtin_engines():
        print(f"  {name}")
    return EXIT_OK


def cmd_engine(args) -> int:
    """Write an engine config (schemas/engine.schema.json) from a Hugging Face config.json."""
    import json

    from . import hf
    from .engine import engine_from_document
    from .yamlio import load_text, read_text

    text = read_text(args.from_hf)
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"invalid JSON: {e.msg}", file=args.from_hf, line=e.lineno) from None
    if not isinstance(config, dict):
        raise PlanError("expected a JSON object (a Hugging Face config.json)", file=args.from_hf)
    try:
        engine = hf.engine_from_hf(
            config, tp=args.tp, dp=args.dp, enable_expert_parallel=args.enable_expert_parallel,
            max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
            num_blocks=args.num_blocks, block_size=args.block_size, gpu=args.gpu,
            max_model_len=args.max_model_len, name=args.name, source=os.path.basename(args.from_hf))
    except hf.HFConfigError as e:
        raise PlanError(str(e), file=args.from_hf) from None
    text = hf.engine_to_yaml(engine)
    engine_from_document(load_text(text, "<generated engine>"))  # what we write must validate
    emit(text, args.output)
    return EXIT_OK


PLUGIN_GROUP = "warmup.commands"


def add_plugin_commands(sub) -> None:
    """Commands other packages register (entry points `warmup.commands`), e.g. `execute`.

    The planner never imports the executor: the executor registers itself here, so
    a planner-only install simply has no `execute` command.
    """
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break `warmup plan`
            print(f"warmup: warning: command plugin {ep.name!r} failed to load: {e}", file=sys.stderr)


def emit(text: str, output: str | None) -> None:
    if output:
        from .output import write_atomic

        write_atomic(output, text)
    else:
        sys.stdout.write(text)


def main(argv: list[str] | None = None) -> int:
    program = argv is None  # run as `warmup`, not called inside a longer-lived process (the tests)
    argv = sys.argv[1:] if program else argv
    # Plugin commands cost an entry-point scan, and the review commands an import (2 ms without
    # bytecode): only pay for them when one may be asked for.
    builtin = bool(argv) and argv[0] in BUILTIN_COMMANDS
    if program and builtin:
        _without_cyclic_gc()
    parser = build_parser(with_plugins=not builtin, with_review=not builtin or argv[0] in REVIEW_COMMANDS)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except PlanError as e:
        print(f"warmup: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("warmup: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK  # `warmup plan ... | head` is fine
    except Exception as e:  # noqa: BLE001 - the last line of defence: report, exit 3
        if os.environ.get("WARMUP_DEBUG"):
            raise
        print(f"warmup: internal error: {type(e).__name__}: {e} (set WARMUP_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL


def _without_cyclic_gc() -> None:
    """A planner command is one short pass over data without reference cycles, where the cyclic
    garbage collector only costs time: about 10 ms of `warmup plan vllm`, most of it in the
    collections at interpreter exit. Off for the run, and everything frozen at exit so that
    those collections skip it (objects are still freed, output flushed, atexit handlers run).
    Plugin commands (`warmup execute`) run long and keep the collector."""
    gc.disable()
    atexit.register(gc.freeze)


if __name__ == "__main__":
    sys.exit(main())
