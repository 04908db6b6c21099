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

Tuned tables are vLLM's data and are never carried here: a table is read from the directories it
is given (``TableDirs``: in vLLM's order, VLLM_TUNED_CONFIG_FOLDER's then the configs directory of
the vLLM that serves; planner/tables/vllm_moe.py says where they come from), named as
``get_config_file_name`` names it (``table_file_name``) and parsed as ``get_moe_configs`` parses it
(``parse_table``). The parity test (tests/kernel_model/test_vllm_fused_moe.py) holds the configs to vLLM's own
function for every M, with vLLM's own configs directory.
"""

from __future__ import annotations

import json
import os
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


# get_config_file_name's dtype and block_shape selectors for each quantization.
SELECTORS = {"fp8_block": f",dtype=fp8_w8a8,block_shape=[{BLOCK},{BLOCK}]", "none": ""}
REQUIRED_KEYS = CONFIG_KEYS[:4]   # num_warps and num_stages may be absent (Triton's defaults)
MAX_TABLE_BYTES = 1 << 20         # vLLM's tables are a few KiB


class TableError(ValueError):
    """A table file that is not a table vLLM could read (the message names the file)."""

    def __init__(self, file: str, reason: str):
        super().__init__(f"{file}: {reason}")
        self.file, self.reason = file, reason


def table_file_name(num_experts: int, intermediate: int, device: str, quant: str) -> str:
    """get_config_file_name's name for a layer's table on `device` (H100 / H200)."""
    return (f"E={num_experts},N={intermediate},device_name={DEVICE_NAMES[device]}{SELECTORS[quant]}.json")


def parse_table(text: str, file: str) -> tuple:
    """get_moe_configs' reading of one table: a JSON object of token count -> config, its
    ``triton_version`` dropped, keys as ints (a repeated key keeps its first place and last
    config, as vLLM's dict does). ((M, config), ...) in that order; () for an empty table."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise TableError(file, f"not JSON ({e})") from None
    if not isinstance(data, dict):
        raise TableError(file, "expected a JSON object of token count -> config")
    data.pop("triton_version", None)
    table: dict = {}
    for key, config in data.items():
        try:
            m = int(key)
        except ValueError:
            raise TableError(file, f"key {key!r} is not a token count") from None
        table[m] = _table_config(config, file, key)
    return tuple(table.items())


def _table_config(config, file: str, key: str) -> dict:
    if not isinstance(config, dict):
        raise TableError(file, f"the config of {key!r} is not an object")
    unknown = sorted(set(config) - set(CONFIG_KEYS) - {"SPLIT_K"})
    missing = [name for name in REQUIRED_KEYS if name not in config]
    if unknown or missing:
        raise TableError(file, f"the config of {key!r} has " +
                         (f"keys the model does not know: {unknown}" if unknown else f"no {missing}"))
    if config.get("SPLIT_K", 1) != 1 or any(type(v) is not int or v < 1 for v in config.values()):
        raise TableError(file, f"the config of {key!r} must hold positive integers (SPLIT_K 1)")
    return {name: config[name] for name in CONFIG_KEYS if name in config}


def read_table(path: str) -> tuple:
    """One table file, parsed (TableError naming the file when it cannot be read or parsed)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TABLE_BYTES + 1)
    except OSError as e:
        raise TableError(path, f"cannot be read ({e.strerror or e})") from None
    if len(raw) > MAX_TABLE_BYTES:
        raise TableError(path, f"over {MAX_TABLE_BYTES} bytes, not a tuned fused_moe table")
    try:
        return parse_table(raw.decode("utf-8"), path)
    except UnicodeDecodeError:
        raise TableError(path, "not UTF-8 text") from None


class TableDirs:
    """A table source: directories searched in order for a layer's table file, as
    get_moe_configs searches VLLM_TUNED_CONFIG_FOLDER and then vLLM's configs directory."""

    def __init__(self, dirs):
        self.dirs = tuple(str(d) for d in dirs)

    def find(self, name: str) -> str | None:
        """The first directory's file of that name, or None (vLLM then uses the defaults)."""
        for folder in self.dirs:
            path = os.path.join(folder, name)
            if os.path.exists(path):
                return path
        return None

    def table(self, shape: "MoeShape") -> tuple | None:
        """The layer's table rows, or None where no directory holds its file."""
        path = self.find(table_file_name(shape.num_experts, shape.intermediate, shape.device, shape.quant))
        return None if path is None else read_table(path)


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


def choose_config(M: int, num_experts: int, quant: str, table: tuple | None) -> dict:
    """try_get_optimal_moe_config for M tokens with the layer's table (rows, or None): the
    entry whose key is nearest M, the first such in the table on a tie, else the defaults."""
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


def scan_limit(shape: MoeShape, max_tokens: int, table: tuple | None) -> int:
    """The last M worth looking at: past every point where the config, naive_block_assignment
    or a cap of EM can change, each key recurs every 16 tokens (a table's last key, the
    defaults' thresholds up to 512 and, for bf16, GROUP_SIZE_M's at 129 tokens per expert)."""
    last = max(m for m, _ in table) if table else (512 if shape.quant == "fp8_block" else 129 * shape.num_experts)
    return min(max_tokens, max(last, 512, shape.num_experts) + 32)


def fused_moe_variants(shape: MoeShape, max_tokens: int, table: tuple | None) -> list[FusedMoeLaunch]:
    """One launch per compile key that forwards of 1..max_tokens tokens reach, w13 then w2 for
    each new key in order of M, with the layer's tuned table (rows, or None for the defaults)."""
    seen: set = set()
    unique: dict[str, FusedMoeLaunch] = {}
    for M in range(1, scan_limit(shape, max_tokens, table) + 1):
        config = choose_config(M, shape.num_experts, shape.quant, table)
        signature = _signature(shape, M, config)
        if signature in seen:
            continue
        seen.add(signature)
        for gemm in GEMMS:
            launch = FusedMoeLaunch(gemm, M, shape.num_experts, shape.hidden, shape.intermediate, shape.top_k,
                                    shape.quant, _config_items(config))
            unique.setdefault(launch.key(), launch)
    return list(unique.values())
