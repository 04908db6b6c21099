"""The fuzz test's worker (tests/test_fuzz.py runs it in a subprocess under RLIMIT_AS).

    python tests/fuzz_worker.py SEED DOCUMENTS FOLDER

Makes DOCUMENTS random mutations of the shipped engines, plans, saved plans (expanded plans
from `warmup plan`, YAML and JSON) and Hugging Face config.json fixtures, seeded, so a run is
reproducible; feeds each to every command that reads its kind, in this process (one start-up
for all), each command under a wall-clock alarm; and prints one JSON line per command:
{"argv", "rc", "seconds", "changed", "err"}. `changed` lists the files under FOLDER (and the
repository's plans/, schemas/ and tests/fixtures/) that the command created, changed or removed,
other than its `-o` / `--report` target.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import random
import signal
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from planner.cli import main  # noqa: E402

ENGINES = ["llama-3.1-8b-fp8-h100", "qwen3-30b-a3b-fp8-h100", "deepseek-v3-fp8-tp8-h200", "mixtral-8x7b-tp2-h100"]
PLANS = ["vllm", "vllm-head", "triton", "reference"]
HF = ["llama-3.1-8b-instruct-fp8-block", "qwen3-30b-a3b-fp8", "deepseek-v3", "mixtral-8x7b", "qwen3-8b"]
SECONDS_PER_COMMAND = 30
WATCHED = [os.path.join(ROOT, d) for d in ("plans", "schemas", os.path.join("tests", "fixtures"))]


class CommandTimeout(BaseException):
    """Raised by the alarm: a BaseException, so that `main`'s last line of defence does not catch it."""


def _alarm(signum, frame):
    raise CommandTimeout()


# --- mutations ------------------------------------------------------------------------------

STRINGS = ["lots", "", "1..99999999999999", "9..1", "1..5/0", "-1", "1e30", "\u00e9t\u00e9", "x" * 300]
# Plan parameters are expressions: some that evaluate to absurd sizes, some that do not evaluate.
EXPRESSIONS = ["max_num_batched_tokens * 1000000", "max_model_len * max_num_seqs", "num_blocks * 4096",
               "cdiv(max_model_len, 0)", "next_power_of_2(2 ** 80)", "max_num_seqs - 100000", "0", "exact",
               "full", "relax", "1 if 2 else", "__import__('os')"]


def paths(node, prefix=()):
    """Every path in a document, containers included."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += paths(value, prefix + (i,))
    return out


def mutated_value(rng: random.Random, value):
    """A new value for `value`: scaled, negated, of another type, or a string users type."""
    choice = rng.randrange(10)
    if isinstance(value, int) and not isinstance(value, bool) and choice < 6:
        return [value * 10 ** rng.choice([1, 3, 6, 9, 30]), -value, 0, value + 1, 2 ** 24 + 1, 2 ** 40][choice]
    if isinstance(value, str) and choice < 4:
        return rng.choice(EXPRESSIONS)
    if isinstance(value, list) and choice < 3:
        return [rng.choice(STRINGS[2:5])] + value if choice == 0 else value * rng.choice([2, 50]) if value else value
    return [rng.choice(STRINGS), None, True, 1.5, float("inf"), [value], {"x": value}, 2 ** 64, -(2 ** 40),
            {}][rng.randrange(10)]


def mutate(rng: random.Random, doc):
    """1 to 3 edits at random paths: a new value, or the key deleted."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths(doc)[1:])
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if rng.random() < 0.2:
            del parent[path[-1]]
        else:
            parent[path[-1]] = mutated_value(rng, parent[path[-1]])
    return doc


def write(path: str, doc, style: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        if style == "yaml":
            yaml.safe_dump(doc, f, sort_keys=False, allow_unicode=True)
        elif style == "compact":  # what `warmup plan -f json` writes: read by the JSON fast path
            f.write(json.dumps(doc, separators=(",", ":")))
        else:
            f.write(json.dumps(doc, indent=1))
    return path


# --- running commands -------------------------------------------------------------------------

def snapshot() -> dict:
    state = {}
    for folder in [os.getcwd(), *WATCHED]:
        for base, _, files in os.walk(folder):
            for name in files:
                path = os.path.join(base, name)
                with open(path, "rb") as f:
                    state[path] = hashlib.sha1(f.read()).hexdigest()
    return state


def run(argv: list[str], target: str | None) -> dict:
    before = snapshot()
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, SECONDS_PER_COMMAND)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except CommandTimeout:
        rc = "timeout"
    except SystemExit as e:  # argparse
        rc = e.code
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    seconds = time.perf_counter() - start
    after = snapshot()
    target = os.path.realpath(target) if target else None
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p) and p != target)
    return {"argv": argv, "rc": rc, "seconds": round(seconds, 3), "changed": changed, "err": err.getvalue()[-300:]}


# --- documents and the commands that read them ---------------------------------------------------

def seeds(folder: str) -> list[tuple[str, object, str]]:
    """(kind, document, the engine it goes with) for every shipped input and two saved plans."""
    out = []
    for name in ENGINES:
        with open(os.path.join(ROOT, "plans", "engines", name + ".yaml"), encoding="utf-8") as f:
            out.append(("engine", yaml.safe_load(f), name))
    for name in PLANS:
        with open(os.path.join(ROOT, "plans", name + ".yaml"), encoding="utf-8") as f:
            out.append(("plan", yaml.safe_load(f), ENGINES[0]))
    for plan, engine in (("vllm", ENGINES[0]), ("triton", ENGINES[1])):
        saved = os.path.join(folder, f"base-{plan}.yaml")
        assert main(["plan", plan, "-e", engine, "-o", saved]) == 0
        with open(saved, encoding="utf-8") as f:
            out.append(("saved", yaml.safe_load(f), engine))  # runs stay compressed strings
    for name in HF:
        with open(os.path.join(ROOT, "tests", "fixtures", "hf", name + ".json"), encoding="utf-8") as f:
            out.append(("hf", json.load(f), ENGINES[0]))
    return out


def commands(rng: random.Random, kind: str, path: str, engine: str, folder: str, i: int) -> list:
    """(argv, -o target) of every command that reads a document of this kind."""
    out = os.path.join(folder, f"out-{i}")
    plan = rng.choice(PLANS)
    if kind == "engine":
        return [(["plan", plan, "-e", path, "-f", rng.choice(["yaml", "json"]), "-o", out], out),
                (["validate", path], None), (["check", plan, "-e", path], None),
                (["diff", "-p", plan, "-e", engine, "-e", path], None)]
    if kind == "plan":
        return [(["plan", path, "-e", engine, "-o", out], out), (["validate", path], None),
                (["check", path, "-e", engine], None), (["diff", "-p", "vllm", "-p", path, "-e", engine], None)]
    if kind == "saved":
        base = os.path.join(folder, "base-vllm.yaml")
        return [(["validate", path], None), (["check", path, "-e", engine], None), (["diff", base, path], None),
                (["execute", path, "-e", engine, "--dry-run", "--no-progress", "--jobs", "0", "--report", out], out)]
    tp = str(rng.choice([1, 2, 8]))
    return [(["engine", "--from-hf", path, "--tp", tp, "--gpu", rng.choice(["H100", "H200"]), "-o", out], out)]


def round_trip(argv: list[str], out: str, engine: str) -> list:
    """What `warmup plan -o` wrote for a built-in plan, `check` reads (exit 0 or 1, never 2)."""
    if argv[0] != "plan" or not os.path.exists(out) or argv[1] not in PLANS:
        return []
    return [(["check", out, "-e", argv[3]], None, "roundtrip")]


def main_loop(seed: int, documents: int, folder: str) -> None:
    rng = random.Random(seed)
    base = seeds(folder)
    signal.signal(signal.SIGALRM, _alarm)
    for i in range(documents):
        kind, doc, engine = base[i % len(base)]
        style = rng.choice(["compact", "yaml"]) if kind == "saved" else "json" if kind == "hf" else "yaml"
        path = write(os.path.join(folder, f"doc-{i}.{'json' if style != 'yaml' else 'yaml'}"), mutate(rng, doc),
                     style)
        for argv, target in commands(rng, kind, path, engine, folder, i):
            result = run(argv, target)
            print(json.dumps({"doc": i, "kind": kind, **result}), flush=True)
            for check_argv, _, label in round_trip(argv, target or "", engine) if result["rc"] == 0 else []:
                print(json.dumps({"doc": i, "kind": label, **run(check_argv, None)}), flush=True)
            if target and os.path.lexists(target):
                os.unlink(target)


if __name__ == "__main__":
    seed_arg, documents_arg, folder_arg = sys.argv[1:4]
    os.chdir(folder_arg)
    main_loop(int(seed_arg), int(documents_arg), folder_arg)
