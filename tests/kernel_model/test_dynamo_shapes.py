"""kernel_model/dynamo_shapes.py: the keys Dynamo gives a torch.compile(dynamic=True) graph by its
sizes, checked against Dynamo itself (on CPU, the eager backend: the keying is Dynamo's, not the
backend's)."""

from __future__ import annotations

import itertools

import pytest

from kernel_model.dynamo_shapes import every_size_key, size_key


def test_a_key_is_the_constants_0_and_1_and_one_symbol_per_distinct_larger_size():
    assert size_key((1, 1)) == (1, 1)
    assert size_key((3, 3)) == ("s0", "s0")
    assert size_key((2, 3)) == size_key((7, 5)) == ("s0", "s1")
    assert size_key((1, 2)) == (1, "s0") and size_key((2, 1)) == ("s0", 1)
    assert size_key((0, 4, 4, 9)) == (0, "s0", "s0", "s1")


def test_two_sizes_have_five_keys_and_three_have_fifteen():
    assert every_size_key(2) == {(1, 1), (1, "s0"), ("s0", 1), ("s0", "s0"), ("s0", "s1")}
    assert len(every_size_key(3)) == 15  # 1 or a symbol each, and the ways symbols can be equal


def batch_change_like(torch):
    """A function shaped like vLLM's update_num_computed_tokens_for_batch_change: a gather from the
    previous batch's tensor into this batch's, written back in place."""
    compiled = []

    def backend(gm, _inputs):
        compiled.append(gm)
        return gm.forward

    @torch.compile(dynamic=True, backend=backend)
    def correct(counts, positions, valid):
        idx = positions.clamp(min=0)
        counts[: positions.shape[0]].copy_(torch.where(positions >= 0, valid[idx], counts[: positions.shape[0]]))

    return correct, compiled


def test_one_call_per_key_leaves_nothing_to_compile_for_any_sizes():
    torch = pytest.importorskip("torch")
    import torch._dynamo

    torch._dynamo.reset()
    correct, compiled = batch_change_like(torch)
    counts = torch.zeros(64, dtype=torch.int32)

    def call(prev: int, cur: int) -> None:
        correct(counts, torch.zeros(cur, dtype=torch.int64), torch.ones(prev, dtype=torch.int32))

    for prev, cur in sorted({size_key(p): p for p in itertools.product(range(1, 4), repeat=2)}.values()):
        call(prev, cur)
    warmed = len(compiled)
    assert 1 < warmed <= len(every_size_key(2))
    for prev, cur in itertools.product(range(1, 10), repeat=2):
        call(prev, cur)
    assert len(compiled) == warmed, "a pair of sizes compiled after every key had run"


def test_equal_sizes_alone_do_not_serve_unequal_ones():
    """Why the keys matter: a graph traced at (3, 3) does not serve (2, 3)."""
    torch = pytest.importorskip("torch")
    import torch._dynamo

    torch._dynamo.reset()
    correct, compiled = batch_change_like(torch)
    counts = torch.zeros(64, dtype=torch.int32)
    correct(counts, torch.zeros(3, dtype=torch.int64), torch.ones(3, dtype=torch.int32))
    correct(counts, torch.zeros(2, dtype=torch.int64), torch.ones(3, dtype=torch.int32))
    assert len(compiled) == 2
