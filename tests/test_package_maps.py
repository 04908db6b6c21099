"""Issue 56 item 5: every package's `__init__.py` docstring is a map of the package, and the map is
current: it names each module and sub-package the package holds, and nothing it does not hold.

Which packages: every folder with an `__init__.py` under planner/, executor/, kernel_model/ and
vllm_bridge/, at any depth.

What a map names. The docstring is read as written in `__init__.py` (ast.get_docstring, clean=False:
the package is not imported). A *map line* is a line that starts with one or more spaces, then a name
`x.py` (a module) or `x/` (a sub-package), x a Python identifier, then a space or the line's end:

    expand.py    a plan against an engine -> the canonical step list (ExpandedPlan)
    stages/      one module per stage kind: a stage plus the engine -> typed steps

The package's map is the set of those names; nothing else names a module (not prose, which is not
indented; not a map line's continuation, indented but starting with another word; not a list such as
`a.py, b.py: ...`). What the package holds is every file `x.py` in its folder but `__init__.py`
(`__main__.py` included) and every folder `x/` with an `__init__.py`. The two must be equal: a module
missing from the map fails, and so does a map line naming a module or sub-package that is not there;
the failure lists, per package, what is missing and what is extra.
"""

from __future__ import annotations

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP_PACKAGES = ("planner", "executor", "kernel_model", "vllm_bridge")
MAP_LINE = re.compile(r"^ +([A-Za-z_]\w*(?:\.py|/))(?= |$)", re.MULTILINE)


def packages() -> list[str]:
    """Every package folder under the top-level packages, relative to the repository root."""
    found = []
    for top in TOP_PACKAGES:
        for folder, subfolders, files in os.walk(os.path.join(ROOT, top)):
            subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
            if "__init__.py" in files:
                found.append(os.path.relpath(folder, ROOT).replace(os.sep, "/"))
    return found


def docstring(package: str) -> str | None:
    path = os.path.join(ROOT, package, "__init__.py")
    with open(path, encoding="utf-8") as f:
        return ast.get_docstring(ast.parse(f.read(), path), clean=False)


def named(doc: str) -> set[str]:
    """The names of the map lines of a docstring."""
    return set(MAP_LINE.findall(doc))


def held(package: str) -> set[str]:
    """The modules (`x.py`) and sub-packages (`x/`) a package folder holds."""
    folder = os.path.join(ROOT, package)
    out = set()
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and name.endswith(".py") and name[:-3].isidentifier() and name != "__init__.py":
            out.add(name)
        elif os.path.isdir(path) and name.isidentifier() and os.path.isfile(os.path.join(path, "__init__.py")):
            out.add(name + "/")
    return out


def test_every_top_level_package_and_its_sub_packages_are_checked():
    found = packages()
    assert set(TOP_PACKAGES) <= set(found)
    assert {"planner/plan/stages", "executor/precompile/jobs", "executor/kernels/jit", "vllm_bridge/warmup",
            "vllm_bridge/bundles", "vllm_bridge/kernels", "vllm_bridge/engine"} <= set(found)


def test_map_lines_are_indented_names_followed_by_a_space_or_the_end():
    doc = ("Prose naming expand.py is not a map line.\n"
           "stages/ at the start of a prose line is not one either.\n\n"
           "    expand.py    a plan against an engine\n"
           "    stages/      one module per stage kind\n"
           "    records.py\n"
           "                 the continuation of records.py's line, naming steps.py\n"
           "    a.py, b.py: a list is not a map line\n"
           "    planner/plan/x.py   a path is not a name\n")
    assert named(doc) == {"expand.py", "stages/", "records.py"}


@pytest.mark.parametrize("package", packages())
def test_the_package_docstring_maps_its_modules(package):
    doc = docstring(package)
    assert doc, f"{package}/__init__.py has no docstring: it should map the package"
    have, listed = held(package), named(doc)
    missing, extra = sorted(have - listed), sorted(listed - have)
    assert not (missing or extra), (
        f"{package}/__init__.py's map: " + "; ".join(
            part for part in (f"missing {', '.join(missing)}" if missing else "",
                              f"names what is not there: {', '.join(extra)}" if extra else "") if part))
