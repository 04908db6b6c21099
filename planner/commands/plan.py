"""`warmup plan`: expand a plan for an engine; `warmup plans`: the built-in plans and engines."""

from __future__ import annotations

import re

from .. import api
from ..output import emit
from ..render import RENDERERS
from ..resources import builtin_engines, builtin_plans
from ..yamlio import check_plan_size


def add_command(sub, name: str, help: str) -> None:
    if name == "plans":
        p = sub.add_parser("plans", help=help, description=cmd_plans.__doc__)
        p.set_defaults(func=cmd_plans)
        return
    p = sub.add_parser("plan", help=help, description=cmd_plan.__doc__)
    p.add_argument("plan", help="built-in plan name (see `warmup plans`) or path to a plan YAML")
    p.add_argument("--engine", "-e", required=True, help="built-in engine name or path to an engine YAML")
    p.add_argument("--format", "-f", choices=("yaml", "json", "table"), default="yaml",
                   help="yaml or json: the expanded plan, which `warmup execute` runs; table: a summary per stage "
                        "(default: yaml)")
    p.add_argument("-o", "--output", help="write here (atomically) instead of stdout (`-` is stdout)")
    p.add_argument("--deep-gemm", metavar="VERSION@INCLUDE_DIR",
                   help="the DeepGEMM the plan's DeepGEMM steps are for, recorded in its digest (e.g. "
                        "2.8.1@/venv/lib/python3.12/site-packages/vllm/third_party/deep_gemm/include; "
                        "`warmup execute` passes the one it runs)")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args) -> int:
    """Expand PLAN for ENGINE into explicit steps and print them (nothing runs)."""
    deep_gemm = api.parse_deep_gemm(args.deep_gemm) if args.deep_gemm is not None else None
    plan, engine = api.load_plan(args.plan), api.load_engine(args.engine)
    expanded = api.expand(plan, engine, deep_gemm)
    text = RENDERERS[args.format](expanded)
    if args.format != "table":  # what the review commands and execute read back
        check_plan_size(text, plan.files[0])
    emit(text, args.output, inputs=api.input_files(plan, engine))
    return 0


WIDTH = 100  # `warmup plans` lines: deterministic, whatever the terminal
# The end of a sentence: . ! or ? before a space or the end, not the dot of "e.g." or "i.e."
SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)[.!?](?=\s|$)")


def cmd_plans(args) -> int:
    """List the built-in plans (with the first sentence of each description) and engine configs."""
    plans = builtin_plans()
    width = max(map(len, plans))
    print("Plans:")
    for name in plans:
        print(f"  {name:<{width}}  {summary(api.load_plan(name).description, WIDTH - width - 4)}")
    print("Engines:")
    for name in builtin_engines():
        print(f"  {name}")
    return 0


def summary(description: str, room: int) -> str:
    """The first sentence of a description on one line of `room` characters; a longer one ends at
    a word with "...", never mid-word."""
    text = " ".join(description.split())
    end = SENTENCE_END.search(text)
    sentence = text[:end.end()] if end else text
    if len(sentence) <= room:
        return sentence
    cut = sentence[:room - 3].rsplit(" ", 1)[0].rstrip(",;:(")
    return cut + "..."
