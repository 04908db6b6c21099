"""The entry points pyproject.toml gives vllm_bridge (issue 56 item 3): each names a module and an
attribute that exist, so that a module moved inside vllm_bridge cannot leave vLLM's plugin, the
`--from-vllm` engine source or an executor backend naming nothing. Read from pyproject.toml itself,
not from an installed copy's metadata (which an edit of the checkout does not change: reinstall to
refresh it), and loaded as importlib.metadata's EntryPoint.load loads them, without vLLM or torch."""

from __future__ import annotations

import importlib
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bridge_entry_points() -> list[tuple[str, str, str]]:
    """(group, name, "module:attr") of each entry point pyproject.toml points into vllm_bridge."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        groups = tomllib.load(f)["project"]["entry-points"]
    return sorted((group, name, value) for group, points in groups.items() for name, value in points.items()
                  if value.split(":")[0].split(".")[0] == "vllm_bridge")


def test_the_bridge_registers_vllms_plugin_the_engine_source_and_two_backends():
    found = bridge_entry_points()
    assert [(group, name) for group, name, _ in found] == [
        ("vllm.general_plugins", "warmup_planner"), ("warmup.backends", "deep_gemm_vllm"),
        ("warmup.backends", "vllm_triton"), ("warmup.engine_sources", "vllm")]
    # vLLM loads the plugin by this name in every process: an installed wheel's metadata keeps it
    assert ("vllm.general_plugins", "warmup_planner", "vllm_bridge.plugin:register") in found


def test_each_entry_point_names_a_callable_that_is_there():
    missing = []
    for group, name, value in bridge_entry_points():
        module, _, attr = value.partition(":")
        try:
            target = importlib.import_module(module)
            for part in attr.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as e:
            missing.append(f"{group} {name} = {value!r}: {type(e).__name__}: {e}")
            continue
        if not callable(target):
            missing.append(f"{group} {name} = {value!r}: not callable")
    assert missing == []
