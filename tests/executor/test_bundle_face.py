"""executor/bundle/ has one face (issue 56 item 2): its `__init__` names what the rest of the project
uses, nothing outside the package imports one of its modules, importing the package imports none of
them (the plugin runs inside vLLM's API server), and its docstring maps the face and every module."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys

import pytest

import executor.bundle as face

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "executor", "bundle")
OUTSIDE = ("bench", "vllm_bridge", "executor", "planner")  # what must go through the face


def python_files(folder: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, files in os.walk(folder) for f in files if f.endswith(".py"))


def reaching_in(path: str, dotted: str) -> list[str]:
    """The imports in the module `dotted` (file `path`) of a module of executor.bundle, or of a name
    of it that is not on its face: `import executor.bundle.x`, `from executor.bundle.x import y`,
    `from executor.bundle import x` (x no face name), and the relative forms of each."""
    package = dotted.rpartition(".")[0] if not path.endswith("__init__.py") else dotted
    found = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("executor.bundle.")]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(max(0, node.level - 1)):
                base = base.rpartition(".")[0]
            target = (base + (f".{node.module}" if node.module else "")) if node.level else node.module
            if target.startswith("executor.bundle."):
                found.append(f"{node.lineno}: from {target} import ...")
            elif target == "executor.bundle":
                found += [f"{node.lineno}: from executor.bundle import {a.name}" for a in node.names
                          if a.name not in face.FACE]
    return found


def outside_imports() -> list[str]:
    found = []
    for floor in OUTSIDE:
        for path in python_files(os.path.join(ROOT, floor)):
            if path.startswith(PACKAGE + os.sep):
                continue
            dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
            found += [f"{os.path.relpath(path, ROOT)}:{what}" for what in reaching_in(path, dotted)]
    return found


def test_nothing_outside_the_package_imports_one_of_its_modules():
    assert outside_imports() == []


def test_the_check_sees_each_way_in(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import executor.bundle.oci\nfrom executor.bundle.archive import read_manifest\n"
                      "from executor.bundle import startup, read_manifest\nfrom .bundle import sources\n"
                      "from .bundle.cli import add_commands\nfrom .bundle import add_commands\n"
                      "def f():\n    from ..bundle import oci_ref\n")
    assert reaching_in(str(module), "executor.cli") == [
        "1: import executor.bundle.oci", "2: from executor.bundle.archive import ...",
        "3: from executor.bundle import startup", "4: from executor.bundle import sources",
        "5: from executor.bundle.cli import ..."]
    assert reaching_in(str(module), "executor.caches.m")[-1] == "8: from executor.bundle import oci_ref"


@pytest.mark.parametrize("name", sorted(face.FACE))
def test_each_face_name_is_its_modules_own(name):
    module, attribute = face.FACE[name]
    assert getattr(face, name) is getattr(importlib.import_module(f"executor.bundle.{module}"), attribute)
    assert name not in {os.path.splitext(f)[0] for f in os.listdir(PACKAGE)}  # a face name never hides a module


def test_a_name_not_on_the_face_is_no_attribute_and_a_module_still_imports():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        face.no_such_name  # noqa: B018
    from executor.bundle import oci_ref

    assert oci_ref.__name__ == "executor.bundle.oci_ref" and face.__all__ == sorted(face.FACE)


def test_the_face_sees_a_patched_module(monkeypatch):
    """Looked up on each access, never kept: a test's patch of the module is what a caller gets."""
    from executor.bundle import archive

    monkeypatch.setattr(archive, "read_manifest", lambda path: "patched")
    from executor.bundle import read_manifest

    assert read_manifest("b.warmup") == "patched"


def test_importing_the_package_imports_none_of_its_modules():
    code = ("import sys\nimport executor.bundle\n"
            "print(' '.join(m for m in sys.modules if m.startswith('executor.bundle.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == []


def test_the_docstring_maps_the_face_and_every_module():
    doc = face.__doc__
    modules = {f for f in os.listdir(PACKAGE) if f.endswith(".py") and f != "__init__.py"}
    packages = {f"{d}/" for d in os.listdir(PACKAGE) if os.path.isfile(os.path.join(PACKAGE, d, "__init__.py"))}
    mapped = {line.split()[0] for line in doc.splitlines() if line.startswith("    ") and line.split()
              and line.split()[0].endswith((".py", "/"))}
    assert mapped == modules | packages
    face_part = doc.split("The package:")[0]
    # a face line: four spaces, the names (commas between), two spaces or the line's end, what they are
    named = {word.strip(",") for line in face_part.splitlines() if line.startswith("    ") and line[4:5].strip()
             for word in line[4:].split("  ")[0].split()}
    assert named == set(face.FACE)
