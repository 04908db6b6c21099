"""The review job: what a change does to the warmup, and what a plan gets wrong.

    commands.py  `warmup diff` and `warmup check`: argument parsing, inputs, output
    diff.py      semantic diff of two expanded plans (text, markdown, json)
    lints.py     lints over an expanded plan, with their codes and fixes
    phrasing.py  the English of each step kind: its facts, its lines, its table detail

planner.cli imports `commands` only when `warmup diff` or `warmup check` runs; `warmup plan
-f table` imports `phrasing` and nothing else of this package.
"""
