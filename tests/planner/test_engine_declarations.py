"""Each engine fact is declared once, and every other view of it is read off that declaration: the
names plans use (planner/engine/names.py), the flags of `warmup engine --from-hf`
(planner/engine/hf/flags.py: a row each, and a field each of the one record the builder takes), and
the typed record of the engine (planner/engine/facts.py: built by keyword, every default the
schema's). These tests hold each declaration to the engine schema, so a row that names a field the
schema does not have fails here rather than at a user's plan."""

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
    from planner.commands.engine import hf_only_flags

    assert hf_only_flags() == tuple(spec.dest for spec in FROM_HF_FLAGS)
    assert len(set(hf_only_flags())) == len(hf_only_flags())


def test_a_flag_is_one_row_and_one_field_of_the_engine_request():
    """engine_from_hf takes the flags as one record: each FlagSpec row's dest is an EngineRequest field,
    in the rows' order, and the record has no other field but NOT_FLAGS (--gpu, --name, the source)."""
    import dataclasses

    from planner.engine.hf.flags import NOT_FLAGS, EngineRequest

    fields = [f.name for f in dataclasses.fields(EngineRequest)]
    assert fields == [spec.dest for spec in FROM_HF_FLAGS] + list(NOT_FLAGS)


def test_the_request_of_parsed_arguments_carries_every_flag_given():
    """EngineRequest.from_args reads each row's dest: a value given on the command line reaches the
    builder; a flag left out (None) is the record's default."""
    import argparse

    from planner.engine.hf.flags import EngineRequest

    given = argparse.Namespace(**{spec.dest: f"value of {spec.flag}" for spec in FROM_HF_FLAGS})
    request = EngineRequest.from_args(given, gpu="H200", name=None, source="x.json")
    assert all(getattr(request, spec.dest) == f"value of {spec.flag}" for spec in FROM_HF_FLAGS)
    assert (request.gpu, request.name, request.source) == ("H200", None, "x.json")
    left_out = argparse.Namespace(**{spec.dest: None for spec in FROM_HF_FLAGS})
    assert EngineRequest.from_args(left_out) == EngineRequest()


# --- a new flag is one row, and its field one more line of the same file (issue 56) ----------------

FICTITIOUS_FLAG = "--fictitious-knob"


@pytest.fixture
def fictitious_flag(monkeypatch):
    """One more FlagSpec row in FROM_HF_FLAGS (planner/engine/hf/flags.py), for one test."""
    from planner.engine.hf import flags

    row = flags.FlagSpec(FICTITIOUS_FLAG, "scheduler.fictitious_knob", "a made-up count of the scheduler",
                         bound=64, metavar="N")
    monkeypatch.setattr(flags, "FROM_HF_FLAGS", flags.FROM_HF_FLAGS + (row,))
    return row


def test_a_fictitious_flag_is_one_row(fictitious_flag, capsys):
    """The row alone gives `warmup engine` its argument (an int, as the row's bound says), puts it among
    the flags --from-vllm refuses, and EngineRequest.from_args reads it. The record's field is the other
    line a flag needs (EngineRequest is a dataclass: without the field the request cannot be built, and
    test_a_flag_is_one_row_and_one_field_of_the_engine_request fails); with it the value reaches
    engine_from_hf. What the builder does with it is code of its own (check_flags, the engine dict, the
    regenerating command in the description), and the engine field is the schema's."""
    import dataclasses

    from planner.cli import build_parser, main
    from planner.commands.engine import hf_only_flags
    from planner.engine.hf import flags

    parser = build_parser("engine", with_plugins=False)
    args = parser.parse_args(["engine", "--from-hf", "config.json", FICTITIOUS_FLAG, "3"])
    assert args.fictitious_knob == 3
    assert parser.parse_args(["engine", "--from-hf", "config.json"]).fictitious_knob is None
    with pytest.raises(SystemExit):
        parser.parse_args(["engine", "--from-hf", "config.json", FICTITIOUS_FLAG, "many"])
    with pytest.raises(SystemExit):
        parser.parse_args(["engine", "--help"])
    assert f"{FICTITIOUS_FLAG} N A made-up count of the scheduler." in " ".join(capsys.readouterr().out.split())

    assert hf_only_flags()[-1] == "fictitious_knob"
    assert main(["engine", "--from-vllm", FICTITIOUS_FLAG, "3"]) == 2
    assert f"{FICTITIOUS_FLAG} belong to --from-hf" in capsys.readouterr().err

    # the record: one field per row, so the row asks for its field ...
    fields = [f.name for f in dataclasses.fields(flags.EngineRequest)]
    assert fields != [spec.dest for spec in flags.FROM_HF_FLAGS] + list(flags.NOT_FLAGS)
    with pytest.raises(TypeError, match="fictitious_knob"):
        flags.EngineRequest.from_args(args)
    # ... and a record with it carries the flag's value (left out: the record's default)
    request_type = dataclasses.make_dataclass("Request", [("fictitious_knob", "int | None", None)],
                                              bases=(flags.EngineRequest,), frozen=True)
    request = request_type.from_args(args, gpu="H200", name=None, source="x.json")
    assert (request.fictitious_knob, request.gpu, request.source) == (3, "H200", "x.json")
    left_out = parser.parse_args(["engine", "--from-hf", "config.json"])
    assert request_type.from_args(left_out) == request_type()
    # engine_from_hf is handed it: the command that regenerates the engine (its description) names it, with no
    # edit of the builder; the rest is code of its own (no check_flags line, no engine entry yet)
    from planner.engine.hf import engine_from_hf

    with open(os.path.join(ROOT, "tests", "fixtures", "hf", "qwen3-8b.json"), encoding="utf-8") as f:
        config = json.load(f)
    with_knob = engine_from_hf(config, request_type(fictitious_knob=3, num_blocks=4096))
    without = engine_from_hf(config, flags.EngineRequest(num_blocks=4096))
    assert f"{FICTITIOUS_FLAG} 3" in with_knob["description"] and FICTITIOUS_FLAG not in without["description"]
    assert {**with_knob, "description": None} == {**without, "description": None}

    # the engine field it names is not the schema's: a new engine field is a schema property too
    with pytest.raises(KeyError):
        schema_node(tuple(fictitious_flag.field.split(".")))


def _facts_builders():
    """engine_facts and the helpers it builds the records with (planner/engine/facts.py)."""
    import ast

    with open(os.path.join(ROOT, "planner", "engine", "facts.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    records = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    builders = [node for node in tree.body if isinstance(node, ast.FunctionDef)
                and (node.name == "engine_facts" or node.name.startswith("_"))]
    return records, builders


def test_engine_facts_builds_every_record_by_keyword():
    import ast

    records, builders = _facts_builders()
    calls = [node for builder in builders for node in ast.walk(builder)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in records]
    assert {call.func.id for call in calls} >= {"EngineFacts", "Model", "LinearLayer", "MoeLayer", "AttentionLayer"}
    assert [call.func.id for call in calls if call.args] == []


def test_engine_facts_repeats_no_default_of_the_schema():
    """engine_facts reads canonical data (planner/engine/config.py applies the schema's defaults): a
    `.get(key, default)` there would be a second home of a schema default, and drift from it."""
    import ast

    _, builders = _facts_builders()
    defaulted = [ast.unparse(node) for builder in builders for node in ast.walk(builder)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                 and node.func.attr == "get" and len(node.args) > 1]
    assert defaulted == []


@pytest.mark.parametrize("asked", [
    ["--sampler", "triton"],
    ["--model-runner", "v2", "--fp8-linear-kernel", "deep_gemm"],
    ["--tp", "2", "--max-model-len", "4096", "--sampler", "flashinfer", "--kv-cache-dtype", "fp8"],
])
def test_the_description_regenerates_the_engine(asked):
    """The engine's description names the command that regenerates it: run as written, it gives the same engine.
    (--sampler, --model-runner and --fp8-linear-kernel were left out of it before: a regenerated engine differed.)"""
    import shlex

    from planner.cli import build_parser
    from planner.engine.hf import EngineRequest, engine_from_hf

    with open(os.path.join(ROOT, "tests", "fixtures", "hf", "llama-3.1-8b-instruct-fp8-block.json"),
              encoding="utf-8") as f:
        config = json.load(f)

    def engine_of(argv):
        args = build_parser("engine", with_plugins=False).parse_args(["engine", "--from-hf", "config.json", *argv])
        return engine_from_hf(config, EngineRequest.from_args(args, gpu=args.gpu, source="config.json"))

    engine = engine_of(asked)
    command = engine["description"].split("`")[1]
    assert command.startswith("warmup engine --from-hf config.json")
    words = shlex.split(command)
    assert all(words.count(flag) == 1 for flag in asked if flag.startswith("--"))  # each once, as given
    assert engine_of(shlex.split(command)[4:]) == engine
