"""`warmup engine --from-hf` with vLLM's speculative settings and KV-cache dtype (issue 27, item 5):
what each flag writes, what a plan makes of it, and a one-line refusal (exit 2) for each bad value."""

from __future__ import annotations

import json

import pytest
import yaml

from planner import limits
from planner.cli import main
from planner.engine.hf import EngineRequest, HFConfigError, engine_from_hf
from planner.schema import load_schema

HF = "tests/fixtures/hf"
LLAMA = f"{HF}/llama-3.1-8b-instruct-fp8-block.json"
DEEPSEEK = f"{HF}/deepseek-v3.json"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def engine(capsys, config: str, *flags) -> dict:
    code, out, err = run(capsys, "engine", "--from-hf", config, *flags)
    assert (code, err) == (0, ""), err
    return yaml.safe_load(out)


def config(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def test_the_flags_take_the_engine_schemas_values():
    schema = load_schema("engine")
    spec = schema["properties"]["speculative"]["properties"]
    attention = schema["properties"]["model"]["properties"]["attention"]["items"]["properties"]
    assert tuple(spec["method"]["enum"]) == limits.SPECULATIVE_METHODS
    assert spec["num_speculative_tokens"]["maximum"] == limits.MAX_SPECULATIVE_TOKENS
    assert tuple(attention["kv_cache_dtype"]["enum"]) == limits.KV_CACHE_DTYPES


def test_eagle_with_three_draft_tokens(capsys, tmp_path):
    data = engine(capsys, LLAMA, "--speculative-method", "eagle", "--num-speculative-tokens", "3")
    assert data["speculative"] == {"method": "eagle", "num_speculative_tokens": 3}
    assert "--speculative-method eagle --num-speculative-tokens 3" in data["description"]
    path = tmp_path / "eagle.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, _ = run(capsys, "plan", "vllm-0.33", "-e", path, "-f", "json")
    steps = json.loads(out)["steps"]
    assert code == 0 and any(s["id"].startswith("warmup_kernels/greedy-") for s in steps)  # the second pass


def test_without_flags_nothing_changes(capsys):
    with open("plans/engines/llama-3.1-8b-fp8-h100.yaml") as f:
        shipped = yaml.safe_load(f)
    data = engine(capsys, LLAMA, "--num-blocks", "31744", "--speculative-method", "none")
    assert data["speculative"] == shipped["speculative"] == {"method": "none", "num_speculative_tokens": 0}
    assert data["model"]["attention"] == shipped["model"]["attention"]


def test_mtp_defaults_to_the_models_mtp_layers_as_vllm_does(capsys):
    assert engine(capsys, DEEPSEEK, "--tp", "8", "--gpu", "H200", "--speculative-method", "mtp")["speculative"] == \
        {"method": "mtp", "num_speculative_tokens": 1}
    data = engine(capsys, DEEPSEEK, "--tp", "8", "--gpu", "H200", "--speculative-method", "mtp",
                  "--num-speculative-tokens", "3")  # a multiple of 1 MTP layer: vLLM reuses it
    assert data["speculative"] == {"method": "mtp", "num_speculative_tokens": 3}


def test_mtp_draft_tokens_must_be_a_multiple_of_the_mtp_layers():
    two = {**config(DEEPSEEK), "num_nextn_predict_layers": 2}
    assert engine_from_hf(two, EngineRequest(tp=8, gpu="H200", speculative_method="mtp", num_speculative_tokens=4))[
        "speculative"]["num_speculative_tokens"] == 4
    with pytest.raises(HFConfigError, match="must be at most num_nextn_predict_layers = 2 or a multiple of it"):
        engine_from_hf(two, EngineRequest(tp=8, gpu="H200", speculative_method="mtp", num_speculative_tokens=3))


def test_suffix_defaults_to_vllms_tree_depth(capsys):
    assert engine(capsys, LLAMA, "--speculative-method", "suffix")["speculative"] == \
        {"method": "suffix", "num_speculative_tokens": 24}


def test_an_fp8_kv_cache_holds_twice_the_blocks(capsys):
    auto = engine(capsys, LLAMA)
    fp8 = engine(capsys, LLAMA, "--kv-cache-dtype", "fp8")
    assert {a["kv_cache_dtype"] for a in fp8["model"]["attention"]} == {"fp8"}
    assert fp8["kv_cache"]["num_blocks"] == 2 * auto["kv_cache"]["num_blocks"]
    assert "--kv-cache-dtype fp8" in fp8["description"] and "--kv-cache-dtype" not in auto["description"]
    nvfp4 = engine(capsys, LLAMA, "--kv-cache-dtype", "nvfp4")
    assert 3 * auto["kv_cache"]["num_blocks"] < nvfp4["kv_cache"]["num_blocks"] < 4 * auto["kv_cache"]["num_blocks"]


@pytest.mark.parametrize("dtype, gpu, backend", [
    ("auto", "H100", "FLASH_ATTN"), ("bfloat16", "A100", "FLASH_ATTN"), ("fp8", "H100", "FLASH_ATTN"),
    ("fp8_e4m3", "B200", "FLASH_ATTN"), ("fp8", "A100", "FLASHINFER"), ("fp8", "L40S", "FLASHINFER"),
    ("fp8_e5m2", "H100", "FLASHINFER"), ("nvfp4", "H100", "FLASHINFER"),
])
def test_the_backend_takes_the_kv_cache_dtype(capsys, dtype, gpu, backend):
    """FlashAttention takes an fp8 KV cache with FA3 / FA4 only (SM 9.x, 10.x) and never e5m2 or nvfp4
    (vLLM's flash_attn_supports_kv_cache_dtype); FlashInfer, next in vLLM's order, takes them all."""
    data = engine(capsys, LLAMA, "--kv-cache-dtype", dtype, "--gpu", gpu, "--num-blocks", "4096")
    assert {(a["kv_cache_dtype"], a["backend"]) for a in data["model"]["attention"]} == {(dtype, backend)}


def test_mla_refuses_a_kv_cache_dtype_its_backends_do_not_take(capsys):
    assert {a["kv_cache_dtype"] for a in engine(capsys, DEEPSEEK, "--tp", "8", "--gpu", "H200", "--kv-cache-dtype",
                                                  "fp8")["model"]["attention"]} == {"fp8"}
    code, out, err = run(capsys, "engine", "--from-hf", DEEPSEEK, "--tp", "8", "--gpu", "H200",
                         "--kv-cache-dtype", "fp8_e5m2")
    assert code == 2 and out == "" and err == (
        f"warmup: error: {DEEPSEEK}: --kv-cache-dtype fp8_e5m2: FLASH_ATTN_MLA, the MLA attention backend of this "
        "model, takes auto, float16, bfloat16, fp8, fp8_e4m3; vLLM refuses it\n")


@pytest.mark.parametrize("flags, message", [
    (["--speculative-method", "eagle"], "--speculative-method eagle needs --num-speculative-tokens N (1 to 256)"),
    (["--num-speculative-tokens", "3"], "--num-speculative-tokens 3 needs --speculative-method (one of ngram, "),
    (["--speculative-method", "eagle", "--num-speculative-tokens", "0"],
     "--num-speculative-tokens must be a positive integer, got 0"),
    (["--speculative-method", "ngram", "--num-speculative-tokens", "-2"],
     "--num-speculative-tokens must be a positive integer, got -2"),
    (["--speculative-method", "eagle", "--num-speculative-tokens", "257"],
     "--num-speculative-tokens 257 is over the bound of 256"),
    (["--speculative-method", "none", "--num-speculative-tokens", "2"],
     "--speculative-method none takes no draft tokens: --num-speculative-tokens must be 0 or left out, got 2"),
    (["--speculative-method", "mtp"], "--speculative-method mtp needs a model with MTP layers"),
    (["--speculative-method", "medusa", "--num-speculative-tokens", "2"],
     "argument --speculative-method: invalid choice: 'medusa'"),
    (["--speculative-method", "eagle", "--num-speculative-tokens", "two"],
     "argument --num-speculative-tokens: invalid int value: 'two'"),
    (["--kv-cache-dtype", "int4"], "argument --kv-cache-dtype: invalid choice: 'int4'"),
])
def test_bad_values_are_one_line_and_exit_2(capsys, tmp_path, flags, message):
    target = tmp_path / "engine.yaml"
    if "invalid" in message:  # argparse refuses these itself, before the command runs
        with pytest.raises(SystemExit) as exit_:
            main(["engine", "--from-hf", LLAMA, *flags, "-o", str(target)])
        code, (out, err) = exit_.value.code, capsys.readouterr()
    else:
        code, out, err = run(capsys, "engine", "--from-hf", LLAMA, *flags, "-o", target)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert not target.exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"speculative_method": "medusa", "num_speculative_tokens": 2}, "--speculative-method 'medusa' is not one of"),
    ({"kv_cache_dtype": "int4"}, "--kv-cache-dtype 'int4' is not one of auto, bfloat16"),
    ({"speculative_method": "eagle", "num_speculative_tokens": True}, "must be a positive integer, got True"),
])
def test_the_library_bounds_them_too(kwargs, message):
    with pytest.raises(HFConfigError, match=message):
        engine_from_hf(config(LLAMA), EngineRequest(**kwargs))


def test_from_vllm_takes_them_after_the_double_dash(capsys):
    code, out, err = run(capsys, "engine", "--from-vllm", "--kv-cache-dtype", "fp8", "--", "/m")
    assert code == 2 and out == "" and "--kv-cache-dtype belong to --from-hf" in err
    code, out, err = run(capsys, "engine", "--from-vllm", "--num-speculative-tokens", "0", "--", "/m")
    assert code == 2 and "--num-speculative-tokens belong to --from-hf" in err
