"""Compile keys of vLLM's Triton ``fused_moe_kernel`` on Hopper, in pure Python.

On SM 9.0 under tensor parallelism (no expert parallelism), vLLM 0.25.0 and 0.33.0 run a
block-FP8 ([128, 128]) MoE layer, and an unquantized bf16 one, on Triton: the FP8 MoE oracle
(model_executor/layers/fused_moe/oracle/fp8.py, ``_get_priority_backends``) moves TRITON to the
front for block FP8 when the EP size is 1 (FlashInfer CUTLASS MoE when it is above 1), and the
unquantized oracle moves FlashInfer's MoE backends behind TRITON on SM 9.x. The experts class,
``TritonExperts.apply`` (experts/triton_moe.py), launches one kernel twice per forward of M tokens:

- w13: A = the M x hidden activations (FP8 with 1 x 128 scales, per_token_group_quant_fp8's
  row-major layout), B = w13 (E, 2I, hidden), C = (M, top_k, 2I), no router weight;
- w2: A = the (M * top_k) x I activations of silu_and_mul (FP8 through
  silu_and_mul_per_block_quant, row-major scales), B = w2 (E, hidden, I), C = (M, top_k, hidden),
  the router weights multiplied in, top_k = 1.

Both take one config, ``try_get_optimal_moe_config(w1, w2, top_k, dtype, M, block)``: the tuned
table named ``E=<E>,N=<I>,device_name=<GPU>[,dtype=fp8_w8a8,block_shape=[128,128]].json`` if vLLM
ships one (the entry whose key is nearest M, the first such in the file on a tie), else
``get_default_config`` (its block-FP8 branch and its bf16 branch are ``default_config`` here). What
changes with M besides the config (``invoke_fused_moe_triton_kernel``, ``_prepare_expert_assignment``,
``moe_align_block_size``):

- naive_block_assignment (a constexpr): M * top_k * 4 <= E skips the alignment; then
  sorted_token_ids is None and EM = M * top_k * BLOCK_SIZE_M;
- EM, else: the sorted ids' length, numel + E * (BLOCK_SIZE_M - 1) (capped at numel * BLOCK_SIZE_M
  when numel < E), capped again at M * top_k * BLOCK_SIZE_M when A has fewer rows than BLOCK_SIZE_M;
- num_valid_tokens = M * top_k; with EM, the only ints that vary (``int_spec``: constexpr=1,
  i32, i32D).

Every other int is a stride or size the layer fixes; SWAP_AB (FP8 on SM 9.0 with BLOCK_SIZE_M < 64
and BLOCK_SIZE_N >= 64) and BLOCK_SIZE_K = min(BLOCK_SIZE_K, 128) under block quantization follow
the config. So each (config, naive) span of M gives at most four keys a GEMM (num_valid_tokens and
EM multiples of 16 or not), and ``fused_moe_variants`` finds them from one scan of 1..max_tokens
by a cheap signature, building a key only for a new one. Keys are stable strings:

    vllm.fused_moe[w13 BLOCK_SIZE_M=16 ... naive_block_assignment=0 SWAP_AB=1 warps=4 stages=3](fp8e4nv ... | N=i32D ... EM=i32D num_valid_tokens=i32)

Tuned tables are vLLM's data: ``TABLES`` carries the two the shipped engines load (identical in
0.25.0 and 0.33.0); ``TUNED_NOT_CARRIED`` names every other H100/H200 table vLLM ships for these two
dtypes, for which ``config_table`` raises ``TableNotCarried`` (the stage then plans nothing for
that layer rather than the default configs vLLM would not use). The parity test
(tests/test_vllm_fused_moe.py) holds the configs to vLLM's own function for every M.
"""

from __future__ import annotations

from dataclasses import dataclass

from .specialization import int_spec

KERNEL = "fused_moe_kernel"
KEY_PREFIX = "vllm.fused_moe"
BLOCK = 128                     # the [128, 128] weight blocks; 1 x 128 activation groups
CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
QUANTS = ("fp8_block", "none")  # block-FP8 [128, 128], or bf16 weights and activations
GEMMS = ("w13", "w2")
# vLLM's device_name in table names (get_config_file_name) for the engine's device names.
DEVICE_NAMES = {"H100": "NVIDIA_H100_80GB_HBM3", "H200": "NVIDIA_H200"}

# The kernel's parameters in declaration order, constexprs apart (the parity test holds them to
# vLLM's definition; 0.33.0 adds the constexpr USE_TD, False unless VLLM_TRITON_USE_TD=1).
POINTERS = ("a_ptr", "b_ptr", "c_ptr", "b_bias_ptr", "a_scale_ptr", "b_scale_ptr", "topk_weights_ptr",
            "sorted_token_ids_ptr", "expert_ids_ptr", "num_tokens_post_padded_ptr")
INTS = ("N", "K", "EM", "num_valid_tokens", "stride_am", "stride_ak", "stride_be", "stride_bk", "stride_bn",
        "stride_cm", "stride_cn", "stride_asm", "stride_ask", "stride_bse", "stride_bsk", "stride_bsn",
        "stride_bbe", "stride_bbn")
CONSTEXPRS = ("group_n", "group_k", "naive_block_assignment", "BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K",
              "GROUP_SIZE_M", "SPLIT_K", "MUL_ROUTED_WEIGHT", "top_k", "compute_type", "use_fp8_w8a8",
              "use_int8_w8a8", "use_int8_w8a16", "per_channel_quant", "HAS_BIAS", "SWAP_AB")


def _rows(*rows: tuple) -> tuple:
    """A table as ((M key, config dict), ...) in the file's order."""
    return tuple((m, dict(zip(CONFIG_KEYS, values))) for m, *values in rows)


# (E, N, device, quant) -> table. Read from vLLM 0.25.0's fused_moe/configs (0.33.0's are the same).
TABLES = {
    (256, 256, "H200", "fp8_block"): _rows(
        (1, 8, 32, 128, 1, 4, 4), (2, 8, 32, 128, 1, 4, 5), (4, 8, 64, 128, 1, 4, 4),
        (8, 16, 64, 128, 32, 4, 3), (16, 16, 128, 128, 16, 4, 3), (24, 16, 128, 128, 16, 4, 4),
        (32, 16, 128, 128, 16, 4, 5), (48, 16, 128, 128, 64, 4, 3), (64, 16, 128, 128, 64, 4, 3),
        (96, 16, 128, 128, 16, 4, 3), (128, 16, 128, 128, 32, 4, 3), (256, 16, 128, 128, 32, 4, 3),
        (512, 16, 128, 128, 16, 4, 3), (1024, 64, 128, 128, 32, 4, 4), (1536, 64, 128, 128, 32, 4, 4),
        (2048, 64, 128, 128, 32, 4, 4), (3072, 64, 128, 128, 32, 4, 4), (4096, 64, 128, 128, 16, 4, 3)),
    (8, 7168, "H100", "none"): _rows(
        (1, 16, 64, 128, 64, 4, 4), (2, 16, 128, 128, 32, 8, 4), (4, 16, 32, 256, 16, 4, 4),
        (8, 16, 128, 128, 32, 8, 4), (16, 16, 128, 128, 1, 4, 4), (24, 16, 128, 128, 1, 4, 4),
        (32, 16, 128, 128, 1, 4, 4), (48, 32, 128, 128, 1, 4, 4), (64, 32, 128, 128, 1, 4, 4),
        (96, 32, 128, 128, 64, 4, 4), (128, 64, 128, 128, 1, 4, 4), (256, 64, 128, 128, 64, 4, 4),
        (512, 64, 256, 64, 32, 4, 4), (1024, 128, 256, 64, 16, 8, 4), (1536, 128, 256, 64, 64, 8, 4),
        (2048, 128, 256, 64, 32, 8, 4), (3072, 128, 256, 64, 64, 8, 4), (4096, 128, 256, 64, 16, 8, 4)),
}

# Other tables vLLM 0.25.0 / 0.33.0 ship for H100 / H200 and these two dtypes: (E, N, device, quant).
_F, _U = "fp8_block", "none"
TUNED_NOT_CARRIED = frozenset(
    [(1, 3072, "H100", _U), (16, 1024, "H200", _U), (16, 1344, "H100", _U), (16, 1792, "H100", _U),
     (16, 2048, "H200", _U), (16, 2688, "H100", _U), (16, 4096, "H200", _F), (32, 1792, "H100", _U),
     (32, 2048, "H200", _F), (62, 256, "H100", _U), (62, 512, "H100", _U), (72, 384, "H100", _U),
     (72, 768, "H100", _U), (128, 96, "H200", _U), (128, 384, "H200", _F), (128, 512, "H200", _F),
     (128, 768, "H200", _F), (128, 928, "H100", _U), (128, 1024, "H200", _U), (128, 1856, "H100", _U),
     (128, 2880, "H100", _U), (256, 128, "H100", _F), (256, 384, "H100", _F), (256, 512, "H100", _U),
     (256, 512, "H200", _F), (384, 128, "H200", _F), (512, 64, "H200", _U), (512, 128, "H100", _F),
     (512, 256, "H100", _F)]
    + [(8, n, d, _U) for n in (1792, 2048, 3584, 4096) for d in ("H100", "H200")]
    + [(8, 7168, "H200", _U), (8, 14336, "H200", _U), (8, 2048, "H200", _F)]
    + [(64, n, d, _U) for n in (320, 640, 1280) for d in ("H100", "H200")]
    + [(64, 1536, "H100", _U), (64, 2560, "H200", _U), (128, 192, "H100", _U), (128, 192, "H200", _U),
       (128, 384, "H100", _U), (128, 384, "H200", _U), (128, 512, "H100", _U), (128, 512, "H200", _U),
       (128, 768, "H200", _U)]
    + [(512, n, d, _U) for n in (128, 256, 512) for d in ("H100", "H200")])


class TableNotCarried(LookupError):
    """vLLM ships a tuned table for this layer that kernel_model does not carry."""


def config_table(num_experts: int, intermediate: int, device: str, quant: str) -> tuple | None:
    """The tuned table vLLM loads for a layer on `device` (H100 / H200), or None (defaults)."""
    key = (num_experts, intermediate, device, quant)
    if key in TUNED_NOT_CARRIED:
        raise TableNotCarried(f"vLLM's tuned fused_moe table E={num_experts},N={intermediate} for {device} "
                              f"({quant}) is not carried by kernel_model.vllm_fused_moe")
    return TABLES.get(key)


def default_config(M: int, num_experts: int, quant: str) -> dict:
    """get_default_config on CUDA (not ROCm), without VLLM_BATCH_INVARIANT."""
    if quant == "fp8_block":
        small = M <= 8  # BLOCK 128 is a multiple of 64: the narrow N tile for decode-like batches
        return {"BLOCK_SIZE_M": 16 if M <= 64 else 64, "BLOCK_SIZE_N": 64 if small else BLOCK,
                "BLOCK_SIZE_K": BLOCK, "GROUP_SIZE_M": 1 if M <= 16 else 32, "SPLIT_K": 1, "num_warps": 4,
                "num_stages": (4 if M <= 4 else 3) if small else 3}
    block_m = 16 if M <= 32 else 32 if M <= 96 else 64 if M <= 512 else 128
    return {"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": 64 if M <= 64 else 128, "BLOCK_SIZE_K": 128 if M <= 64 else 64,
            "GROUP_SIZE_M": 16 if M // max(num_experts, 1) > 128 else 1, "SPLIT_K": 1,
            "num_warps": 4 if M <= 128 else 8, "num_stages": 4 if M <= 32 else 3}


def choose_config(M: int, num_experts: int, intermediate: int, device: str, quant: str) -> dict:
    """try_get_optimal_moe_config for M tokens: the nearest tuned entry, else the defaults."""
    table = config_table(num_experts, intermediate, device, quant)
    if not table:
        return default_config(M, num_experts, quant)
    best = min(table, key=lambda row: abs(row[0] - M))  # min keeps the first of equals, as vLLM's
    return dict(best[1])


def _config_items(config: dict) -> tuple:
    """A config as hashable launch data: its six keys in order (SPLIT_K is always 1)."""
    return tuple((name, int(config[name])) for name in CONFIG_KEYS if name in config)


@dataclass(frozen=True)
class FusedMoeLaunch:
    """One launch of ``fused_moe_kernel``: GEMM `gemm` of a layer (E experts, hidden size,
    intermediate size I per rank, top_k) for a forward of `tokens` tokens, with its config."""

    gemm: str
    tokens: int
    num_experts: int
    hidden: int
    intermediate: int
    top_k: int
    quant: str
    config: tuple  # ((name, value), ...) in CONFIG_KEYS order

    kernel = KERNEL  # not a field, as vllm_sampler.TopkToppLaunch.kernel

    @property
    def numel(self) -> int:
        return self.tokens * self.top_k

    @property
    def block_m(self) -> int:
        return dict(self.config)["BLOCK_SIZE_M"]

    def shape(self) -> tuple:
        """(N, K, A's rows, the kernel's top_k) as invoke_fused_moe_triton_kernel sees them."""
        if self.gemm == "w13":
            return 2 * self.intermediate, self.hidden, self.tokens, self.top_k
        return self.hidden, self.intermediate, self.numel, 1

    def naive(self) -> bool:
        """_prepare_expert_assignment's low-latency path (no expert map under TP)."""
        return self.numel * 4 <= self.num_experts

    def em(self) -> int:
        if self.naive():
            return self.numel * self.block_m
        padded = self.numel + self.num_experts * (self.block_m - 1)
        if self.numel < self.num_experts:
            padded = min(self.numel * self.block_m, padded)
        _, _, rows, kernel_top_k = self.shape()
        if rows < self.block_m:
            padded = min(padded, rows * kernel_top_k * self.block_m)
        return padded

    def ints(self) -> dict:
        n, k, _, _ = self.shape()
        fp8 = self.quant == "fp8_block"
        return {"N": n, "K": k, "EM": self.em(), "num_valid_tokens": self.numel, "stride_am": k, "stride_ak": 1,
                "stride_be": n * k, "stride_bk": 1, "stride_bn": k, "stride_cm": n, "stride_cn": 1,
                "stride_asm": k // BLOCK if fp8 else 0, "stride_ask": 1 if fp8 else 0,
                "stride_bse": (n // BLOCK) * (k // BLOCK) if fp8 else 0, "stride_bsk": 1 if fp8 else 0,
                "stride_bsn": k // BLOCK if fp8 else 0, "stride_bbe": 0, "stride_bbn": 0}

    def pointer_dtypes(self) -> dict:
        """Each pointer's dtype, None where vLLM passes None (Triton keys it as a constant)."""
        fp8 = self.quant == "fp8_block"
        operand = "fp8e4nv" if fp8 else "bf16"
        return {"a_ptr": operand, "b_ptr": operand, "c_ptr": "bf16", "b_bias_ptr": None,
                "a_scale_ptr": "fp32" if fp8 else None, "b_scale_ptr": "fp32" if fp8 else None,
                "topk_weights_ptr": "fp32" if self.gemm == "w2" else None,
                "sorted_token_ids_ptr": None if self.naive() else "i32", "expert_ids_ptr": "i32",
                "num_tokens_post_padded_ptr": "i32"}

    def constexprs(self) -> dict:
        config = dict(self.config)
        fp8 = self.quant == "fp8_block"
        _, _, _, kernel_top_k = self.shape()
        block_k = min(config["BLOCK_SIZE_K"], BLOCK) if fp8 else config["BLOCK_SIZE_K"]
        return {"group_n": BLOCK if fp8 else 0, "group_k": BLOCK if fp8 else 0,
                "naive_block_assignment": self.naive(), "BLOCK_SIZE_M": config["BLOCK_SIZE_M"],
                "BLOCK_SIZE_N": config["BLOCK_SIZE_N"], "BLOCK_SIZE_K": block_k,
                "GROUP_SIZE_M": config["GROUP_SIZE_M"], "SPLIT_K": 1, "MUL_ROUTED_WEIGHT": self.gemm == "w2",
                "top_k": kernel_top_k, "compute_type": "bf16", "use_fp8_w8a8": fp8, "use_int8_w8a8": False,
                "use_int8_w8a16": False, "per_channel_quant": False, "HAS_BIAS": False,
                "SWAP_AB": fp8 and config["BLOCK_SIZE_M"] < 64 and config["BLOCK_SIZE_N"] >= 64}

    def options(self) -> dict:
        """Triton's launch options from the config (Triton's defaults where a config has none)."""
        config = dict(self.config)
        return {"num_warps": config.get("num_warps", 4), "num_stages": config.get("num_stages", 3)}

    def key(self) -> str:
        return compile_key(self.gemm, self.pointer_dtypes(), self.ints(), self.constexprs(), self.options())

    def spec(self) -> dict:
        """The launch as plan data (``from_spec`` rebuilds it)."""
        return {"gemm": self.gemm, "tokens": self.tokens, "num_experts": self.num_experts, "hidden": self.hidden,
                "intermediate": self.intermediate, "top_k": self.top_k, "quant": self.quant,
                "config": dict(self.config)}

    @classmethod
    def from_spec(cls, kernel: str, spec: dict) -> "FusedMoeLaunch":
        if kernel != KERNEL:
            raise ValueError(f"{kernel}: a FusedMoeLaunch launches {KERNEL}")
        if spec["gemm"] not in GEMMS or spec["quant"] not in QUANTS:
            raise ValueError(f"fused_moe launch: gemm must be one of {GEMMS} and quant one of {QUANTS}")
        return cls(str(spec["gemm"]), int(spec["tokens"]), int(spec["num_experts"]), int(spec["hidden"]),
                   int(spec["intermediate"]), int(spec["top_k"]), str(spec["quant"]),
                   _config_items(spec["config"]))


def _text(value) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def compile_key(gemm: str, dtypes: dict, ints: dict, constexprs: dict, options: dict) -> str:
    """The key of one launch from what Triton reads of it (every pointer is a fresh or
    workspace allocation, so 16-byte aligned: no alignment mark). `gemm` only labels it."""
    consts = " ".join(f"{name}={_text(constexprs[name])}" for name in CONSTEXPRS)
    pointers = " ".join(dtypes[name] or "none" for name in POINTERS)
    int_specs = " ".join(f"{name}={int_spec(int(ints[name]))}" for name in INTS)
    return (f"{KEY_PREFIX}[{gemm} {consts} warps={options['num_warps']} stages={options['num_stages']}]"
            f"({pointers} | {int_specs})")


@dataclass(frozen=True)
class MoeShape:
    """One fused-MoE layer as the kernel sees it on one rank."""

    num_experts: int
    hidden: int
    intermediate: int
    top_k: int
    quant: str
    device: str


def _signature(shape: MoeShape, M: int, config: dict) -> tuple:
    """What a key of either GEMM can depend on at M tokens besides the layer (cheap to compare)."""
    block_m, numel = config["BLOCK_SIZE_M"], M * shape.top_k
    return (tuple(sorted(config.items())), numel * 4 <= shape.num_experts, M < block_m, numel < block_m,
            numel % 16 == 0, numel == 1, (numel + shape.num_experts * (block_m - 1)) % 16 == 0,
            numel < shape.num_experts, numel > 2**31 - 1)


def scan_limit(shape: MoeShape, max_tokens: int) -> int:
    """The last M worth looking at: past every point where the config, naive_block_assignment
    or a cap of EM can change, each key recurs every 16 tokens (a table's last key, the
    defaults' thresholds up to 512 and, for bf16, GROUP_SIZE_M's at 129 tokens per expert)."""
    table = config_table(shape.num_experts, shape.intermediate, shape.device, shape.quant)
    last = max(m for m, _ in table) if table else (512 if shape.quant == "fp8_block" else 129 * shape.num_experts)
    return min(max_tokens, max(last, 512, shape.num_experts) + 32)


def fused_moe_variants(shape: MoeShape, max_tokens: int) -> list[FusedMoeLaunch]:
    """One launch per compile key that forwards of 1..max_tokens tokens reach, w13 then w2 for
    each new key in order of M (raises TableNotCarried; see config_table)."""
    seen: set = set()
    unique: dict[str, FusedMoeLaunch] = {}
    for M in range(1, scan_limit(shape, max_tokens) + 1):
        config = choose_config(M, shape.num_experts, shape.intermediate, shape.device, shape.quant)
        signature = _signature(shape, M, config)
        if signature in seen:
            continue
        seen.add(signature)
        for gemm in GEMMS:
            launch = FusedMoeLaunch(gemm, M, shape.num_experts, shape.hidden, shape.intermediate, shape.top_k,
                                    shape.quant, _config_items(config))
            unique.setdefault(launch.key(), launch)
    return list(unique.values())
