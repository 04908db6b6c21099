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
with kernel steps pay for. tests/test_plan_speed_paths.py fails when `warmup plan` imports
more.
"""

__version__ = "0.1.0"
