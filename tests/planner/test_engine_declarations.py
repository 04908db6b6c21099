"""Each engine fact is declared once, and every other view of it is read off that declaration: the
names plans use (planner/engine/names.py), and the flags of `warmup engine --from-hf`
(planner/engine/hf/flags.py). These tests hold each declaration to the engine schema, so a row that
names a field the schema does not have fails here rather than at a user's plan."""

from __future__ import annotations

import json
import os

import pytest

from planner.engine.hf.flags import FROM_HF_FLAGS
from planner.engine.names import EXPRESSION_FIELDS, EXPRESSION_NAMES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "schemas", "engine.schema.json"), encoding="utf-8") as f:
    SCHEMA = json.load(f)


def schema_node(path: tuple[str, ...]) -> dict:
    """The schema of the field at `path`, through objects and the items of arrays."""
    node = SCHEMA
    for key in path:
        while node.get("type") == "array" or "items" in node:
            node = node["items"]
        node = node["properties"][key]  # KeyError: the schema has no such field
    return node


@pytest.mark.parametrize("name", sorted(EXPRESSION_NAMES))
def test_every_expression_name_reads_fields_the_schema_has(name):
    for path in EXPRESSION_FIELDS[name]:
        assert schema_node(path) is not None


@pytest.mark.parametrize("spec", [spec for spec in FROM_HF_FLAGS if spec.field], ids=lambda spec: spec.flag)
def test_every_from_hf_flag_sets_a_schema_field_within_its_bounds(spec):
    node = schema_node(tuple(spec.field.split(".")))
    if spec.choices:  # the flag takes exactly the field's names
        names = node.get("enum") or SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[-1]].get("enum")
        assert set(spec.choices) <= set(names), (spec.flag, names)
    if spec.bound is not None:  # the flag lets through nothing the schema refuses
        bound = node.get("maximum")
        if bound is None and "$ref" in node:
            bound = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[-1]].get("maximum")
        assert bound is None or spec.bound <= bound, (spec.flag, bound, spec.bound)


def test_the_one_flag_of_no_engine_field_names_a_supported_release():
    """--vllm-release sets no field: it says which vLLM's model code the shapes follow, one of the
    release table's rows (planner/engine/releases.py)."""
    from planner.engine.releases import supported

    fieldless = [spec for spec in FROM_HF_FLAGS if spec.field is None]
    assert [spec.flag for spec in fieldless] == ["--vllm-release"]
    assert fieldless[0].choices == tuple(supported())


def test_the_flags_are_the_commands_and_the_refused_ones_under_from_vllm():
    from planner.commands.engine import HF_ONLY_FLAGS

    assert HF_ONLY_FLAGS == tuple(spec.dest for spec in FROM_HF_FLAGS)
    assert len(set(HF_ONLY_FLAGS)) == len(HF_ONLY_FLAGS)
