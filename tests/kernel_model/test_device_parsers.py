"""The one parser of a GPU's compute capability (kernel_model/device.py) and the one parser of a
vLLM release version (planner/engine/releases.py), and the places that read through them (issue 56
item 4: each identity declared once)."""

import pytest

from executor.caches import deep_gemm_rekey, flashinfer_jit
from kernel_model.device import capability_text, parse_capability, sm_capability, sm_number
from planner.cli import main
from planner.engine import releases
from planner.engine.hf import GPUS
from planner.engine.releases import parse_release

ENGINE = "plans/engines/llama-3.1-8b-fp8-h100.yaml"


# The compute capability: '9.0' text, (9, 0) pair, SM number 90.

@pytest.mark.parametrize("text,pair", [("9.0", (9, 0)), ("8.9", (8, 9)), ("10.0", (10, 0)), ("12.1", (12, 1)),
                                       ("7.5", (7, 5))])
def test_a_capability_parses_to_its_major_and_minor(text, pair):
    assert parse_capability(text) == pair


@pytest.mark.parametrize("text", ["9", "9.", ".0", "9.0.1", "9.x", "sm_90", "90", "", " 9.0", "9.0 ", "+9.0",
                                  "9,0", "\u0669.0", "9_0.0"])
def test_text_that_is_not_major_dot_minor_is_refused_by_name(text):
    # the engine schema's pattern, ^[0-9]+\.[0-9]+$: ASCII digits, one dot, nothing around them
    with pytest.raises(ValueError, match="is not MAJOR.MINOR") as info:
        parse_capability(text)
    assert repr(text) in str(info.value)


def test_every_gpu_the_planner_knows_round_trips_through_each_form():
    for facts in GPUS.values():
        pair = parse_capability(facts["capability"])
        assert capability_text(pair) == facts["capability"]
        assert sm_capability(sm_number(pair)) == pair


@pytest.mark.parametrize("pair,sm", [((9, 0), 90), ((8, 9), 89), ((10, 0), 100), ((12, 1), 121), ((7, 5), 75)])
def test_the_sm_number_joins_major_and_minor(pair, sm):
    assert sm_number(pair) == sm
    assert sm_capability(sm) == pair


def test_capability_text_writes_what_torch_and_nvml_pairs_say():
    assert capability_text((9, 0)) == "9.0"
    assert capability_text((12, 1)) == "12.1"
    assert capability_text(sm_capability(100)) == "10.0"


@pytest.mark.parametrize("text,arch", [("9.0", "90a"), ("10.0", "100a"), ("10.3", "100a"), ("10.1", "101a"),
                                       ("12.0", "120a"), ("8.9", "89a")])
def test_deep_gemm_arch_reads_the_capability_through_the_parser(text, arch):
    assert deep_gemm_rekey.arch_of(text) == arch


def test_deep_gemm_arch_refuses_a_capability_that_is_not_one():
    with pytest.raises(ValueError, match="'9' is not MAJOR.MINOR"):
        deep_gemm_rekey.arch_of("9")


@pytest.mark.parametrize("fingerprint,sms", [({"capability": "9.0"}, [90]), ({"capability": "12.0"}, [120]),
                                             ({"capability": None}, []), ({}, []), ({"capability": "9"}, []),
                                             ({"capability": "9.0a"}, [])])
def test_flashinfer_workspace_takes_the_fingerprints_capability_or_none(fingerprint, sms):
    assert flashinfer_jit.capabilities(fingerprint) == sms


def test_flashinfer_arch_directory_splits_sm_numbers_back():
    assert flashinfer_jit.arch_dir_name([90], environ={}) == "90a"
    assert flashinfer_jit.arch_dir_name([120, 100], environ={}) == "100a_120f"
    assert flashinfer_jit.arch_dir_name([89], environ={}) == "89"


def test_an_engine_file_reads_its_capability_into_the_device_record(tmp_path):
    from planner.engine.config import load_engine
    path = tmp_path / "b200.yaml"
    path.write_text(open(ENGINE).read().replace('capability: "9.0"', 'capability: "10.0"'))
    device = load_engine(str(path)).facts.device
    assert device.capability == (10, 0) and device.capability_number == 100


@pytest.mark.parametrize("written", ['"9"', '"9.x"', "9.0"])
def test_a_bad_capability_in_an_engine_file_is_one_line_at_its_line(tmp_path, capsys, written):
    text = open(ENGINE).read()
    assert text.count('capability: "9.0"') == 1
    path = tmp_path / "my-engine.yaml"
    path.write_text(text.replace('capability: "9.0"', f"capability: {written}"))
    line = next(i for i, row in enumerate(path.read_text().splitlines(), 1) if "capability:" in row)
    assert main(["plan", "vllm-0.33", "--engine", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"warmup: error: {path}:{line}: device.capability: "), err


# The vLLM release version: '0.33.0' -> (0, 33, 0).

@pytest.mark.parametrize("version,release", [("0.33.0", (0, 33, 0)), ("0.25.0", (0, 25, 0)),
                                             ("0.25.0+cu129", (0, 25, 0)), ("1.2.3rc1", (1, 2, 3)),
                                             ("0.100.10", (0, 100, 10))])
def test_a_version_parses_to_its_release(version, release):
    assert parse_release(version) == release


@pytest.mark.parametrize("version", ["0.33", "v0.33.0", "", "vllm", "0.33.x", " 0.33.0", "0..33.0"])
def test_a_version_that_names_no_release_is_refused_by_name(version):
    with pytest.raises(ValueError, match="does not start with MAJOR.MINOR.PATCH") as info:
        parse_release(version)
    assert repr(version) in str(info.value)


def test_releases_order_by_number_not_by_text(monkeypatch):
    from vllm_bridge.cli import supported_releases
    row = releases.VLLM_RELEASES["0.33.0"]
    monkeypatch.setitem(releases.VLLM_RELEASES, "0.100.0", row._replace(version="0.100.0"))
    monkeypatch.setitem(releases.VLLM_RELEASES, "0.9.0", row._replace(version="0.9.0"))
    assert releases.supported() == ["0.9.0", "0.25.0", "0.33.0", "0.100.0"]
    assert releases.newest() == "0.100.0"
    assert supported_releases() == ["0.9", "0.25", "0.33", "0.100"]
