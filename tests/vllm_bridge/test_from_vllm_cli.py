"""`warmup engine --from-vllm`'s refusals that come before vLLM builds anything: no vLLM, a vLLM
release no plan supports, --from-hf flags, an unknown --gpu. vLLM is stood in for by sys.modules
entries, so these run everywhere (tests/integration/from_vllm/test_from_vllm.py runs the rest against
real releases)."""

from __future__ import annotations

import sys
from types import SimpleNamespace as NS

import pytest

from planner import cli
from vllm_bridge.cli import serve_arguments, supported_releases


def warmup(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def one_error(capsys, *argv) -> str:
    rc, out, err = warmup(capsys, *argv)
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.startswith("warmup: error: "), err
    return err[len("warmup: error: "):].rstrip("\n")


def test_supported_releases_come_from_the_per_release_plans():
    assert supported_releases() == ["0.25", "0.33"]


def test_every_release_row_has_its_plan_and_every_release_plan_a_row():
    """One list of supported releases (vllm_bridge.releases) and the per-release plans agree."""
    from planner.resources import builtin_plans
    from vllm_bridge.cli import RELEASE_PLAN
    from vllm_bridge.releases import RELEASES

    plans = {name for name in builtin_plans() if RELEASE_PLAN.match(name)}
    assert {row.plan for row in RELEASES.values()} == plans
    for version, row in RELEASES.items():
        assert row.plan == "vllm-" + ".".join(version.split(".")[:2])


def test_vllm_not_installed(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    message = one_error(capsys, "engine", "--from-vllm", "--", "/models/llama")
    assert message.startswith("--from-vllm: vLLM is not installed (import vllm: ")
    assert message.endswith("install vllm, or use --from-hf")


@pytest.mark.parametrize("version", ["0.20.1", "0.34.0", "0.2.50", "0.33.1"])
def test_unsupported_release_names_installed_and_supported(capsys, monkeypatch, version):
    monkeypatch.setitem(sys.modules, "vllm", NS(__version__=version))
    assert one_error(capsys, "engine", "--from-vllm", "--", "/models/llama") == (
        f"--from-vllm: vLLM {version} is installed, and no plan supports it (supported releases: 0.25.0, 0.33.0; "
        "plans vllm-0.25, vllm-0.33)")


@pytest.mark.parametrize("flag", [["--tp", "2"], ["--num-blocks", "100"], ["--ignore-memory"]])
def test_from_hf_flags_are_refused_with_from_vllm(capsys, flag):
    message = one_error(capsys, "engine", "--from-vllm", *flag, "--", "/models/llama")
    assert message.startswith(f"--from-vllm: {flag[0]} belong to --from-hf; with --from-vllm give vLLM's own flags")


def test_vllm_arguments_are_refused_with_from_hf(capsys, tmp_path):
    assert one_error(capsys, "engine", "--from-hf", str(tmp_path / "config.json"), "--", "--tensor-parallel-size",
                     "2") == ("--from-hf: unexpected arguments '--tensor-parallel-size 2': only --from-vllm takes "
                              "`-- <vllm serve arguments>`")


def test_unknown_gpu(capsys):
    assert one_error(capsys, "engine", "--from-vllm", "--gpu", "T4", "--", "/m") == (
        "--from-vllm: --gpu: unknown GPU 'T4' (known: H100, H200, H20, B200, A100, L40S)")


@pytest.mark.parametrize("argv, expected", [
    (["/m", "--max-model-len", "8"], ["--model", "/m", "--max-model-len", "8"]),
    (["--model", "/m", "-tp", "2"], ["--model", "/m", "-tp", "2"]),
    ([], [])])
def test_the_model_is_the_first_positional_as_in_vllm_serve(argv, expected):
    assert serve_arguments(argv) == expected


def test_wheel_ships_vllm_bridge_and_names_the_vllm_extra():
    """`warmup engine --from-vllm` imports vllm_bridge: an installed wheel must carry it."""
    import os
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    top_level = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "__init__.py")))
    assert sorted(packages) == top_level and "vllm_bridge" in packages
    from planner.engine.releases import newest  # the newest supported release (tests/planner/test_releases.py)
    assert project["project"]["optional-dependencies"]["vllm"] == [f"vllm=={newest()}"]


def test_from_hf_imports_neither_the_bridge_nor_torch(tmp_path):
    """Only --from-vllm imports vllm_bridge.cli (and through it torch and vLLM)."""
    import os
    import subprocess
    fixture = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "hf",
                           "qwen3-8b.json")
    code = ("import sys; from planner import cli; rc = cli.main(['engine', '--from-hf', sys.argv[1], '-o', "
            "sys.argv[2]]); print(rc, sorted(m for m in ('torch', 'vllm', 'vllm_bridge.cli', 'vllm_bridge.engine.from_vllm') "
            "if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code, fixture, str(tmp_path / "e.yaml")], capture_output=True,
                         text=True, check=True)
    assert run.stdout.strip() == "0 []"


def test_every_stand_in_device_is_built_by_keyword():
    """The stand-in GPU's facts (vllm_bridge/engine/standins.py Device) are named where they are given:
    --from-vllm's device_of and the harnesses under tests/integration/ (issue 56 item 4)."""
    import ast
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    built, positional = [], []
    for top in ("vllm_bridge", "tests"):
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                if not any(isinstance(node, ast.ImportFrom) and (node.module or "").endswith("standins")
                           and any(alias.name == "Device" for alias in node.names) for node in ast.walk(tree)):
                    continue
                for node in ast.walk(tree):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Device":
                        built.append(os.path.relpath(path, root))
                        if node.args:
                            positional.append(f"{os.path.relpath(path, root)}:{node.lineno}")
    assert {"vllm_bridge/cli.py", "tests/integration/vllm_parity/oracle.py",
            "tests/integration/vllm_plugin/probe.py"} <= set(built)
    assert positional == []
