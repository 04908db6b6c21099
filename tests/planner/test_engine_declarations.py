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

from planner.engine.hf.flags import FROM_HF_FLAGS, FlagSpec
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


def resolved(node: dict) -> dict:
    """A schema node through its $ref (the bounds and enums shared in $defs)."""
    while "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


# The rows that take less than their field allows, and why; every other row's bound or choices are
# exactly the schema's at its field, so that the row (planner/limits.py's constant) and the schema
# cannot drift apart.
NARROWER_THAN_THE_SCHEMA = {
    "--tp": "a parallel size is bounded as num_seqs: the field's pos_int bound is any positive integer's",
    "--dp": "a parallel size is bounded as num_seqs: the field's pos_int bound is any positive integer's",
    "--fp8-linear-kernel": "two of the kernels vLLM picks, the two a flag decides (FlashInfer or not)",
}


@pytest.mark.parametrize("spec", [spec for spec in FROM_HF_FLAGS if spec.field], ids=lambda spec: spec.flag)
def test_every_from_hf_flag_takes_its_schema_fields_bound_or_values(spec):
    node = resolved(schema_node(tuple(spec.field.split("."))))  # KeyError: no such field
    if spec.switch:  # on or off: --ignore-memory says how num_blocks is found, not a value of it
        return
    assert spec.bound is not None or spec.choices, f"{spec.flag}: a row of a value declares its bound or choices"
    narrower = spec.flag in NARROWER_THAN_THE_SCHEMA
    if spec.choices:  # the flag takes exactly the field's names, in the schema's order
        assert set(spec.choices) < set(node["enum"]) if narrower else list(spec.choices) == node["enum"], \
            (spec.flag, node["enum"])
    if spec.bound is not None:  # the flag lets through exactly what the schema does
        assert spec.bound < node["maximum"] if narrower else spec.bound == node["maximum"], \
            (spec.flag, node["maximum"], spec.bound)


def test_the_rows_narrower_than_the_schema_are_rows():
    assert set(NARROWER_THAN_THE_SCHEMA) <= {spec.flag for spec in FROM_HF_FLAGS}


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

    row = fictitious_row()
    monkeypatch.setattr(flags, "FROM_HF_FLAGS", flags.FROM_HF_FLAGS + (row,))
    return row


def fictitious_row() -> FlagSpec:
    return FlagSpec(FICTITIOUS_FLAG, "scheduler.fictitious_knob", "a made-up count of the scheduler", bound=64,
                    metavar="N")


def test_a_fictitious_flag_is_one_row(fictitious_flag, capsys):
    """The row alone gives `warmup engine` its argument (an int, as the row's bound says), puts it among
    the flags --from-vllm refuses, and EngineRequest.from_args reads it. The record's field is the other
    line a flag needs (EngineRequest is a dataclass: without the field the request cannot be built, and
    test_a_flag_is_one_row_and_one_field_of_the_engine_request fails); with it the value reaches
    engine_from_hf, checked by the row (check_flags: test_a_fictitious_flag_is_checked_by_its_row) and
    named in the regenerating command. What the builder writes into the engine dict is code of its own,
    and the engine field is the schema's."""
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
    # edit of the builder; what the engine dict holds for it is code of its own (no engine entry yet)
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


def _with_row(monkeypatch, row):
    """`row` appended to FROM_HF_FLAGS, and the request record with its field (the line beside the row),
    put where the command line builds its request (planner.engine.hf.EngineRequest)."""
    import dataclasses

    from planner.engine import hf
    from planner.engine.hf import flags

    monkeypatch.setattr(flags, "FROM_HF_FLAGS", flags.FROM_HF_FLAGS + (row,))
    request_type = dataclasses.make_dataclass("Request", [(row.dest, "object", None)],
                                              bases=(flags.EngineRequest,), frozen=True)
    monkeypatch.setattr(hf, "EngineRequest", request_type)
    return request_type


def test_a_fictitious_flag_is_checked_by_its_row(monkeypatch, capsys):
    """check_flags checks each row by its declaration, so the row's bound is the check with no line of
    check_flags: over the bound or not a positive integer, the one-line refusal (exit 2) every flag has;
    within it, the checked value is the flag's attribute of Flags."""
    from planner.cli import main
    from planner.engine.hf.flags import check_flags

    request_type = _with_row(monkeypatch, fictitious_row())
    hf_config = os.path.join(ROOT, "tests", "fixtures", "hf", "qwen3-8b.json")
    for value, message in (("65", f"{FICTITIOUS_FLAG} 65 is over the bound of 64 (schemas/engine.schema.json "
                                  "says why)"),
                           ("0", f"{FICTITIOUS_FLAG} must be a positive integer, got 0")):
        assert main(["engine", "--from-hf", hf_config, FICTITIOUS_FLAG, value]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert main(["engine", "--from-hf", hf_config, "--num-blocks", "4096", FICTITIOUS_FLAG, "64"]) == 0
    assert f"{FICTITIOUS_FLAG} 64" in capsys.readouterr().out  # the regenerating command names it
    assert check_flags(request_type(fictitious_knob=64)).fictitious_knob == 64
    assert check_flags(request_type()).fictitious_knob is None  # left out: the row's default


@pytest.mark.parametrize("row,given,checked,refused,message", [
    (FlagSpec("--fictitious-name", "model.fictitious_name", "a made-up name", choices=("auto", "fast"),
              default="auto"), None, "auto", "slow",
     "--fictitious-name 'slow' is not one of auto, fast (schemas/engine.schema.json)"),
    (FlagSpec("--fictitious-name", "model.fictitious_name", "a made-up name", choices=("auto", "fast")),
     "fast", "fast", 3, "--fictitious-name 3 is not one of auto, fast (schemas/engine.schema.json)"),
    (FlagSpec("--fictitious-count", "model.fictitious_count", "a made-up count", bound=8, required=True),
     8, 8, None, "--fictitious-count must be a positive integer, got None"),
    (FlagSpec("--fictitious-switch", "model.fictitious_switch", "a made-up switch", switch=True),
     None, False, None, None),
], ids=["choices, default", "choices", "required count", "switch"])
def test_each_declaration_of_a_fictitious_row_is_its_check(monkeypatch, row, given, checked, refused, message):
    """A row's choices, default, required and switch are its check, as the real rows' are."""
    from planner.engine.hf.flags import check_flags
    from planner.engine.hf.source import HFConfigError

    request_type = _with_row(monkeypatch, row)
    assert getattr(check_flags(request_type(**{row.dest: given})), row.dest) == checked
    if message is None:
        return
    with pytest.raises(HFConfigError) as refusal:
        check_flags(request_type(**{row.dest: refused}, source="config.json"))
    assert str(refusal.value) == f"config.json: {message}"


def test_check_flags_names_no_flag():
    """check_flags loops over the rows: no flag, and no field of the request, is written in it (a new
    row would otherwise need a line there)."""
    import ast
    import inspect

    from planner.engine.hf.flags import check_flags

    tree = ast.parse(inspect.getsource(check_flags))
    strings = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not [text for text in strings if "--" in text]
    assert not attributes & {spec.dest for spec in FROM_HF_FLAGS}


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
