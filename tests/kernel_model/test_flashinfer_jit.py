"""FlashInfer's JIT modules (issue 24, measured on the H100 in bench/RESULTS.md part U): which ones
an engine builds at first use (kernel_model/flashinfer_jit.py), the sampler vLLM chooses
(planner/engine/vllm_choices.py `sampler`, the engine's `model.sampler`), what the plugin's plan makes of
both, and the backend that builds a module ahead of vLLM's first call."""

from __future__ import annotations

import sys
import types

import pytest

from executor.backends.base import Unavailable
from executor.backends.flashinfer_jit import FlashInferJitBackend
from kernel_model import flashinfer_jit as fj
from planner.engine.releases import sampler
from planner.plan.steps import Kernel, Variant
from tests.factories import make_engine, steps_of

FP8 = {"method": "fp8", "weight_block_size": [128, 128]}


# --- which modules ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kernels, chosen, capability, names", [
    ({"flashinfer_deep_gemm"}, "flashinfer", 90, ["fp8_blockscale_gemm_90", "sampling"]),
    ({"flashinfer_deep_gemm", None}, "triton", 90, ["fp8_blockscale_gemm_90"]),
    ({"deep_gemm"}, "flashinfer", 90, ["sampling"]),       # FlashInfer's GEMM is never called
    ({"flashinfer_deep_gemm"}, "triton", 100, []),          # its GEMM exists on SM 9.0 only
    (set(), "none", 90, []),
])
def test_the_modules_an_engine_builds(kernels, chosen, capability, names):
    modules = fj.modules(kernels, chosen, capability)
    assert [m.name for m in modules] == names
    assert all(m.key() == f"flashinfer.jit[{m.name}]" and fj.JitModule.from_spec(fj.KERNEL, m.spec()) == m
               for m in modules)


def test_a_module_spec_of_another_kernel_is_refused():
    with pytest.raises(ValueError, match="a JitModule is a flashinfer_jit_module"):
        fj.JitModule.from_spec("_topk_topp_kernel", fj.SAMPLING.spec())


# --- the sampler a release takes ---------------------------------------------------------------------

def test_the_sampler_per_release_device_and_setting():
    h100 = make_engine().facts
    assert sampler("0.25.0", h100) == ("flashinfer", "vLLM 0.25.0 with FlashInfer, as its wheel installs it")
    assert sampler("0.33.0", h100)[0] == "flashinfer"
    assert sampler(None, h100) == ("triton", "the plan names no vLLM release with FlashInfer")
    t4 = make_engine(device={"capability": "7.5"}).facts
    assert sampler("0.25.0", t4)[0] == "triton"
    few_sms = make_engine(device={"num_sms": 16}).facts
    assert (sampler("0.25.0", few_sms)[0], sampler("0.33.0", few_sms)[0]) == ("flashinfer", "triton")
    forced = make_engine(model={"sampler": "triton"}).facts
    assert sampler("0.25.0", forced) == ("triton", "the engine config sets model.sampler: triton")


# --- the plugin's plan -------------------------------------------------------------------------------

def plugin_steps(**overrides):
    return steps_of("vllm-0.25-plugin", make_engine(**overrides))


def test_the_plugin_builds_flashinfers_modules_and_keeps_the_triton_sampler_vllm_falls_back_to():
    linear = {"linear": [{"name": "qkv", "n": 6144, "k": 4096, "count": 32, "quant": FP8}]}
    default = plugin_steps(model=linear)
    jit = [s for s in default if s.stage == "flashinfer_jit"]
    assert len(jit) == 1 and isinstance(jit[0], Kernel) and jit[0].backend == "flashinfer_jit"
    assert [v.key for v in jit[0].variants] == ["flashinfer.jit[fp8_blockscale_gemm_90]", "flashinfer.jit[sampling]"]
    # FlashInfer's sampler or not, a batch with a greedy or seeded request takes vLLM's Triton kernel
    assert [s.kernel for s in default if s.stage == "sampler_kernels"] == ["_topk_topp_kernel"]
    triton = plugin_steps(model={**linear, "sampler": "triton"})
    assert [v.key for s in triton if s.stage == "flashinfer_jit" for v in s.variants] == [
        "flashinfer.jit[fp8_blockscale_gemm_90]"]
    assert [s.kernel for s in triton if s.stage == "sampler_kernels"] == ["_topk_topp_kernel"]
    pooling = plugin_steps(model={**linear, "runner": "pooling"})
    assert [v.key for s in pooling if s.stage == "flashinfer_jit" for v in s.variants] == [
        "flashinfer.jit[fp8_blockscale_gemm_90]"]  # a pooling model never samples


# --- the backend (a stand-in FlashInfer: the calls are real) -------------------------------------------

@pytest.fixture
def fake_flashinfer(monkeypatch):
    built = []

    class Spec:
        def __init__(self, name):
            self.name = name

        def build_and_load(self):
            built.append(self.name)

    jit = types.ModuleType("flashinfer.jit")
    gemm = types.ModuleType("flashinfer.jit.gemm")
    gemm.gen_fp8_blockscale_gemm_sm90_module = lambda: Spec("fp8_blockscale_gemm_90")
    sampling = types.ModuleType("flashinfer.jit.sampling")
    sampling.gen_sampling_module = lambda: Spec("sampling")
    root = types.ModuleType("flashinfer")
    for name, module in (("flashinfer", root), ("flashinfer.jit", jit), ("flashinfer.jit.gemm", gemm),
                         ("flashinfer.jit.sampling", sampling)):
        monkeypatch.setitem(sys.modules, name, module)
    return built


def jit_step(*modules):
    return Kernel("flashinfer_jit/flashinfer_jit", "flashinfer_jit", backend="flashinfer_jit", kernel=fj.KERNEL,
                  variants=tuple(Variant(m.key(), m) for m in modules))


def test_the_backend_builds_each_module_through_flashinfers_own_spec(fake_flashinfer):
    backend = FlashInferJitBackend("cpu")
    ticks = []
    step = jit_step(fj.FP8_BLOCKSCALE_GEMM, fj.SAMPLING)
    assert backend.kernel(step, step.call_values(), ticks.append) == 2
    assert fake_flashinfer == ["fp8_blockscale_gemm_90", "sampling"] == backend.built and ticks == [1, 1]


def test_the_backend_refuses_what_is_not_a_module_or_not_in_this_flashinfer(fake_flashinfer):
    backend = FlashInferJitBackend("cpu")
    other = jit_step(fj.SAMPLING).replace(kernel="_topk_topp_kernel")
    with pytest.raises(Unavailable, match="builds flashinfer_jit_module steps"):
        backend.kernel(other, other.call_values(), lambda n: None)
    missing = fj.JitModule("cutlass_fused_moe", "flashinfer.jit.moe:gen_cutlass_fused_moe_module")
    with pytest.raises(Unavailable, match="flashinfer.jit.moe:gen_cutlass_fused_moe_module is not in this FlashInfer"):
        backend.kernel(jit_step(missing), [missing], lambda n: None)
    assert fake_flashinfer == []


def test_without_flashinfer_the_backend_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    monkeypatch.setitem(sys.modules, "flashinfer.jit", None)
    ok, why = FlashInferJitBackend("cpu").available()
    assert not ok and why


# --- the engine of a live vLLM --------------------------------------------------------------------------

def test_the_live_engine_records_the_sampler_vllm_takes_here(monkeypatch):
    from vllm_bridge.engine import from_vllm as bridge

    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "0")
    assert bridge.sampler_of_this_process() == "triton"  # vLLM's own switch, GPU or not
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False)))
    assert bridge.sampler_of_this_process() is None  # no GPU here: the release's default (`auto`)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: True)))
    ops = types.ModuleType("vllm.v1.sample.ops.topk_topp_sampler")
    ops.flashinfer_sampler_supported = lambda: True
    monkeypatch.setitem(sys.modules, "vllm.v1.sample.ops.topk_topp_sampler", ops)
    assert bridge.sampler_of_this_process() == "flashinfer"  # on a GPU: vLLM's own function
    ops.flashinfer_sampler_supported = lambda: False
    assert bridge.sampler_of_this_process() == "triton"


def test_the_backend_imports_nothing_outside_flashinfer(fake_flashinfer):
    """A plan file names the generator: the backend imports FlashInfer's functions only."""
    backend = FlashInferJitBackend("cpu")
    for path in ("os:system", "flashinfer_evil.x:f", "flashinfer.jit.gemm"):
        bad = fj.JitModule("x", path)
        with pytest.raises(Unavailable, match="generator is 'flashinfer...:function'"):
            backend.kernel(jit_step(bad), [bad], lambda n: None)
