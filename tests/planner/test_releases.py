"""One table of supported vLLM releases (planner/engine/releases.py) behind the plugin's table, `--from-vllm`,
pyproject's `vllm` extra and `warmup --version` (issue 27, item 3; one row per release: issue 36
item 1, tests/planner/test_release_row.py adds a made-up one)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import planner
from planner import cli
from planner.cli import version_text
from planner.engine.releases import VLLM_RELEASES, newest, parse_release, supported
from planner.plan.expanded import FORMAT
from planner.resources import builtin_plans

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_every_supported_release_has_its_built_in_plan():
    assert VLLM_RELEASES and {row.plan for row in VLLM_RELEASES.values()} <= set(builtin_plans())
    for version, row in VLLM_RELEASES.items():
        assert row.version == version and re.fullmatch(r"\d+\.\d+\.\d+", version)
        assert row.plan == "vllm-" + version.rsplit(".", 1)[0]


def test_the_plugin_table_is_built_from_the_list():
    from vllm_bridge.releases import RELEASES, UnsupportedVllm, release_for

    assert {version: row.plan for version, row in RELEASES.items()} == {v: r.plan for v, r in VLLM_RELEASES.items()}
    for version in VLLM_RELEASES:
        assert release_for(version).plan == VLLM_RELEASES[version].plan
    with pytest.raises(UnsupportedVllm, match="supports vLLM 0.25.0, 0.33.0"):
        release_for("0.26.0")


def test_from_vllm_takes_exactly_the_plugins_releases():
    from planner.errors import PlanError
    from vllm_bridge.cli import check_release

    for version in VLLM_RELEASES:
        check_release(version)
    for other in ("0.24.0", "0.26.0", "0.32.1", "0.33.1", "0.25.0rc1", "0.34.0", "1.0.0"):
        with pytest.raises(PlanError, match=f"vLLM {re.escape(other)} is installed, and no plan supports it"):
            check_release(other)


def test_the_vllm_extra_pins_the_newest_supported_release():
    """A range would let pip install a release the plugin refuses (one between the supported ones, or a
    later patch release), and "0.25.0 or 0.33.0" is no single requirement: the extra pins the newest."""
    extras = pyproject()["project"]["optional-dependencies"]
    assert newest() == max(VLLM_RELEASES, key=parse_release) == supported()[-1] == "0.33.0"
    assert extras["vllm"] == [f"vllm=={newest()}"]


def test_package_version_is_the_planner_version():
    assert pyproject()["project"]["version"] == planner.__version__


def test_version_prints_package_format_and_releases(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0 and err == "" and out == version_text()
    assert out.splitlines() == [
        f"warmup-planner {planner.__version__}",
        f"expanded plan format: {FORMAT} (schemas/expanded-plan.schema.json)",
        "supported vLLM releases (the plugin accepts exactly these versions):",
        "  vllm 0.25.0  plan vllm-0.25",
        "  vllm 0.33.0  plan vllm-0.33",
    ]


def test_version_from_the_command_line():
    done = subprocess.run([sys.executable, "-m", "planner.cli", "--version"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "") and done.stdout == version_text()
