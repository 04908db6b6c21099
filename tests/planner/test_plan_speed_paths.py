"""The fast paths of `warmup plan` give what the plain code gives (bench/plan_bench.py times them).

- the DeepGEMM model computes its winners in bulk, each seeded with the previous one: the
  result must not depend on the order, the gaps or the seeds;
- the YAML writer inlines integers and short lists: same bytes as the generic writer;
- the `warmup` process runs planner commands without the cyclic GC and without importing
  the review commands; a caller of main() (the tests) keeps its collector;
- `warmup plan` imports only what the start-up rule allows (planner/__init__.py).
"""

import gc
import json
import random
import subprocess
import sys

import pytest

from deep_gemm_oracle import select_all
from kernel_model import deep_gemm as dg
from planner.cli import main
from planner.render import to_json
from planner.yamlio import MIN_RUN, WRAP, _string, compress_runs, yaml_scalar
from planner.yamlio import _flow_compressed as _flow  # the expanded-plan writer

# --- DeepGEMM winners in bulk -------------------------------------------------------


@pytest.mark.parametrize("grouped,n,k,sms", [(False, 7168, 2048, 132), (False, 3072, 1536, 78),
                                             (False, 4096, 512, 16), (True, 512, 7168, 132),
                                             (True, 7168, 256, 114)])
def test_bulk_winners_do_not_depend_on_order_gaps_or_seeds(grouped, n, k, sms):
    def fresh():  # a model without memoized winners (dg._model is cached)
        return dg._Model(grouped, n, k, sms, 128)

    rng = random.Random(n * k + sms)
    classes = list(range(1, 200 if grouped else 131))
    shuffled = rng.sample(classes, len(classes))
    gappy = sorted(rng.sample(classes, 40)) + [3, 3, 1]  # gaps, repeats, going back
    in_order = fresh().winners(classes)
    expected = {c: w for c, w in zip(classes, in_order)}
    assert fresh().winners(shuffled) == [expected[c] for c in shuffled]
    assert fresh().winners(gappy) == [expected[c] for c in gappy]
    one_by_one = fresh()
    assert [one_by_one.winner(c) for c in reversed(classes)] == in_order[::-1]
    space = fresh().space
    for c in classes[::7]:
        assert expected[c] == select_all(space, fresh().largest_m(c)), c


# --- YAML writer ----------------------------------------------------------------------

def reference_flow(value, indent: int) -> str:
    """The generic writer the fast paths replace (planner/output.py before them; now planner/yamlio.py)."""
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is dict:
        return "{" + ", ".join(f"{_string(k)}: {reference_flow(v, indent)}" for k, v in value.items()) + "}"
    if kind is list:
        if len(value) >= MIN_RUN and all(type(v) is int for v in value):
            value = compress_runs(value)
        items = [reference_flow(v, indent) for v in value]
        text = "[" + ", ".join(items) + "]"
        if len(text) + indent <= WRAP:
            return text
        lines, current = [], "["
        for item in items:
            if len(current) + len(item) + indent > WRAP and current != "[":
                lines.append(current.rstrip())
                current = ""
            current += item + ", "
        lines.append(current[:-2] + "]")
        return ("\n" + " " * indent).join(lines)
    if kind is str:
        return _string(value)
    return yaml_scalar(value)


def random_value(rng: random.Random, depth: int = 0):
    scalars = [lambda: rng.randint(-3, 10_000), lambda: rng.choice([True, False, None]),
               lambda: rng.choice([0.5, 1e-05, float("inf")]),
               lambda: rng.choice(["plain", "yes", "a: b", "", "8..16", "_warmup_3_", "x" * 90])]
    roll = rng.random()
    if depth < 3 and roll < 0.25:  # integer lists: runs, steps, long ones that wrap, bools among them
        start, step = rng.randint(0, 500), rng.choice([1, 2, 64])
        values = [start + i * step for i in range(rng.randint(0, 60))]
        values += [rng.randint(0, 9_999) for _ in range(rng.randint(0, 30))]
        if values and rng.random() < 0.2:
            values[rng.randrange(len(values))] = True
        return values
    if depth < 3 and roll < 0.45:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    if depth < 3 and roll < 0.65:
        return {rng.choice(["req_id", "block_ids", "n", "null", "a b"]) + str(i): random_value(rng, depth + 1)
                for i in range(rng.randint(0, 6))}
    return rng.choice(scalars)()


def test_flow_fast_paths_write_the_same_bytes():
    rng = random.Random(7)
    for _ in range(3000):
        value, indent = random_value(rng), rng.choice([2, 4, 12, 40])
        assert _flow(value, indent) == reference_flow(value, indent), value


def test_json_without_the_cycle_check_is_the_same():
    rng = random.Random(8)
    for _ in range(200):
        plan = {"steps": [random_value(rng) for _ in range(5)]}
        assert to_json(plan) == json.dumps(plan, separators=(",", ":")) + "\n"


# --- the warmup process ---------------------------------------------------------------

def run_program(argv: list[str], after: str) -> str:
    """Run main() as the `warmup` program does (argv from sys.argv), then print `after`."""
    code = ("import sys, gc, contextlib, io\nfrom planner.cli import main\n"
            f"sys.argv = ['warmup'] + {argv!r}\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main()\n"
            "    except SystemExit: pass\n"
            f"print({after})")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_planner_commands_run_without_the_cyclic_gc():
    assert run_program(["plan", "vllm-head", "-e", "qwen3-30b-a3b-fp8-h100"], "gc.isenabled()") == "False"
    assert run_program(["execute", "--help"], "gc.isenabled()") == "True"  # plugin commands keep it


def test_plan_does_not_import_the_review_commands():
    after = "'planner.review' in sys.modules"
    assert run_program(["plan", "vllm-head", "-e", "qwen3-30b-a3b-fp8-h100"], after) == "False"
    assert run_program(["diff", "--help"], after) == "True"


# The start-up rule (planner/__init__.py): what `warmup plan` never imports, whatever the plan,
NEVER = ("dataclasses", "inspect", "hashlib", "jsonschema", "executor", "vllm_bridge", "vllm", "torch", "triton",
         "numpy", "planner.engine.hf", "planner.review.commands", "planner.review.diff", "planner.review.lints")
# but a plan with kernel steps imports the model of their launches, which declares dataclasses.
LAUNCH_MODELS = ("kernel_model.runner_kernels", "kernel_model.vllm_sampler", "kernel_model.vllm_fused_moe",
                 "dataclasses", "inspect")
PACKAGES = ("planner", "kernel_model", "yaml")  # besides the standard library (PyYAML's C loader: Cython's)


def imported_by_plan(argv: list[str]) -> set[str]:
    """The modules a `warmup plan` process imports beyond the interpreter's own start."""
    code = ("import sys\nbefore = set(sys.modules)\nfrom planner.cli import main\n"
            f"sys.argv = ['warmup', 'plan', *{argv!r}, '-o', '/dev/null']\nmain()\n"
            "print(*sorted(set(sys.modules) - before))")
    return set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())


def named(modules: set[str], names) -> set[str]:
    return {m for m in modules if any(m == n or m.startswith(n + ".") for n in names)}


@pytest.mark.parametrize("plan,engine,fmt,kernel_steps", [
    ("vllm-0.33", "llama-3.1-8b-fp8-h100", "table", False), ("vllm", "deepseek-v3-fp8-tp8-h200", "yaml", False),
    ("vllm-head", "qwen3-30b-a3b-fp8-h100", "json", False), ("triton", "mixtral-8x7b-tp2-h100", "yaml", False),
    ("reference", "llama-3.1-8b-fp8-h100", "yaml", True), ("vllm-0.25-plugin", "qwen3-30b-a3b-fp8-h100", "json", True)])
def test_plan_imports_only_what_the_start_up_rule_allows(plan, engine, fmt, kernel_steps):
    imported = imported_by_plan([plan, "--engine", engine, "-f", fmt])
    top = {m.split(".")[0] for m in imported}
    assert top - set(sys.stdlib_module_names) - set(PACKAGES) - {"cython_runtime"} <= {
        m for m in top if m.startswith("_cython_")}
    allowed = set(LAUNCH_MODELS) if kernel_steps else set()
    assert named(imported, NEVER) - allowed == set()
    assert bool(named(imported, LAUNCH_MODELS[:3])) == kernel_steps  # their cost, only where their steps are
    assert named(imported, ["planner.review"]) == ({"planner.review", "planner.review.phrasing"} if fmt == "table"
                                                   else set())


def test_main_called_by_a_program_keeps_its_collector(capsys):
    assert gc.isenabled()
    assert main(["plan", "vllm-head", "--engine", "qwen3-30b-a3b-fp8-h100", "-f", "json"]) == 0
    assert gc.isenabled() and capsys.readouterr().out.startswith("{")
