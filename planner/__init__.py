"""warmup-planner: expand a YAML warmup plan plus an engine config into explicit steps.

The planner is pure Python: it never imports torch, triton or the executor, so a
plan can be made, diffed and reviewed on any laptop.

The start-up rule. `warmup plan` spends most of its time starting (bench/RESULTS.md, part
A: its budget is 3x a bare interpreter), so what it imports is fixed: the standard library
but `dataclasses` (with `inspect`: about 7 ms, part A4) and `hashlib` (OpenSSL: 2.5 ms; the
digests use the interpreter's own SHA-256, A4); PyYAML; the planner's plan path, with
planner.review.phrasing for `-f table` only; the kernel models of the stages the plan uses
(planner.plan.stages imports a stage when a plan first uses it), and the models of kernel
launches (kernel_model.runner_kernels: 4.3 ms byte-compiled, A3; kernel_model.vllm_sampler)
only for plans with kernel steps. Never jsonschema (planner/schema.py's subset validator
instead: parts A, A2), the executor, vllm_bridge, planner.engine.hf, or planner.review's diff, lints
and commands. This decides the record idiom of a module: on the plan path a step kind is a
hand-made planner.plan.records.Record (as frozen dataclasses the kinds took 8.7 ms against 1.1
ms, A3), the records inside steps and the plan's own (Document, Engine and its EngineFacts, Plan,
Stage, ExpandedPlan) are named tuples, a record that changes is a class with __slots__
(stages.scope.Scope); dataclasses only where the plan path never goes (planner.engine.hf,
planner.review's diff and lints, the executor) and in the launch models, which only plans
with kernel steps pay for. tests/planner/test_plan_speed_paths.py fails when `warmup plan` imports
more.

    cli.py            the `warmup` command line: a few verbs, each a function returning an exit code
    __main__.py       `python -m planner`: the `warmup` command, for an environment whose bin/ is not on PATH
    commands/         the planner's own commands, each imported only when it runs
    api.py            the planner's API: what `warmup plan`, `check`, `diff` and `execute` do with their inputs
    plan/             the plan machinery: from a plan and an engine to the expanded plan, and back from its file
    engine/           the engine model: what the serving engine is, as one rank of it sees the warmup
    tables/           the tuned tables a plan's dispatch reads: inputs of planning, digested with the plan
    review/           the review job: what a change does to the warmup, and what a plan gets wrong
    render.py         an expanded plan as YAML (people, golden files), JSON (tools) or a table (a summary)
    yamlio.py         the one YAML codec: strict loading that remembers where every value came from, one writer
    schema.py         schema validation of loaded YAML, with errors mapped back to file and line
    errors.py         the one exception users see: bad input, located in a file, a line and a YAML path
    limits.py         sane bounds: a plan that would exceed them is refused before anything is built
    hashing.py        the one digest of a JSON-like value: sha256 of its canonical JSON
    output.py         what a command made, written where `-o` says, as shell redirection would: all or nothing
    words.py          words for reviewers: how `warmup diff` and the step kinds put values and their changes
    progress.py       progress on a terminal: one line on stderr, rewritten in place
    resources.py      where the built-in plans, engine configs and schemas live
    plugins.py        the one entry-point loader: what other packages register for the planner and the executor
    pytest_plugin.py  pytest plugin: pin expanded warmup plans as golden files
"""

__version__ = "0.1.0"
