"""executor/dynamo_stance.py: after ready, a torch.compile call that would compile runs eagerly,
with the same result; the graphs compiled before still serve the calls their guards accept."""

from __future__ import annotations

import sys

import pytest

from executor import dynamo_stance


def counting(torch):
    compiled = []

    def backend(gm, _inputs):
        compiled.append(gm)
        return gm.forward

    @torch.compile(dynamic=True, backend=backend)
    def correct(counts, valid):
        return counts[: valid.shape[0]] + valid

    return correct, compiled


def test_after_the_stance_nothing_compiles_and_results_are_the_same():
    torch = pytest.importorskip("torch")
    import torch._dynamo

    torch._dynamo.reset()
    correct, compiled = counting(torch)
    counts = torch.arange(8.0)
    correct(counts, torch.ones(3))
    assert len(compiled) == 1
    assert dynamo_stance.eager_after_ready() is None
    assert torch.equal(correct(counts, torch.ones(1)), counts[:1] + 1)  # size 1: a graph of its own, eager
    assert torch.equal(correct(counts, torch.ones(5)), counts[:5] + 1)  # the graph of before
    fresh = torch.compile(lambda x: x * 3, backend=lambda gm, _i: compiled.append(gm) or gm.forward)
    assert torch.equal(fresh(torch.ones(2)), torch.full((2,), 3.0))  # never compiled: eager too
    assert len(compiled) == 1
    torch.compiler.set_stance("default")
    correct(counts, torch.ones(1))
    assert len(compiled) == 2, "the default stance compiles it"


def test_without_torch_or_its_stance_it_says_why_not(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert dynamo_stance.eager_after_ready() == "torch is not imported in this process"
    old = type(sys)("torch")
    old.__version__ = "2.5.0"
    monkeypatch.setitem(sys.modules, "torch", old)
    assert dynamo_stance.eager_after_ready() == "torch 2.5.0 has no torch.compiler.set_stance"
