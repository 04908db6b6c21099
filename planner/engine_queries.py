"""Pure queries over an engine config's data: which layers are block FP8, and their GEMM shapes.

The planner's stages, vLLM's choices, the executor and the vLLM bridge all ask the same
questions of the engine ("is this layer block FP8?", "the distinct block-FP8 linears", "the
expert weights of the MoE layers"); they ask them here, so the answer is written once. The
planner's functions read `engine["model"]` as planner/engine.py leaves it (schema defaults
applied); fp8_shapes, the executor's, reads the engine record's layers (planner.engine_facts). All
return small named tuples (planner/__init__.py's start-up rule: this module is on the plan path).
The planner imports it, and so may the executor and the bridge; it imports nothing of the project.
"""

from __future__ import annotations

from typing import NamedTuple


class Quant(NamedTuple):
    """A layer's weight quantization (`quant`): the method, and the block where it has one."""

    method: str                    # "none" where the engine gives no quant
    block: tuple[int, int] | None  # weight_block_size as (block N, block K); None: not block-quantized

    def is_block_fp8(self, block: int = 128) -> bool:
        """FP8 in [block, block] scale blocks (DeepGEMM's and the Triton block-FP8 GEMMs' layout)."""
        return self.method == "fp8" and self.block == (block, block)

    @property
    def is_fp8(self) -> bool:
        """FP8 of any scales, block or per-tensor."""
        return str(self.method).startswith("fp8")


class BlockFp8Linear(NamedTuple):
    """A linear whose weight is block FP8 ([block, block] scales)."""

    name: str
    n: int
    k: int
    kernel: str | None  # vLLM's kernel for it (model.linear[].kernel; planner/engine.py fills the default)


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


def quant_of(layer: dict) -> Quant:
    """The layer's quantization; a layer without `quant` is unquantized."""
    quant = layer.get("quant") or {}
    block = quant.get("weight_block_size")
    return Quant(quant.get("method", "none"), (block[0], block[1]) if block else None)


def is_block_fp8(layer: dict, block: int = 128) -> bool:
    """Whether the layer's weight is FP8 in [block, block] scale blocks (DeepGEMM's and the Triton
    block-FP8 GEMMs' only layout; vLLM's fused_moe Triton tables are for [128, 128])."""
    return quant_of(layer).is_block_fp8(block)


def block_fp8_linears(engine: dict, block: int = 128) -> list[BlockFp8Linear]:
    """The engine's block-FP8 linears of [block, block] scales, in engine order."""
    return [BlockFp8Linear(layer["name"], layer["n"], layer["k"], layer.get("kernel"))
            for layer in engine["model"]["linear"] if is_block_fp8(layer, block)]


class PlannedAround(NamedTuple):
    """A block-FP8 layer whose GEMM K is not whole scale blocks: DeepGEMM and the Triton block-FP8
    GEMMs the plans model read K one block at a time and take no other K, so every plan plans
    around it (no GEMM step; the plan's not-modelled list and lint W205 name it). vLLM serves such
    a layer where tensor parallelism does not split K, on its Triton or CUTLASS block-FP8 GEMM."""

    section: str   # "linear" or "moe"
    name: str
    field: str     # the engine field that is K: k (a linear), hidden_size (an MoE's w13)
    n: int
    k: int
    block_k: int

    def describe(self) -> str:
        return f"{self.section} {self.name} (n={self.n}, {self.field}={self.k})"


def planned_around(engine: dict, block: int = 128) -> list[PlannedAround]:
    """The engine's [block, block] block-FP8 layers whose K is no multiple of the block, in engine
    order: linears by k, MoE layers by hidden_size (w13's K; w2's K, intermediate_size, vLLM
    itself requires in whole blocks: planner/engine.py refuses it)."""
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


def fp8_shapes(linears) -> list[tuple[int, int]]:
    """Distinct (N, K) of the FP8 linears among `linears` (the engine record's model.linear),
    block-scaled or per-tensor, in engine order (what FlashInfer's FP8 GEMM autotune sees: it
    tunes by shape, whatever the scales)."""
    return list(dict.fromkeys((int(layer.n), int(layer.k)) for layer in linears if layer.quant.is_fp8))


def moe_weights(layer: dict) -> MoeWeights:
    """A fused-MoE layer's expert weights."""
    return MoeWeights(layer["name"], layer["num_experts"], layer["top_k"], layer["hidden_size"],
                      layer["intermediate_size"])


def block_fp8_moes(engine: dict, block: int = 128) -> list[MoeWeights]:
    """The engine's fused-MoE layers with block-FP8 experts of [block, block] scales, in engine order."""
    return [moe_weights(layer) for layer in engine["model"]["moe"] if is_block_fp8(layer, block)]
