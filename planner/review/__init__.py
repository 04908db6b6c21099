"""The review job: what a change does to the warmup, and what a plan gets wrong.

    commands.py  `warmup diff` and `warmup check`: argument parsing, inputs, output
    diff.py      semantic diff of two expanded plans (text, markdown, json)
    lints.py     lints over an expanded plan, with their codes and fixes
    phrasing.py  the English of each step kind: its facts, its lines, its table detail
    server_logs.py  a vLLM server's log: the compiles it reports after ready, and where
    absorb.py    `warmup absorb`: the plan change that covers the compiles a log reports
    log_lints.py the lints of a plan against a server's log (E112, W205)

planner.cli imports `commands` only when `warmup diff` or `warmup check` runs; `warmup plan
-f table` imports `phrasing` and nothing else of this package.
"""
