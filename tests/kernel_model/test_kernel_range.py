"""An engine value a kernel model has no kernel for is exit 2 at the engine field (issue 19:
an FP8 linear with a very large K passed validation, then ended in exit 3, "DeepGEMM has no
SM90 layout")."""

import pytest

from kernel_model import deep_gemm
from planner.cli import main

LLAMA = "plans/engines/llama-3.1-8b-fp8-h100.yaml"
QWEN = "plans/engines/qwen3-30b-a3b-fp8-h100.yaml"
LARGEST_K = 6_021_120


def test_max_k_is_where_the_model_stops_having_a_kernel():
    for grouped in (False, True):
        largest = deep_gemm.max_k(4096, 132, grouped=grouped)
        keys = deep_gemm.grouped_contiguous_keys if grouped else deep_gemm.dense_keys
        args = (4096, 8, 132) if grouped else (4096, 132)
        ms = range(128, 1 << 16, 128)
        for k in (largest, largest - 1000):  # every M has a kernel up to the largest K ...
            assert keys(ms, args[0], k, *args[1:])
        with pytest.raises(ValueError, match="no SM90 layout"):  # ... and none past it
            keys(ms, args[0], largest + 1, *args[1:])
    dense_ms = range(1, 1 << 16)
    assert deep_gemm.dense_keys(dense_ms, 4096, deep_gemm.max_k(4096, 132) - 1000, 132)
    assert deep_gemm.max_k(4096, 132) == LARGEST_K  # shared memory: B's scales take 4 bytes per 128 of K


@pytest.mark.parametrize("engine,old,new,where", [
    (LLAMA, "k: 14336", "k: 100000000", ":15: model.linear[3].k: k = 100,000,000: DeepGEMM has no SM90 layout "
                                        "for n=4096 k=100000000; DeepGEMM 54e2261's SM90 kernels take K up to "
                                        "6,021,120 (in the deep_gemm stage, "),
    (QWEN, "intermediate_size: 768", "intermediate_size: 100000000",
     ":17: model.moe[0].intermediate_size: intermediate_size = 100,000,000: DeepGEMM has no SM90 layout"),
    (QWEN, "hidden_size: 2048, intermediate", "hidden_size: 100000000, intermediate",
     ":17: model.moe[0].hidden_size: hidden_size = 100,000,000"),
])
@pytest.mark.parametrize("plan", ["vllm", "vllm-head"])
def test_a_k_past_the_kernels_is_exit_2_at_the_engine_field(tmp_path, capsys, plan, engine, old, new, where):
    text = open(engine).read()
    assert old in text
    path = tmp_path / "engine.yaml"
    path.write_text(text.replace(old, new, 1))
    code = main(["plan", plan, "-e", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"warmup: error: {path}{where}"), err
