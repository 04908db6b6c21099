"""Pure queries over the engine record: which layers are block FP8, and their GEMM shapes.

The planner's stages, the executor and the vLLM bridge all ask the same questions of the engine
("the distinct block-FP8 linears", "the expert weights of the MoE layers", "the layers planned
around"); they ask them here, so the answer is written once. Every query takes the typed record
(planner.engine.facts.EngineFacts, `Engine.facts`) or its layer records, never the engine dict;
a layer's quantization is its record's `quant` (engine_facts.Quant). All return small named
tuples (planner/__init__.py's start-up rule: this module is on the plan path). The planner imports
it, and so may the executor and the bridge; it imports planner.engine.facts only.
"""

from __future__ import annotations

from typing import NamedTuple

from .facts import EngineFacts, LinearLayer, MoeLayer

__all__ = ["BlockFp8Linear", "MoeWeight", "MoeWeights", "PlannedAround", "block_fp8_linears",
           "block_fp8_moes", "by_shape", "fp8_shapes", "moe_weights", "planned_around"]


class BlockFp8Linear(NamedTuple):
    """A linear whose weight is block FP8 ([block, block] scales)."""

    name: str
    n: int
    k: int
    kernel: str | None  # vLLM's kernel for it (model.linear[].kernel; planner/engine/config.py fills the default)


class MoeWeight(NamedTuple):
    """One expert weight of a fused-MoE layer, as the grouped GEMM sees it (N x K per expert)."""

    weight: str  # "w13" (gate and up, fused) or "w2" (down)
    n: int
    k: int


class MoeWeights(NamedTuple):
    """A fused-MoE layer's expert weights."""

    name: str
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int

    @property
    def weights(self) -> tuple[MoeWeight, MoeWeight]:
        """w13 (N = 2 * intermediate, K = hidden) and w2 (N = hidden, K = intermediate)."""
        i, h = self.intermediate_size, self.hidden_size
        return MoeWeight("w13", 2 * i, h), MoeWeight("w2", h, i)

    @property
    def relax_n(self) -> int:
        """The N that vLLM's DeepGEMM warmup relaxes M for: max(w1.size(1), w2.size(1))."""
        return max(2 * self.intermediate_size, self.hidden_size)


def block_fp8_linears(engine: EngineFacts, block: int = 128) -> list[BlockFp8Linear]:
    """The engine's block-FP8 linears of [block, block] scales, in engine order."""
    return [BlockFp8Linear(layer.name, layer.n, layer.k, layer.kernel)
            for layer in engine.model.linear if layer.quant.is_block_fp8(block)]


class PlannedAround(NamedTuple):
    """A block-FP8 layer whose GEMM K is not whole scale blocks: DeepGEMM and the Triton block-FP8
    GEMMs the plans model read K one block at a time and take no other K, so every plan plans
    around it (no GEMM step; the plan's not-modelled list and lint W206 name it). vLLM serves such
    a layer where tensor parallelism does not split K, on its Triton or CUTLASS block-FP8 GEMM."""

    section: str   # "linear" or "moe"
    name: str
    field: str     # the engine field that is K: k (a linear), hidden_size (an MoE's w13)
    n: int
    k: int
    block_k: int

    def describe(self) -> str:
        return f"{self.section} {self.name} (n={self.n}, {self.field}={self.k})"


def planned_around(engine: EngineFacts, block: int = 128) -> list[PlannedAround]:
    """The engine's [block, block] block-FP8 layers whose K is no multiple of the block, in engine
    order: linears by k, MoE layers by hidden_size (w13's K; w2's K, intermediate_size, vLLM
    itself requires in whole blocks: planner/engine/config.py refuses it)."""
    out = [PlannedAround("linear", x.name, "k", x.n, x.k, block)
           for x in block_fp8_linears(engine, block) if x.k % block]
    out += [PlannedAround("moe", m.name, "hidden_size", 2 * m.intermediate_size, m.hidden_size, block)
            for m in block_fp8_moes(engine, block) if m.hidden_size % block]
    return out


def by_shape(linears) -> dict[tuple[int, int], list[str]]:
    """Distinct (N, K) of `linears` -> the names of the layers of that shape, in engine order
    (one GEMM step warms every layer of a shape)."""
    shapes: dict = {}
    for linear in linears:
        shapes.setdefault((linear.n, linear.k), []).append(linear.name)
    return shapes


def fp8_shapes(linears: tuple[LinearLayer, ...]) -> list[tuple[int, int]]:
    """Distinct (N, K) of the FP8 linears among `linears` (the engine record's model.linear),
    block-scaled or per-tensor, in engine order (what FlashInfer's FP8 GEMM autotune sees: it
    tunes by shape, whatever the scales)."""
    return list(dict.fromkeys((int(layer.n), int(layer.k)) for layer in linears if layer.quant.is_fp8))


def moe_weights(layer: MoeLayer) -> MoeWeights:
    """A fused-MoE layer's expert weights."""
    return MoeWeights(layer.name, layer.num_experts, layer.top_k, layer.hidden_size, layer.intermediate_size)


def block_fp8_moes(engine: EngineFacts, block: int = 128) -> list[MoeWeights]:
    """The engine's fused-MoE layers with block-FP8 experts of [block, block] scales, in engine order."""
    return [moe_weights(layer) for layer in engine.model.moe if layer.quant.is_block_fp8(block)]
