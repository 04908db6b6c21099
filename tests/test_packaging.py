"""The wheel users install into vLLM's environment (issue 44 item 3): what it puts there (the four
top-level packages docs/getting-started.md names, each with py.typed, the built-in plans and schemas), its
LICENSE and the metadata pip shows, and `python -m planner` as the `warmup` command.

The wheel is built once for the module, as a user's `pip wheel .` builds it (hatchling in an
isolated build environment, from the index the test line installed from)."""

from __future__ import annotations

import ast
import email.parser
import os
import subprocess
import sys
import zipfile

import pytest

import planner
from planner.cli import version_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
def text_of(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


GETTING_STARTED = text_of(os.path.join(ROOT, "docs", "getting-started.md"))  # the README's install, in full
PACKAGES = ["executor", "kernel_model", "planner", "vllm_bridge"]
DIST_INFO = f"warmup_planner-{planner.__version__}.dist-info"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-q", "-w", str(out)],
                          check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (name,) = os.listdir(out)
    assert name == f"warmup_planner-{planner.__version__}-py3-none-any.whl"
    return str(out / name)


@pytest.fixture(scope="module")
def names(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def read(wheel: str, name: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(name).decode("utf-8")


def test_the_wheel_installs_the_four_packages_the_readme_names_each_typed(names):
    assert sorted({name.split("/")[0] for name in names}) == PACKAGES + [DIST_INFO]
    for package in PACKAGES:
        assert f"{package}/__init__.py" in names and f"{package}/py.typed" in names, package
    assert "planner/__main__.py" in names
    assert any(n.startswith("planner/_data/plans/") for n in names)      # planner/resources.py reads them
    assert any(n.startswith("planner/_data/schemas/") for n in names)
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]
    # the docs tell a vLLM user which top-level names the install adds, and which clash on PyPI
    start = GETTING_STARTED.index("**What the install puts into vLLM's environment.**")
    paragraph = " ".join(GETTING_STARTED[start:GETTING_STARTED.index("\n\n", start)].split())
    assert "four top-level packages, `planner`, `executor`, `kernel_model` and `vllm_bridge`" in paragraph
    assert "the distributions `planner` (a planning algorithm) and `executor` (a subprocess wrapper)" in paragraph
    assert "`python3 -m planner`" in paragraph


def test_the_license_is_apache_2_and_travels_in_the_wheel(wheel, names):
    license_text = text_of(os.path.join(ROOT, "LICENSE"))
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    assert f"{DIST_INFO}/licenses/LICENSE" in names
    assert read(wheel, f"{DIST_INFO}/licenses/LICENSE") == license_text


def test_the_metadata_pip_shows(wheel):
    meta = email.parser.Parser().parsestr(read(wheel, f"{DIST_INFO}/METADATA"))
    assert meta["Name"] == "warmup-planner" and meta["Version"] == planner.__version__
    assert meta["License-Expression"] == "Apache-2.0" and meta["License-File"] == "LICENSE"
    assert meta["Requires-Python"] == ">=3.10"
    assert meta["Author"] and "example" not in meta["Author"].lower()
    assert {"vllm", "warmup", "triton"} <= set(meta["Keywords"].split(","))
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers and "Operating System :: POSIX :: Linux" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]   # the license expression says it
    # no placeholder address: project.urls stays out until the project has a public home
    assert meta.get_all("Project-URL") is None and meta["Home-page"] is None
    entry_points = read(wheel, f"{DIST_INFO}/entry_points.txt")
    assert "[console_scripts]\nwarmup = planner.cli:main\n" in entry_points


def test_the_installed_wheel_runs_as_python_m_planner_outside_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                           "--target", str(site), wheel], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PYTHONPATH": str(site)}

    def run(*argv):
        return subprocess.run([sys.executable, *argv], check=False, cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)

    where = run("-c", "import planner; print(planner.__file__)")
    assert where.stdout.strip() == str(site / "planner" / "__init__.py")
    version = run("-m", "planner", "--version")
    assert (version.returncode, version.stderr, version.stdout) == (0, "", version_text())
    plans = run("-m", "planner", "plans")
    assert plans.returncode == 0 and "vllm-0.33" in plans.stdout


# `python -m planner` imports what `warmup` imports (runpy runs planner/__main__.py as `__main__`)
_RUN = """
import runpy, sys
sys.argv = {argv!r}
try:
    {call}
except SystemExit as e:
    code = e.code
with open({out!r}, "w") as f:
    f.write(repr((code, sorted(sys.modules))))
"""


def modules_of(call: str, tmp_path, name: str) -> tuple:
    out = str(tmp_path / name)
    argv = ["warmup", "plan", "vllm-0.33", "--engine", "llama-3.1-8b-fp8-h100", "-f", "json"]
    code = _RUN.format(argv=argv, call=call, out=out)
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    status, modules = ast.literal_eval(text_of(out))
    ours = ("planner", "executor", "kernel_model", "vllm_bridge", "yaml", "jsonschema", "torch", "triton")
    return status, {m for m in modules if m.split(".")[0] in ours}


def test_python_m_planner_imports_what_warmup_imports(tmp_path):
    script_status, script = modules_of("from planner.cli import main; code = main()", tmp_path, "script")
    module_status, module = modules_of("runpy.run_module('planner', run_name='__main__', alter_sys=True)",
                                       tmp_path, "module")
    assert script_status == module_status == 0
    assert module == script and "planner.cli" in module
