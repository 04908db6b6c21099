"""The plan machinery: from a plan and an engine to the expanded plan, and back from its file.

    authored.py  a plan as written: load, resolve `extends`, merge overrides, apply defaults
    expr.py      the small expression language of `when` and computed values (no eval)
    stages/      one module per stage kind: a stage plus the engine -> typed steps
    records.py   the hand-made Record every step kind is
    steps.py     the step kinds, shared by the planner and the executor
    expand.py    a plan against an engine -> the canonical step list (ExpandedPlan)
    expanded.py  the expanded plan as a record, its summary, its plain forms
    digest.py    the digests of the inputs that shaped a plan (stale-plan checks)
    loading.py   any of the three input kinds, told apart by looking at it
    streaming.py a large expanded plan read a piece at a time (`warmup check`, `validate`, `diff`)

It stands on the engine model (planner.engine) and the tables (planner.tables); the review
and the API stand on it (tests/test_layers.py holds the planner's floors).
"""
