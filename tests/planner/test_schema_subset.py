"""The start-up-fast subset validator agrees with the jsonschema library on our schemas."""

import copy
import glob
import json
import random

import jsonschema
import pytest
import yaml

from planner.schema import SchemaViolation, _check, load_schema
from planner.yamlio import decompress

SCHEMAS = ["engine", "plan", "expanded-plan"]


def subset_ok(name, data):
    schema = load_schema(name)
    try:
        _check(schema, data, (), schema)
        return True
    except SchemaViolation:
        return False


def oracle_ok(name, data):
    return jsonschema.Draft202012Validator(load_schema(name)).is_valid(data)


@pytest.mark.parametrize("name", SCHEMAS)
def test_schemas_are_valid_draft_2020_12(name):
    jsonschema.Draft202012Validator.check_schema(load_schema(name))


def corpus():
    docs = [("engine", yaml.safe_load(open(p))) for p in sorted(glob.glob("plans/engines/*.yaml"))]
    docs += [("plan", yaml.safe_load(open(p))) for p in sorted(glob.glob("plans/*.yaml"))]
    docs += [("expanded-plan", decompress(yaml.safe_load(open(p)))) for p in ["tests/golden/vllm-head--mixtral-8x7b-tp2-h100.yaml"]]
    return docs


def mutations(data, rng, count):
    """Random edits: wrong types, out-of-range numbers, unknown and missing keys."""
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append(path + (k,))
                walk(v, path + (k,))
        elif isinstance(node, list) and node and not isinstance(node[0], int):
            for i, v in enumerate(node[:3]):
                paths.append(path + (i,))
                walk(v, path + (i,))

    walk(data, ())
    for _ in range(count):
        doc = copy.deepcopy(data)
        path = rng.choice(paths)
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        edit = rng.choice(["type", "negative", "zero", "unknown", "delete", "null", "float", "bool"])
        key = path[-1]
        if edit == "type":
            parent[key] = "nonsense"
        elif edit == "negative":
            parent[key] = -5
        elif edit == "zero":
            parent[key] = 0
        elif edit == "unknown" and isinstance(parent[key], dict):
            parent[key]["surprise"] = 1
        elif edit == "delete" and isinstance(parent, dict):
            del parent[key]
        elif edit == "null":
            parent[key] = None
        elif edit == "float":
            parent[key] = 0.5
        else:
            parent[key] = True
        yield doc


def test_subset_agrees_with_jsonschema():
    rng = random.Random(1234)
    checked = disagreements = 0
    for name, data in corpus():
        assert subset_ok(name, data) and oracle_ok(name, data), name
        for doc in mutations(data, rng, 150 if name != "expanded-plan" else 25):
            checked += 1
            if subset_ok(name, doc) != oracle_ok(name, doc):
                disagreements += 1
                print(name, json.dumps(doc)[:300])
    assert checked > 1000 and disagreements == 0


def test_unsupported_keyword_is_refused(tmp_path, monkeypatch):
    from planner import schema as module

    bad = tmp_path / "x.schema.json"
    bad.write_text(json.dumps({"type": "object", "patternProperties": {"^a": {}}}))
    monkeypatch.setattr(module, "schema_path", lambda name: str(bad))
    module.load_schema.cache_clear()
    try:
        with pytest.raises(ValueError, match="patternProperties"):
            module.load_schema("x")
    finally:
        module.load_schema.cache_clear()
