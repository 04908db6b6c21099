"""How Dynamo keys a graph of a torch.compile(dynamic=True) function by its tensors' sizes.

With dynamic shapes every size is a symbol but for two rules (torch/fx/experimental/symbolic_shapes.py):
  * 0/1 specialization: a size of 0 or 1 is traced as that constant, and the graph guards on it;
  * duck sizing: sizes that are equal when the graph is traced share one symbol, and the graph
    guards on their equality (torch.fx.experimental._config.use_duck_shape, on by default).
So a graph traced at sizes (3, 3) does not serve (2, 3), nor (3, 3) one of (1, 3): each such call
traces a graph of its own. So the V1 runner's `update_num_computed_tokens_for_batch_change` compiled
after ready at a pair of batch sizes the warmup never gave it (vLLM 0.25, DeepSeek-V3 with MTP:
bench/RESULTS.md part AH). A plan covers such a function by giving it one call per key.
"""

from __future__ import annotations

import itertools


def size_key(sizes) -> tuple:
    """The key of one call's sizes: 0 and 1 as themselves, every other size as the symbol it shares
    with the equal sizes before it ("s0", "s1", ... in order of first appearance)."""
    symbols: dict = {}
    return tuple(n if n in (0, 1) else symbols.setdefault(n, f"s{len(symbols)}") for n in sizes)


def every_size_key(count: int) -> set:
    """Every key `count` sizes of at least 1 can have: sizes drawn from 1 .. count + 1 give each
    one 1 or a symbol, and every way symbols can be equal."""
    return {size_key(sizes) for sizes in itertools.product(range(1, count + 2), repeat=count)}
