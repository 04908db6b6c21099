"""The precompile pool is used through its interface alone (issue 36 item 4).

Outside executor/precompile/, the project uses what executor/precompile/__init__.py exports
(the Precompiler's methods and properties among them): no module imports a precompile
submodule (``executor.precompile.<sub>``, relative forms and module paths in strings included:
``python -m``, ``importlib.import_module``), reads a piece of a Precompiler (``pre.book``,
``pre.pool``, ``pre.barrier``, ...) or writes to one (``pre.status, pre.reason = ...``). The
tests of the package's insides (tests/executor/test_precompile_*.py, and the script that runs
a job as a pool worker does) may import its submodules. Inside the package, the sub-packages
import one way (jobs/, claims/, workers/, pool/), and its docstring map names what is there.
"""

from __future__ import annotations

import ast
import os
import re

import pytest
from test_layers import FLOORS, ROOT, module_imports, project_modules

PACKAGE = "executor.precompile"
PACKAGE_DIR = os.path.join(ROOT, "executor", "precompile")
PRECOMPILER = os.path.join(PACKAGE_DIR, "pool", "precompiler.py")
INSIDES_TESTS = re.compile(r"tests/executor/(test_precompile(_\w+)?|compile_only_worker)\.py$")
THIS = "tests/executor/test_precompile_interface.py"  # names submodules to see that the check finds them
TOPICS = ["jobs", "claims", "workers", "pool"]  # the sub-packages, in the one way their imports go


def submodules() -> set:
    """The names directly below executor/precompile/: its sub-packages and modules."""
    out = set()
    for entry in os.listdir(PACKAGE_DIR):
        path = os.path.join(PACKAGE_DIR, entry)
        if os.path.isfile(os.path.join(path, "__init__.py")):
            out.add(entry)
        elif entry.endswith(".py") and entry != "__init__.py":
            out.add(entry[:-3])
    return out


def precompiler_pieces() -> set:
    """What a Precompiler holds that is not its interface: the attributes its __init__ sets that
    the class does not define as a method or property (book, pool, barrier, claims, ...)."""
    tree = ast.parse(open(PRECOMPILER, encoding="utf-8").read(), PRECOMPILER)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Precompiler")
    members = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    members |= {t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    stored = {n.attr for n in ast.walk(init) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
              and isinstance(n.value, ast.Name) and n.value.id == "self"}
    return stored - members


def names_a_precompiler(node) -> bool:
    """`pre`, `precompiler`, `self.precompiler`, `state.precompiler`: how the project names one."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name in ("pre", "precompiler") or name.endswith("_precompiler")


def docstrings(tree) -> set:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, kinds) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def import_target(node: ast.ImportFrom, dotted: str, package: bool) -> str:
    """The absolute module an ImportFrom names (as tests/test_layers.py resolves it)."""
    if not node.level:
        return node.module or ""
    base = dotted if package else dotted.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return base + (f".{node.module}" if node.module else "")


def ways_in(path: str, dotted: str, package: bool = False, pieces=None, subs=None) -> list[str]:
    """Where a module outside the package reaches into it: 'line: what'."""
    pieces = precompiler_pieces() if pieces is None else pieces
    subs = submodules() if subs is None else subs
    inner = re.compile(rf"\b{re.escape(PACKAGE)}\.({'|'.join(sorted(subs))})\b")
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    docs = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: imports {a.name}" for a in node.names if a.name.startswith(PACKAGE + ".")]
        elif isinstance(node, ast.ImportFrom):
            target = import_target(node, dotted, package)
            if target.startswith(PACKAGE + "."):
                found.append(f"{node.lineno}: imports {target}")
            elif target == PACKAGE:
                found += [f"{node.lineno}: imports {PACKAGE}.{a.name}" for a in node.names if a.name in subs]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found += [f"{node.lineno}: names {m.group(0)}" for m in inner.finditer(node.value)]
        elif isinstance(node, ast.Attribute) and names_a_precompiler(node.value):
            if isinstance(node.ctx, ast.Store):
                found.append(f"{node.lineno}: writes .{node.attr} of a Precompiler")
            elif node.attr in pieces:
                found.append(f"{node.lineno}: reads .{node.attr} of a Precompiler")
    return sorted(set(found), key=lambda what: (int(what.split(":")[0]), what))


def outside_modules() -> list[tuple[str, str, bool]]:
    """(path, dotted name, is a package's __init__) of every module outside the package: the
    floors above the planner, and the tests but those of the package's insides."""
    out = []
    for top in FLOORS[:3] + ["tests"]:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                rel = os.path.relpath(os.path.join(folder, name), ROOT)
                if (not name.endswith(".py") or rel.startswith("executor/precompile/") or INSIDES_TESTS.search(rel)
                        or rel == THIS):
                    continue
                dotted = rel[:-3].replace(os.sep, ".")
                out.append((os.path.join(ROOT, rel), dotted.removesuffix(".__init__"), name == "__init__.py"))
    return out


def test_nothing_outside_the_package_reaches_into_it():
    pieces, subs = precompiler_pieces(), submodules()
    found = [f"{os.path.relpath(path, ROOT)}:{what}" for path, dotted, package in outside_modules()
             for what in ways_in(path, dotted, package, pieces, subs)]
    assert found == [], "use executor.precompile's interface (its __init__.py): " + "; ".join(found)


def test_no_script_runs_a_precompile_submodule_by_its_path():
    inner = re.compile(rf"\b{re.escape(PACKAGE)}\.(?:{'|'.join(sorted(submodules()))})\b")
    found = [f"{os.path.relpath(os.path.join(folder, name), ROOT)}" for top in ("bench", "tests")
             for folder, _, files in os.walk(os.path.join(ROOT, top)) for name in files
             if name.endswith(".sh") and inner.search(open(os.path.join(folder, name), encoding="utf-8").read())]
    assert found == []


def test_the_check_sees_each_way_in_and_leaves_the_interface_alone(tmp_path):
    assert {"book", "pool", "barrier", "claims", "timings", "lane_waits"} <= precompiler_pieces()
    assert {"status", "reason", "summary", "finish_device_lane"}.isdisjoint(precompiler_pieces())
    module = tmp_path / "m.py"
    module.write_text(
        '"""Docstrings may point at executor.precompile.pool.precompiler."""\n'      # 1
        "from executor.precompile.workers import lanes\n"                            # 2
        "import executor.precompile.jobs.job\n"                                      # 3
        "from ..precompile.claims import CLAIMS_DIR\n"                               # 4
        "from .. import precompile\n"                                                # 5
        "from ..precompile import pool, Precompiler\n"                               # 6
        "cmd = ['python', '-m', 'executor.precompile.workers.build_ahead']\n"        # 7
        "n = len(pre.book.results())\n"                                              # 8
        "lanes = self.precompiler.pool\n"                                            # 9
        "pre.status, pre.reason = 'off', 'why'\n"                                    # 10
        "from executor.precompile import Precompiler, default_jobs\n"                # 11
        "line = pre.summary()['status'] + pre.get('reason') + str(pre.running)\n")   # 12
    assert ways_in(str(module), "executor.bundle.ops") == [
        "2: imports executor.precompile.workers", "3: imports executor.precompile.jobs.job",
        "4: imports executor.precompile.claims", "6: imports executor.precompile.pool",
        "7: names executor.precompile.workers", "8: reads .book of a Precompiler",
        "9: reads .pool of a Precompiler", "10: writes .reason of a Precompiler",
        "10: writes .status of a Precompiler"]
    assert INSIDES_TESTS.search("tests/executor/test_precompile_pieces.py")
    assert INSIDES_TESTS.search("tests/executor/test_precompile.py")
    assert not INSIDES_TESTS.search("tests/executor/test_report.py")


# --- inside: the topics import one way, and the docstrings map what is there -----------------------------

def topic_of(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == PACKAGE.split(".") and parts[2] in TOPICS else None


def imports_against_the_way(graph: dict) -> list[str]:
    """Edges from a topic to a later one (jobs/ imports nothing of claims/, workers/, pool/; ...)."""
    found = []
    for name, targets in sorted(graph.items()):
        here = topic_of(name)
        for target in sorted(targets):
            there = topic_of(target)
            if here and there and TOPICS.index(there) > TOPICS.index(here):
                found.append(f"{name} imports {target}")
    return found


def test_the_topics_import_one_way():
    known = project_modules()
    graph = {name: module_imports(name, path, package, known) for name, (path, package) in known.items()
             if name.startswith(PACKAGE + ".")}
    assert imports_against_the_way(graph) == []


def test_the_way_check_sees_an_import_up_the_topics():
    graph = {f"{PACKAGE}.jobs.decide": {f"{PACKAGE}.pool.book", f"{PACKAGE}.jobs.job"},
             f"{PACKAGE}.pool.book": {f"{PACKAGE}.jobs.job"}}
    assert imports_against_the_way(graph) == [f"{PACKAGE}.jobs.decide imports {PACKAGE}.pool.book"]


def module_doc(path: str) -> str:
    return ast.get_docstring(ast.parse(open(path, encoding="utf-8").read(), path), clean=False) or ""


@pytest.mark.parametrize("topic", TOPICS)
def test_each_topics_docstring_maps_its_modules(topic):
    folder = os.path.join(PACKAGE_DIR, topic)
    doc = module_doc(os.path.join(folder, "__init__.py"))
    have = {f for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py"}
    named = set(re.findall(r"^ +(\w+\.py)\b", doc, re.M))
    assert named == have


def test_the_package_docstring_names_its_topics_and_its_interface():
    import executor.precompile as precompile

    doc = module_doc(os.path.join(PACKAGE_DIR, "__init__.py"))
    assert set(re.findall(r"^\s{4}(\w+)/\s", doc, re.M)) == set(TOPICS) == submodules()
    assert [name for name in precompile.__all__ if not re.search(rf"\b{name}\b", doc)] == []
    assert {n for n in vars(precompile) if not n.startswith("_") and n not in TOPICS} == set(precompile.__all__)
