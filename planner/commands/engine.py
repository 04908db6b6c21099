"""`warmup engine --from-hf` / `--from-vllm`: an engine config (schemas/engine.schema.json) from a
config.json, or from the VllmConfig an installed vLLM resolves (vllm_bridge/cli.py, imported only then)."""

from __future__ import annotations

import json
import os
import sys

from ..engine import hf
from ..engine.config import engine_from_document
from ..engine.hf import flags as hf_flags
from ..errors import PlanError
from ..output import emit
from ..plugins import load_plugins_by_group
from ..yamlio import load_json, load_text, read_text


def add_command(sub, name: str, help: str) -> None:
    p = sub.add_parser("engine", help=help, description=cmd_engine.__doc__)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-hf", metavar="CONFIG_JSON", help="path to a Hugging Face config.json")
    source.add_argument("--from-vllm", action="store_true",
                        help="build vLLM's own VllmConfig from the `vllm serve` arguments after `--` (the model: "
                             "a local directory with config.json) and write what vLLM resolved; needs vLLM installed")
    p.add_argument("vllm_args", nargs="*", metavar="-- VLLM_SERVE_ARGS",
                   help="with --from-vllm: the arguments of `vllm serve`, after `--`")
    for spec in hf_flags.FROM_HF_FLAGS:  # the rows, read at each build (a row added is an argument)
        p.add_argument(spec.flag, **spec.argparse_options())
    p.add_argument("--gpu", help="GPU model: sets SM count and capability (default H100; with --from-vllm, the "
                                 "machine's GPU where there is one)")
    p.add_argument("--name", help="engine name")
    p.add_argument("-o", "--output", help="write here (atomically) instead of stdout (`-` is stdout)")
    p.set_defaults(func=cmd_engine)


def _warn(message: str) -> None:
    print(f"warmup: warning: {message}", file=sys.stderr)


ENGINE_SOURCES = "warmup.engine_sources"  # entry points: name -> the command that writes the engine


def hf_only_flags() -> tuple[str, ...]:
    """--from-hf's own flags, by argparse name (with --from-vllm, vLLM's arguments after `--` say these
    things): read off the rows (planner/engine/hf/flags.py) at each call."""
    return tuple(spec.dest for spec in hf_flags.FROM_HF_FLAGS)


def cmd_engine(args) -> int:
    """Write an engine config (schemas/engine.schema.json) from a Hugging Face config.json, or
    (--from-vllm) from what an installed vLLM resolves for `vllm serve` arguments."""
    if not args.from_vllm:
        if args.vllm_args:
            raise PlanError(f"unexpected arguments {' '.join(args.vllm_args)!r}: only --from-vllm takes "
                            "`-- <vllm serve arguments>`", file="--from-hf")
        return _from_hf(args)
    given = [f"--{flag.replace('_', '-')}" for flag in hf_only_flags()
             if getattr(args, flag) is not None and getattr(args, flag) is not False]
    if given:
        installed = " (--from-vllm follows the installed vLLM's release)" if "--vllm-release" in given else ""
        raise PlanError(f"{', '.join(given)} belong to --from-hf; with --from-vllm give vLLM's own flags "
                        f"after `--` (e.g. --tensor-parallel-size){installed}", file="--from-vllm")
    return engine_source("vllm")(args)


def engine_source(name: str):
    """The command of an engine source another package provides (entry points `warmup.engine_sources`:
    vllm_bridge's `vllm`), loaded only when asked for: the planner imports nothing above it."""
    source = load_plugins_by_group(ENGINE_SOURCES, names=(name,)).get(name)
    if source is not None:
        return source
    raise PlanError(f"--from-{name} needs the vLLM bridge of warmup-planner installed (no `{name}` entry point "
                    f"in {ENGINE_SOURCES}: reinstall warmup-planner)", file=f"--from-{name}")


def _refuse_unplanned(text: str, file: str) -> None:
    """A config.json of an architecture --from-hf does not plan is refused for that, before the
    strict reading below refuses something else of it and hides the one thing to say (a Mamba2
    config's time_step_limit [0.0, Infinity]: not a finite number)."""
    try:
        loose = json.loads(text)  # Python's own reading, where NaN and Infinity are numbers
    except (ValueError, RecursionError):
        return  # load_json says what is wrong, at its line
    refusal = hf.unplanned(loose, os.path.basename(file)) if isinstance(loose, dict) else None
    if refusal is not None:
        raise refusal.as_plan_error(file, text)


def _from_hf(args) -> int:
    """--from-hf: the engine config planner/engine/hf/ derives from a config.json and the flags."""
    text = read_text(args.from_hf)
    _refuse_unplanned(text, args.from_hf)
    config = load_json(text, args.from_hf)  # no NaN or infinity either
    if not isinstance(config, dict):
        raise PlanError("expected a JSON object (a Hugging Face config.json)", file=args.from_hf)
    try:
        request = hf.EngineRequest.from_args(args, gpu=args.gpu, name=args.name,
                                             source=os.path.basename(args.from_hf))
        engine = hf.engine_from_hf(config, request, warn=_warn)
    except hf.HFConfigError as e:  # at the key's line, as every other bad input
        raise e.as_plan_error(args.from_hf, text) from None
    text = hf.engine_to_yaml(engine)
    engine_from_document(load_text(text, "<generated engine>"))  # what we write must validate
    emit(text, args.output, inputs=[args.from_hf])
    return 0
