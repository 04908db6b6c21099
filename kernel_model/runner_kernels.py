"""Compile keys of the reference runner's own Triton kernels (executor/runner/kernels.py).

The runner launches nine small kernels besides the GEMMs: its input preparation, the KV
write, paged prefill and decode attention, and the sampler's. Each compiles once per
key: its constexprs and launch options (chosen here, by the functions the runner's
launch wrappers call), the dtype and 16-byte alignment of every pointer, and the class
of every int argument (``int_spec``). Almost every int is a size the engine fixes
(head size, vocab, block-table width): only ``prepare_inputs``'s token counts and the
prefill attention's query tile vary from batch to batch.

``runner_variants`` enumerates every key a runner for an engine can launch, from the
engine config alone: eager batches of any token count, CUDA-graph captures, uniform
decode batches padded to a captured size. The ``runner_kernels`` stage plans one
compile-only launch (Triton's ``JITFunction.warmup``) per key, so precompile workers can
build them all in parallel with the GEMMs, before the runner even exists. The runner
checks itself against this model: under ``record_launches`` (tests) each launch's key is
computed from its real arguments (dtype, ``data_ptr() % 16``, int values), and every
such key must be one ``runner_variants`` planned.

Keys are short strings, stable across runs:

    runner.write_kv[ROW=1024 BLOCK=1024](bf16 bf16 bf16 bf16~ i64 | stride_kt=i32D stride_vt=i32D)

(``~``: a pointer not 16-byte aligned; pointers exempt from alignment specialization
show no mark either way.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .arith import cdiv
from .gemm_tables import next_power_of_2
from .specialization import int_spec

PAD_SLOT = -1
PREPARE_INPUTS_BLOCK = 128
ATTENTION_BLOCK_N = 64
VOCAB_BLOCK_MAX = 1024
SHORT_QUERY = 16  # the prefill attention's small query tile covers queries up to this long

DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64", "int8": "i8",
               "int32": "i32", "int64": "i64", "uint8": "u8", "float8_e4m3fn": "fp8e4nv"}


@dataclass(frozen=True)
class Param:
    """A non-constexpr parameter of a runner kernel: a pointer, an int or a float."""

    name: str
    role: str  # "ptr" | "int" | "float"


def ptrs(*names: str) -> tuple[Param, ...]:
    return tuple(Param(n, "ptr") for n in names)


def ints(*names: str) -> tuple[Param, ...]:
    return tuple(Param(n, "int") for n in names)


def floats(*names: str) -> tuple[Param, ...]:
    return tuple(Param(n, "float") for n in names)


@dataclass(frozen=True)
class Kernel:
    """A runner kernel's signature, the one declaration of it: its non-constexpr parameters
    in order, its constexprs, and the pointers Triton must not specialize on alignment
    (they index into persistent buffers at offsets the batch decides). The executor's
    ``@triton.jit`` definition is checked against it when it is wrapped (its parameter
    names, in this order, constexprs last), so the two cannot drift apart."""

    name: str          # the @triton.jit function
    family: str        # for reports: attention, sampler, ...
    params: tuple      # Param, ...
    constexprs: tuple
    no_align: tuple = ()

    def parameter_names(self) -> list[str]:
        """Every parameter of the kernel's definition, in order."""
        return [p.name for p in self.params] + list(self.constexprs)


_ATTENTION_CONSTEXPRS = ("HEAD_SIZE", "BLOCK_D", "QUERIES_PER_KV", "KV_ROW", "PAGE")

KERNELS = {k.name: k for k in (
    Kernel("_prepare_inputs_kernel", "inputs",
           ptrs("idx_mapping", "query_start_loc", "num_computed", "block_table", "positions", "slot_mapping",
                "seq_lens") + ints("num_tokens", "num_tokens_padded", "stride_bt"),
           ("PAGE", "BLOCK")),
    Kernel("_write_kv_kernel", "kv_write",
           ptrs("K", "V", "KCache", "VCache", "slot_mapping") + ints("stride_kt", "stride_vt"),
           ("ROW", "BLOCK")),
    Kernel("_paged_prefill_attention_kernel", "attention",
           ptrs("Q", "KCache", "VCache", "O", "query_start_loc", "seq_lens", "idx_mapping", "block_table")
           + floats("sm_scale") + ints("stride_qt", "stride_qh", "stride_ot", "stride_oh", "stride_bt"),
           _ATTENTION_CONSTEXPRS + ("BLOCK_M", "BLOCK_N"),
           ("query_start_loc", "seq_lens", "idx_mapping")),
    Kernel("_paged_decode_attention_kernel", "attention",
           ptrs("Q", "KCache", "VCache", "O", "seq_lens", "idx_mapping", "block_table")
           + floats("sm_scale") + ints("stride_qt", "stride_qh", "stride_ot", "stride_oh", "stride_bt"),
           _ATTENTION_CONSTEXPRS + ("Q_LEN", "BLOCK_R", "BLOCK_N"),
           ("seq_lens", "idx_mapping")),
    Kernel("_apply_bitmask_kernel", "bitmask",
           ptrs("logits", "bitmask", "bitmask_row") + ints("vocab_size", "stride_l", "stride_b"),
           ("BLOCK",), ("bitmask_row",)),
    Kernel("_penalties_kernel", "sampler",
           ptrs("logits", "slot", "temperature", "repetition", "frequency", "presence", "output_counts",
                "prompt_mask") + ints("vocab_size", "stride_l", "stride_c", "stride_p"),
           ("BLOCK",), ("slot", "temperature", "repetition", "frequency", "presence")),
    Kernel("_gumbel_sample_kernel", "sampler",
           ptrs("logits", "temperature", "seeds", "excluded", "out") + ints("vocab_size", "stride_l"),
           ("BLOCK",), ("temperature", "seeds", "excluded", "out")),
    Kernel("_rejection_sample_kernel", "rejection_sampler",
           ptrs("draft_tokens", "accept_probs", "uniforms", "sampled", "cu_rows", "out", "num_out")
           + ints("stride_o"),
           ("MAX_OUT", "BLOCK"), ("draft_tokens", "accept_probs", "uniforms", "sampled", "cu_rows", "num_out")),
)}


def short_name(kernel: str) -> str:
    return kernel.removeprefix("_").removesuffix("_kernel").removeprefix("paged_")


# --- launch parameters: what the runner's launch wrappers pass ------------------------------------------

@dataclass(frozen=True)
class Meta:
    """The constexprs and launch options of one launch."""

    constexprs: dict
    num_warps: int | None = None
    num_stages: int | None = None

    def options(self) -> dict:
        return {k: v for k, v in (("num_warps", self.num_warps), ("num_stages", self.num_stages)) if v is not None}


def prepare_inputs_meta(page: int) -> Meta:
    return Meta({"PAGE": page, "BLOCK": PREPARE_INPUTS_BLOCK})


def write_kv_meta(num_kv_heads: int, head_size: int) -> Meta:
    row = num_kv_heads * head_size
    return Meta({"ROW": row, "BLOCK": next_power_of_2(row)})


def prefill_block_m(max_query_len: int) -> int:
    """The query tile: 16 rows for short queries (decode-like chunks), 64 beyond."""
    return 64 if max_query_len > SHORT_QUERY else 16


def _attention_constexprs(num_heads: int, num_kv_heads: int, head_size: int, page: int) -> dict:
    return {"HEAD_SIZE": head_size, "BLOCK_D": next_power_of_2(head_size),
            "QUERIES_PER_KV": num_heads // num_kv_heads, "KV_ROW": num_kv_heads * head_size, "PAGE": page}


def prefill_attention_meta(num_heads: int, num_kv_heads: int, head_size: int, page: int,
                           max_query_len: int) -> Meta:
    c = _attention_constexprs(num_heads, num_kv_heads, head_size, page)
    return Meta({**c, "BLOCK_M": prefill_block_m(max_query_len), "BLOCK_N": ATTENTION_BLOCK_N},
                num_warps=4, num_stages=2)


def decode_attention_meta(num_heads: int, num_kv_heads: int, head_size: int, page: int, q_len: int) -> Meta:
    """One program per (request, KV head): its heads x q_len query rows in one tile of at least 16."""
    c = _attention_constexprs(num_heads, num_kv_heads, head_size, page)
    rows = max(16, next_power_of_2(num_heads // num_kv_heads * q_len))
    return Meta({**c, "Q_LEN": q_len, "BLOCK_R": rows, "BLOCK_N": ATTENTION_BLOCK_N}, num_warps=4, num_stages=2)


def vocab_meta(vocab_size: int) -> Meta:
    """The bitmask, penalties and Gumbel kernels sweep the vocabulary in blocks of this."""
    return Meta({"BLOCK": min(VOCAB_BLOCK_MAX, next_power_of_2(vocab_size))})


def rejection_meta(max_spec: int) -> Meta:
    return Meta({"MAX_OUT": max_spec + 1, "BLOCK": max(2, next_power_of_2(max_spec + 1))})


# --- keys --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Launch:
    """One launch as Triton keys it. ``args`` follow ``Kernel.params``: a pointer is its
    dtype name ("bfloat16"; "bfloat16~" when not 16-byte aligned), an int its value, a
    float its value (floats specialize on nothing but their type)."""

    kernel: str
    args: tuple
    meta: Meta = field(default_factory=lambda: Meta({}))

    def key(self) -> str:
        spec = KERNELS[self.kernel]
        ptr_specs, int_specs = [], []
        for param, arg in zip(spec.params, self.args):
            if param.role == "ptr":
                dtype, aligned = pointer(arg)
                mark = "" if aligned or param.name in spec.no_align else "~"
                ptr_specs.append(DTYPE_SHORT.get(dtype, dtype) + mark)
            elif param.role == "int":
                int_specs.append(f"{param.name}={int_spec(int(arg))}")
        consts = " ".join(f"{k}={self.meta.constexprs[k]}" for k in spec.constexprs)
        opts = "".join(f" {k[4]}{v}" for k, v in self.meta.options().items())  # " w4 s2"
        return f"runner.{short_name(self.kernel)}[{consts}{opts}](" + " ".join(ptr_specs) + " | " + " ".join(int_specs) + ")"

    def spec(self) -> dict:
        """The launch as plan data (the executor rebuilds it with ``from_spec``)."""
        out = {"args": list(self.args), "constexprs": dict(self.meta.constexprs)}
        out.update(self.meta.options())
        return out

    @classmethod
    def from_spec(cls, kernel: str, spec: dict) -> "Launch":
        return cls(kernel, tuple(spec["args"]),
                   Meta(dict(spec["constexprs"]), spec.get("num_warps"), spec.get("num_stages")))


def pointer(arg: str) -> tuple[str, bool]:
    """A pointer argument's (dtype, 16-byte aligned)."""
    return (arg[:-1], False) if arg.endswith("~") else (arg, True)


def ptr(dtype: str, aligned: bool = True) -> str:
    return dtype if aligned else dtype + "~"


# --- the engine, as the runner sizes itself -----------------------------------------------------------

@dataclass(frozen=True)
class RunnerFacts:
    """What the runner's launches depend on, as plain values of the engine config (the planner's
    planner.plan.stages.runner_kernels.runner_facts reads them). ReferenceRunner sizes its buffers
    from these same fields (block-table width, token buffer)."""

    dtype: str
    num_heads: int
    num_kv_heads: int
    head_size: int
    page: int
    vocab_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    num_spec: int

    @property
    def decode_query_len(self) -> int:
        return 1 + self.num_spec

    @property
    def max_blocks(self) -> int:
        """Block-table width: the longest request plus its draft tokens."""
        return cdiv(self.max_model_len + self.num_spec, self.page)

    @property
    def max_tokens(self) -> int:
        """The token buffer: a full prefill chunk, or a uniform decode of every sequence."""
        return max(self.max_num_batched_tokens, self.max_num_seqs * self.decode_query_len)

    def element_size(self) -> int:
        return {"float32": 4, "float64": 8}.get(self.dtype, 2)


# --- every launch the runner can make --------------------------------------------------------------------

def prepare_inputs_launch(f: RunnerFacts, num_tokens: int, num_tokens_padded: int) -> Launch:
    i32, i64 = "int32", "int64"
    return Launch("_prepare_inputs_kernel", (i32, i32, i32, i32, i64, i64, i32, num_tokens, num_tokens_padded,
                                             f.max_blocks), prepare_inputs_meta(f.page))


def token_pairs(f: RunnerFacts, graph_sizes: list[int]) -> list[tuple[int, int]]:
    """(num_tokens, num_tokens_padded) of every prepare_inputs call the runner can make, one
    per key, smallest first: eager batches (any count up to the token buffer, unpadded),
    captures (a graph size, unpadded) and uniform decode batches padded up to the next
    captured size (the runner's ``padded_size``)."""
    seen: dict[str, tuple[int, int]] = {}

    def add(t: int, p: int) -> None:
        seen.setdefault(prepare_inputs_launch(f, t, p).key(), (t, p))

    for t in (1, 2, 16):  # each int class (==1, other, %16 == 0) at its smallest count
        if t <= f.max_tokens:
            add(t, t)
    sizes = sorted(s for s in graph_sizes if s <= f.max_tokens)
    for s in sizes:
        add(s, s)
    if sizes:
        q, i = f.decode_query_len, 0
        for num_reqs in range(1, f.max_num_seqs + 1):
            t = num_reqs * q
            while i < len(sizes) and sizes[i] < t:
                i += 1
            if i == len(sizes):
                break  # larger uniform batches run eagerly: (t, t), classes above
            add(t, sizes[i])
    return sorted(seen.values())


def write_kv_launch(f: RunnerFacts) -> Launch:
    # K comes out of RoPE contiguous; V is a view of the QKV GEMM's output, starting
    # (heads + kv_heads) * head_size elements into each row.
    d, kvh = f.head_size, f.num_kv_heads
    v_offset = (f.num_heads + kvh) * d * f.element_size()
    return Launch("_write_kv_kernel", (f.dtype, ptr(f.dtype, v_offset % 16 == 0), f.dtype, f.dtype, "int64",
                                       kvh * d, (f.num_heads + 2 * kvh) * d), write_kv_meta(kvh, d))


def _attention_ints(f: RunnerFacts) -> tuple:
    hd = f.num_heads * f.head_size  # q and o are contiguous (tokens, heads, head_size)
    return (hd, f.head_size, hd, f.head_size, f.max_blocks)


def prefill_attention_launch(f: RunnerFacts, max_query_len: int, scale: float) -> Launch:
    d = f.dtype
    return Launch("_paged_prefill_attention_kernel",
                  (d, d, d, d, "int32", "int32", "int32", "int32", scale) + _attention_ints(f),
                  prefill_attention_meta(f.num_heads, f.num_kv_heads, f.head_size, f.page, max_query_len))


def decode_attention_launch(f: RunnerFacts, scale: float) -> Launch:
    d = f.dtype
    return Launch("_paged_decode_attention_kernel", (d, d, d, d, "int32", "int32", "int32", scale) + _attention_ints(f),
                  decode_attention_meta(f.num_heads, f.num_kv_heads, f.head_size, f.page, f.decode_query_len))


def sampler_launches(f: RunnerFacts) -> list[Launch]:
    v, meta = f.vocab_size, vocab_meta(f.vocab_size)
    words = cdiv(v, 32)
    out = [Launch("_apply_bitmask_kernel", ("float32", "int32", "int32", v, v, words), meta),
           Launch("_penalties_kernel", ("float32", "int32", "float32", "float32", "float32", "float32", "int32",
                                        "uint8", v, v, v, v), meta),
           Launch("_gumbel_sample_kernel", ("float32", "float32", "int64", "int32", "int32", v, v), meta)]
    if f.num_spec:
        out.append(Launch("_rejection_sample_kernel", ("int32", "float32", "float32", "int32", "int32", "int32",
                                                       "int32", f.num_spec + 1), rejection_meta(f.num_spec)))
    return out


def runner_variants(f: RunnerFacts, graph_sizes: list[int], scale: float) -> list[Launch]:
    """One launch per key the runner can reach for this engine, grouped by kernel.

    A superset where the runner's path is data-dependent: both prefill query tiles are
    planned whenever a chunk can exceed 16 tokens, the bitmask kernel whether or not
    requests use grammars. `scale` is the attention's softmax scale (a float argument:
    its value is not part of the key)."""
    launches = [prepare_inputs_launch(f, t, p) for t, p in token_pairs(f, graph_sizes)]
    launches.append(write_kv_launch(f))
    longest = min(f.max_num_batched_tokens, f.max_model_len)
    for max_query_len in (1, SHORT_QUERY + 1):
        if max_query_len <= longest:
            launches.append(prefill_attention_launch(f, max_query_len, scale))
    launches.append(decode_attention_launch(f, scale))
    launches += sampler_launches(f)
    unique: dict[str, Launch] = {}
    for launch in launches:
        unique.setdefault(launch.key(), launch)
    return list(unique.values())


# --- the runner's side: keys of real launches ------------------------------------------------------------

def observed_key(kernel: str, args: tuple, meta: Meta) -> str:
    """The key of a launch with real arguments (tensors, ints, floats), as Triton sees them:
    a tensor by its dtype and ``data_ptr() % 16``. Pure Python: it reads attributes only."""
    spec = KERNELS[kernel]
    if len(args) != len(spec.params):
        raise ValueError(f"{kernel}: {len(args)} arguments, the signature has {len(spec.params)}")
    entries = []
    for param, arg in zip(spec.params, args):
        if param.role == "ptr":
            dtype = str(arg.dtype).removeprefix("torch.")
            entries.append(ptr(dtype, arg.data_ptr() % 16 == 0))
        elif param.role == "int":
            if isinstance(arg, bool) or not isinstance(arg, int):
                raise TypeError(f"{kernel}: argument {param.name} must be an int, got {type(arg).__name__}")
            entries.append(arg)
        else:
            entries.append(float(arg))
    return Launch(kernel, tuple(entries), meta).key()
