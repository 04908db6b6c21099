"""A small AST mutator and mutant runner (issue 55 item 6: "tests that bite").

Each mutant is one text splice of the source (the rest of the file byte for byte): a comparison
flipped (< <= > >= == != in is), `and`/`or` swapped or one operand dropped, an `if`/`while`/ternary
condition negated, a `not` dropped, a constant changed (True/False, an int n -> n+1 or 1 -> 0, a
float x -> 10x), `min`/`max` swapped, + - * / swapped, and a statement dropped (a `raise`, a
`return` inside an `if`, a call statement, an assignment inside an `if` or `except`).

    python tests/tools/ast_mutants.py list FILE
    python tests/tools/ast_mutants.py run OUT.jsonl FILE[:ID,ID...] ... -- TEST [TEST...]

`run` copies the repository (without .git) into one work directory per worker (MUT_WORKERS, 2 by
default) under MUT_DIR (a fresh temporary directory by default; MUT_ROOT names another tree to
copy, such as a snapshot of the files as committed), writes each mutant into its copy,
runs `pytest -x -q TESTS` there with PYTHONPATH set to the copy (its subprocesses import the copy
too), puts the file back, and appends one JSON line per mutant: killed, survived or timeout. The
repository's own files are never written.
"""

from __future__ import annotations

import ast
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

CMP_SWAP = {ast.Lt: ["<=", ">="], ast.LtE: ["<", ">"], ast.Gt: [">=", "<="], ast.GtE: [">", "<"],
            ast.Eq: ["!="], ast.NotEq: ["=="], ast.In: ["not in"], ast.NotIn: ["in"],
            ast.Is: ["is not"], ast.IsNot: ["is"]}
BIN_SWAP = {ast.Add: "-", ast.Sub: "+", ast.Mult: "/", ast.Div: "*", ast.LShift: ">>", ast.BitOr: "&"}
ROOT = os.environ.get("MUT_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mutations(src: str) -> list[dict]:
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def span(node):
        def at(lineno, col):  # col offsets are UTF-8 bytes
            return starts[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode())
        return at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset)

    def seg(node):
        a, b = span(node)
        return src[a:b]

    out: list[dict] = []

    def add(node, new, kind):
        a, b = span(node)
        if src[a:b] != new:
            out.append({"start": a, "end": b, "new": new, "kind": kind, "line": node.lineno, "old": src[a:b][:80]})

    docstrings, annotations = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first))
        anns = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            anns.append(node.returns)
        if isinstance(node, (ast.arg, ast.AnnAssign)) and node.annotation:
            anns.append(node.annotation)
        for ann in anns:
            annotations.update(id(sub) for sub in ast.walk(ann))
    if_tests = {id(n.test) for n in ast.walk(tree) if isinstance(n, (ast.If, ast.While, ast.IfExp))}
    while_tests = {id(n.test) for n in ast.walk(tree) if isinstance(n, ast.While)}

    for node in ast.walk(tree):
        if id(node) in annotations or isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            for new in CMP_SWAP.get(type(node.ops[0]), []):
                add(node, f"({seg(node.left)}) {new} ({seg(node.comparators[0])})", "cmp")
        elif isinstance(node, ast.BoolOp):
            other = " and " if isinstance(node.op, ast.Or) else " or "
            add(node, "(" + other.join(f"({seg(v)})" for v in node.values) + ")", "boolop")
            if len(node.values) == 2:
                for v in node.values:
                    add(node, f"({seg(v)})", "boolop-drop")
        elif isinstance(node, ast.BinOp) and type(node.op) in BIN_SWAP:
            if any(isinstance(x, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(x, "value", ""), str)
                   for x in (node.left, node.right)):
                continue  # string concatenation
            add(node, f"({seg(node.left)}) {BIN_SWAP[type(node.op)]} ({seg(node.right)})", "binop")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            if id(node) not in if_tests:
                add(node, f"({seg(node.operand)})", "not-drop")
        elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
            if not isinstance(node.test, ast.Constant):
                add(node.test, f"(not ({seg(node.test)}))", "negate")
        elif isinstance(node, ast.Constant) and id(node) not in docstrings and id(node) not in while_tests:
            v = node.value
            if isinstance(v, bool):
                add(node, str(not v), "const")
            elif isinstance(v, int):
                add(node, "0" if v == 1 else str(v + 1), "const")
            elif isinstance(v, float):
                add(node, repr(v * 10) if v else "1.0", "const")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            add(node.func, "max" if node.func.id == "min" else "min", "minmax")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.If, ast.For, ast.While, ast.With, ast.Try,
                             ast.ExceptHandler)):
            bodies = [node.body] + [getattr(node, a) for a in ("orelse", "finalbody") if getattr(node, a, None)]
            for body in bodies:
                for stmt in body:
                    if id(stmt) in docstrings:
                        continue
                    if isinstance(stmt, ast.Raise):
                        add(stmt, "pass", "drop-raise")
                    elif isinstance(stmt, ast.Return) and isinstance(node, ast.If):
                        add(stmt, "pass", "drop-return")
                    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                        add(stmt, "pass", "drop-call")
                    elif isinstance(stmt, ast.Assign) and isinstance(node, (ast.If, ast.ExceptHandler)):
                        add(stmt, "pass", "drop-assign")
    out.sort(key=lambda m: (m["start"], m["end"], m["new"]))
    result = []
    for i, m in enumerate(out):
        try:
            compile(src[:m["start"]] + m["new"] + src[m["end"]:], "<mutant>", "exec")
        except SyntaxError:
            continue
        m["id"] = i
        result.append(m)
    return result


def _kill_leftovers(marker: str) -> None:
    """Registries a timed-out run started (their config under its basetemp): killed by pid."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and "docker-registry" in cmd:
            try:
                os.kill(int(pid), 9)
            except OSError:
                pass


def run(out_path: str, targets: list[str], tests: list[str]) -> None:
    base = os.environ.get("MUT_DIR") or tempfile.mkdtemp(prefix="ast-mutants-")
    workers = int(os.environ.get("MUT_WORKERS", "2"))
    timeout = int(os.environ.get("MUT_TIMEOUT", "180"))
    jobs: queue.Queue = queue.Queue()
    for target in targets:
        f, _, ids = target.partition(":")
        only = {int(x) for x in ids.split(",")} if ids else None
        src = open(os.path.join(ROOT, f)).read()
        for m in mutations(src):
            if only is None or m["id"] in only:
                jobs.put((f, m, src))
    total, done, lock = jobs.qsize(), [0], threading.Lock()
    out = open(out_path, "a")

    def work(i: int) -> None:
        copy = os.path.join(base, f"w{i}")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(ROOT, copy, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__", ".venv*"))
        env = {**os.environ, "PYTHONPATH": copy, "PYTHONDONTWRITEBYTECODE": "1"}
        while True:
            try:
                f, m, src = jobs.get_nowait()
            except queue.Empty:
                return
            path = os.path.join(copy, f)
            rec = {k: m[k] for k in ("id", "line", "kind", "old")} | {"file": f, "new": m["new"][:120]}
            with open(path, "w") as fh:
                fh.write(src[:m["start"]] + m["new"] + src[m["end"]:])
            basetemp = os.path.join(base, f"bt{i}")
            shutil.rmtree(basetemp, ignore_errors=True)
            started = time.monotonic()
            try:
                r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                    f"--basetemp={basetemp}", "-W", "ignore", *tests], cwd=copy, env=env,
                                   capture_output=True, text=True, timeout=timeout)
                rec["status"] = {0: "survived", 1: "killed"}.get(r.returncode, f"error{r.returncode}")
                rec["by"] = [x for x in r.stdout.splitlines() if x.startswith(("FAILED", "ERROR"))][:1]
            except subprocess.TimeoutExpired:
                rec["status"] = "timeout"
                _kill_leftovers(basetemp + "/")
            rec["secs"] = round(time.monotonic() - started, 1)
            with open(path, "w") as fh:
                fh.write(src)
            with lock:
                done[0] += 1
                out.write(json.dumps(rec) + "\n")
                out.flush()
                print(f"[{done[0]}/{total}] {f}#{m['id']} L{m['line']} {m['kind']}: {rec['status']}", flush=True)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> None:
    if sys.argv[1] == "list":
        for m in mutations(open(sys.argv[2]).read()):
            print(json.dumps({k: m[k] for k in ("id", "line", "kind", "old", "new")}))
    elif sys.argv[1] == "run":
        args = sys.argv[2:]
        split = args.index("--")
        run(args[0], args[1:split], args[split + 1:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
