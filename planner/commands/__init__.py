"""The planner's own commands; planner.cli imports the module of the command being run only.

    plan.py      `warmup plan` (expand a plan for an engine) and `warmup plans` (the built-ins)
    validate.py  `warmup validate`: any input file against its schema, with jsonschema itself
    engine.py    `warmup engine --from-hf`: an engine config from a Hugging Face config.json
    absorb.py    `warmup absorb`: what compiled after ready, and the plan that covers it

The review commands (`warmup diff`, `warmup check`) live in planner/review/commands.py.
"""
