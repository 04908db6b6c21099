"""Compile keys of vLLM 0.25.0's Triton top-k/top-p sampler kernel on CUDA, in pure Python.

vLLM 0.25.0 masks logits for top-k and top-p with one Triton kernel, ``_topk_topp_kernel``
(vllm/v1/sample/ops/topk_topp_triton.py, lines 93-109), launched by
``apply_top_k_top_p_triton`` (lines 856-958). Neither vLLM 0.25's warmup nor a plan that mirrors
it reaches that kernel, so the first batches after start-up compile it (measured: 2 compiles,
13 s, after ready); vLLM 0.33 warms it itself. What the launch depends on, as read in 0.25.0:

- Who calls it: ``apply_top_k_top_p`` (vllm/v1/sample/ops/topk_topp_sampler.py, lines 345-360)
  takes the Triton path on CUDA only for ``logits.shape[0] >= 8`` rows (line 356); smaller
  batches sort in PyTorch. Model Runner V2's sampler (vllm/v1/worker/gpu/sample/sampler.py,
  lines 194 and 234, through states.py lines 94-112) and the V1 sampler call it. A batch has one
  row per sampled position: up to max_num_seqs x (1 + num_speculative_tokens) with speculative
  decoding (the target model's logits of every draft position).
- Pointers: the logits are float32 (asserted, line 881; V2 samples from a fresh float32 copy,
  sampler.py lines 156-157), as are the per-program buffer (``logits.new_empty``) and the two lookup
  tables (``logits.new_tensor``). K is the rows' top-k as int32 (states.py line 23, converted at
  line 896) and P their top-p as float32 (states.py line 24, line 902). A filter no request of
  the batch uses is None (states.py lines 97-100), and then the logits tensor itself stands in
  as its pointer (lines 898 and 904): K is float32 when top-k is off. Every pointer is a fresh
  allocation, so 16-byte aligned.
- Ints (Triton 3.6's rules, ``specialization.int_spec``): LOGITS_STRIDE_0 is the vocabulary
  size (the copy is contiguous) and BATCH_SIZE the row count, both specialized. The grid
  (min(SMs, rows) programs) is no part of a key.
- Constexprs (lines 941-958): VOCAB_SIZE, MASK_VALUE (-inf, the default), BLOCK_SIZE 8192 and
  BLOCK_SIZE_TRUNC 4096 on CUDA (256 / 128 on CPU, 4096 / 2048 on XPU: lines 934-939), and
  TOPK_ENABLED / TOPP_ENABLED, which filters the batch uses. With neither, no launch (line 886).

So for one engine the keys differ only in the filters (3 combinations) and the row count's
int class: ``constexpr=1`` needs one row, below the Triton threshold, leaving ``i32`` (8 rows)
and ``i32D`` (16 rows). ``topk_topp_variants`` lists one launch per key. Keys are stable
strings in the style of runner_kernels:

    vllm.topk_topp[VOCAB_SIZE=128256 MASK_VALUE=-inf BLOCK_SIZE=8192 BLOCK_SIZE_TRUNC=4096 TOPK_ENABLED=1 TOPP_ENABLED=0](fp32 fp32 fp32 fp32 i32 fp32 | LOGITS_STRIDE_0=i32D BATCH_SIZE=i32)
"""

from __future__ import annotations

from dataclasses import dataclass

from .specialization import int_spec

KERNEL = "_topk_topp_kernel"
KEY_PREFIX = "vllm.topk_topp"
TRITON_MIN_ROWS = 8         # apply_top_k_top_p: fewer rows take the PyTorch sort path
BLOCK_SIZE = 8192           # the CUDA tile of apply_top_k_top_p_triton
BLOCK_SIZE_TRUNC = 4096
MASK_VALUE = float("-inf")

# The kernel's parameters in declaration order, constexprs apart: the parity test
# (tests/kernel_model/test_vllm_sampler.py) holds them to vLLM 0.25.0's own definition.
PARAMETERS = ("LOGITS", "LOGITS_STRIDE_0", "BUFFER", "PERCENTILE_TO_STD_TABLE", "NORMAL_CDF_TO_SIGMA_TABLE",
              "K", "P", "BATCH_SIZE")
INTS = ("LOGITS_STRIDE_0", "BATCH_SIZE")
POINTERS = tuple(p for p in PARAMETERS if p not in INTS)
CONSTEXPRS = ("VOCAB_SIZE", "MASK_VALUE", "BLOCK_SIZE", "BLOCK_SIZE_TRUNC", "TOPK_ENABLED", "TOPP_ENABLED")

DTYPE_SHORT = {"float32": "fp32", "int32": "i32"}
# The filters a batch can use, as (top_k, top_p): both off launches nothing.
FILTERS = ((True, False), (False, True), (True, True))


def constexpr_text(value) -> str:
    """A constexpr as keys write it: booleans as 0 / 1, floats as Python prints them (-inf)."""
    if isinstance(value, bool):
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def compile_key(dtypes: dict, ints: dict, constexprs: dict) -> str:
    """The key of one launch from what Triton reads of it: each pointer's dtype name
    ("float32"), each int's value and each constexpr, by parameter name. Every pointer is
    16-byte aligned (fresh allocations), so no alignment mark appears."""
    consts = " ".join(f"{name}={constexpr_text(constexprs[name])}" for name in CONSTEXPRS)
    pointers = " ".join(DTYPE_SHORT.get(dtypes[name], dtypes[name]) for name in POINTERS)
    int_specs = " ".join(f"{name}={int_spec(int(ints[name]))}" for name in INTS)
    return f"{KEY_PREFIX}[{consts}]({pointers} | {int_specs})"


@dataclass(frozen=True)
class TopkToppLaunch:
    """One launch of ``_topk_topp_kernel`` on CUDA: a batch of ``batch_size`` rows of
    ``vocab_size`` logits, with the filters its requests use."""

    vocab_size: int
    batch_size: int
    top_k: bool
    top_p: bool

    kernel = KERNEL  # not a field: always this kernel (read as runner_kernels.Launch.kernel is)

    def pointer_dtypes(self) -> dict:
        """Each pointer's dtype: a filter that is off passes the float32 logits instead."""
        return {"LOGITS": "float32", "BUFFER": "float32", "PERCENTILE_TO_STD_TABLE": "float32",
                "NORMAL_CDF_TO_SIGMA_TABLE": "float32", "K": "int32" if self.top_k else "float32",
                "P": "float32"}

    def ints(self) -> dict:
        return {"LOGITS_STRIDE_0": self.vocab_size, "BATCH_SIZE": self.batch_size}

    def constexprs(self) -> dict:
        return {"VOCAB_SIZE": self.vocab_size, "MASK_VALUE": MASK_VALUE, "BLOCK_SIZE": BLOCK_SIZE,
                "BLOCK_SIZE_TRUNC": BLOCK_SIZE_TRUNC, "TOPK_ENABLED": self.top_k, "TOPP_ENABLED": self.top_p}

    def key(self) -> str:
        return compile_key(self.pointer_dtypes(), self.ints(), self.constexprs())

    def spec(self) -> dict:
        """The launch as plan data (``from_spec`` rebuilds it)."""
        return {"vocab_size": self.vocab_size, "batch_size": self.batch_size, "top_k": self.top_k,
                "top_p": self.top_p}

    @classmethod
    def from_spec(cls, kernel: str, spec: dict) -> "TopkToppLaunch":
        """The launch from plan data; `kernel` as runner_kernels.Launch.from_spec takes it."""
        if kernel != KERNEL:
            raise ValueError(f"{kernel}: a TopkToppLaunch launches {KERNEL}")
        return cls(int(spec["vocab_size"]), int(spec["batch_size"]), bool(spec["top_k"]), bool(spec["top_p"]))


def batch_classes(max_rows: int) -> list[int]:
    """The smallest row count of each int class a Triton batch (TRITON_MIN_ROWS..max_rows
    rows) can have: 8 (i32) and 16 (i32D) where max_rows reaches them. Sixteen
    consecutive counts hold every class a count of 2 or more can take."""
    first: dict[str, int] = {}
    for rows in range(TRITON_MIN_ROWS, min(max_rows, TRITON_MIN_ROWS + 16) + 1):
        first.setdefault(int_spec(rows), rows)
    return sorted(first.values())


def topk_topp_variants(vocab_size: int, max_rows: int) -> list[TopkToppLaunch]:
    """One launch per compile key a batch of TRITON_MIN_ROWS..max_rows rows reaches, by row
    count, then top-k only, top-p only, both. None when max_rows < TRITON_MIN_ROWS: every
    batch then takes the PyTorch path."""
    unique: dict[str, TopkToppLaunch] = {}
    for rows in batch_classes(max_rows):
        for top_k, top_p in FILTERS:
            launch = TopkToppLaunch(vocab_size, rows, top_k, top_p)
            unique.setdefault(launch.key(), launch)
    return list(unique.values())
