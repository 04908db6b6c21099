"""deep_gemm: DeepGEMM's JIT warmup as explicit (kernel, shape, M-values) steps.

NOTE: formulas from vLLM's vllm/model_executor/warmup/deep_gemm_warmup.py at 0d21b9b51
(PR #25619, the v0.11-era code) and at vLLM main 017e9f4448b7
(`_generate_optimal_warmup_m_values`, `_get_grouped_gemm_params`;
`compute_aligned_M_and_alignment` in vllm/model_executor/layers/fused_moe/deep_gemm_utils.py):
- fp8_gemm_nt runs once per distinct (N, K) of every block-FP8 linear whose block
  is [block_m, block_m] and whose N and K are multiples of block_m;
- `relax` M-values are where DeepGEMM's (block_m, block_n, waves) choice can
  change, for the device's SM count (an input: planning needs no GPU);
- the grouped contiguous MoE GEMM runs for w13 (N = 2*I, K = H) and w2 (N = H,
  K = I) of every distinct expert shape, with M-values either in block_m steps up
  to MAX_M (v0.11, 0d21b9b51) or the aligned M_sum of the relaxed request sizes
  (vLLM 017e9f4448b7, PR #43477).

`exact` plans one call per distinct DeepGEMM kernel, from the SM90 model of
kernel_model/deep_gemm.py: dense, the smallest M of each kernel over 1..max_tokens;
grouped, the smallest M_sum of each kernel among the M_sums the engine produces, which are
the grouped_m_values formula's M_sum of every request size 1..T (block_m_steps: v0.11's
round_up(T*top_k + E*(block_m-1)), T up to min(dp*max_tokens, moe_chunk_size); aligned_sum:
vLLM 017e9f4448b7's, with at most min(T*top_k, E) active experts, T up to dp*max_tokens).
Paths that sum per-expert padded counts instead (DeepEP high-throughput: expert_tokens_meta)
can produce other multiples of block_m, which only block_m_steps warms.

Every gemm and grouped_gemm step pairs the distinct kernels its M-values reach with the
first M of each (`variants`, in order of that M; in `exact` mode those first Ms are its
calls). There is no pairing where the model does not apply (a device other than SM90, an
odd SM count, a block_m that is no multiple of 16), and `exact` is refused there.
"""

from __future__ import annotations

from ...engine.facts import EngineFacts
from ...engine.queries import block_fp8_linears, block_fp8_moes, by_shape
from ...errors import location
from ..expr import cdiv, round_up
from ..steps import Gemm, GroupedGemm, Variant
from .scope import Scope
from kernel_model import deep_gemm as model

SMALL_M = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)  # "always include small cases"
BLOCK_MS = (64, 128, 256)                              # DeepGEMM's block_m candidates (SM90)
MAX_WAVES = 10


def relax_m_values(max_tokens: int, n: int, num_sms: int) -> list[int]:
    """vLLM's _generate_optimal_warmup_m_values, with the SM count as an input."""
    values = set(SMALL_M)
    for block_m in BLOCK_MS:
        for block_n in range(16, min(257, n + 1), 16):
            n_blocks = cdiv(n, block_n)
            for wave in range(1, MAX_WAVES + 1):
                m = wave * num_sms * block_m // n_blocks
                if 1 <= m <= max_tokens:
                    values.add(m)
    # Every multiple of block_m <= max_tokens; 64 divides 128 and 256, so its multiples cover all three.
    values.update(range(64, max_tokens + 1, 64))
    return sorted(values)


def dense_shapes(engine: EngineFacts, block: int, n_multiple: int | None = None, kernels=None) -> dict:
    """Distinct (N, K) of the linears DeepGEMM can take -> names of the layers sharing it.

    N must be a multiple of `n_multiple` (default: the block): vLLM 0.25's warmup asks for
    N % 128, vLLM 0.33's linear kernel selection accepts N % 64 (should_use_deepgemm_for_fp8_linear).
    `kernels`: only the layers whose kernel (model.linear[].kernel) is one of these (None: all).
    """
    n_multiple = n_multiple or block
    return by_shape(linear for linear in block_fp8_linears(engine, block)
                    if (kernels is None or linear.kernel in kernels)
                    and linear.n % n_multiple == 0 and linear.k % block == 0)


def moe_weights(engine: EngineFacts, block: int) -> dict:
    """Distinct (weight, E, N, K, top_k) of the block-FP8 MoE layers -> (relax N, layer names).

    The relax N is max(N13, N2) of the layer, as vLLM passes max(w1.size(1), w2.size(1)).
    """
    weights: dict = {}
    for moe in block_fp8_moes(engine, block):
        for weight, n, k in moe.weights:
            if weight == "w13" and k % block:  # a hidden size DeepGEMM does not take: planned around
                continue                          # (planner.engine.queries.planned_around names it)
            entry = weights.setdefault((weight, moe.num_experts, n, k, moe.top_k), (moe.relax_n, []))
            entry[1].append(moe.name)
    return weights


def expand(scope: Scope) -> list:
    max_tokens = scope.integer("max_tokens")
    block_m = scope.integer("block_m")
    num_sms = scope.integer("num_sms")
    # relax adds every multiple of 64 up to dp * max_tokens: refuse absurd sizes before building.
    scope.count_limit("max_tokens", "relaxed M-values", max_tokens * scope.names["data_parallel_size"] // 64)
    keyed = modelled(scope, num_sms, block_m)
    steps = []
    if scope.params["dense"]:
        steps += dense_steps(scope, max_tokens, block_m, num_sms, keyed)
        scope.notes.plan_around(scope.engine.facts, ("linear",))  # the layers whose K DeepGEMM does not take
    if scope.params["grouped"]:
        steps += grouped_steps(scope, max_tokens, block_m, num_sms, keyed)
        scope.notes.plan_around(scope.engine.facts, ("moe",))
    return steps


def dense_steps(scope: Scope, max_tokens: int, block_m: int, num_sms: int, keyed: bool) -> list:
    mode = scope.params["mode"]
    steps = []
    n_multiple = scope.integer("n_multiple", raw=scope.params.get("n_multiple", "block_m"), block_m=block_m)
    kernels = scope.params.get("linear_kernels")
    min_m = scope.integer("min_m", raw=scope.params.get("min_m", 1))
    for (n, k), layers in dense_shapes(scope.engine.facts, block_m, n_multiple, kernels).items():
        m_values = from_m(dense_m_values(scope, mode, max_tokens, n, num_sms), min_m, max_tokens)
        if not m_values:
            continue
        found = modelled_keys(scope, ("linear", layers[0], "k"), k, lambda: model.dense_keys(m_values, n, k, num_sms),
                              lambda: model.max_k(n, num_sms)) if keyed else {}
        # exact: the range the keys cover (--verify draws from it)
        m_values, pairing = paired(found, m_values, mode == "exact", max_tokens)
        steps.append(scope.new(Gemm, f"gemm-n{n}-k{k}", kernel="fp8_gemm_nt", backend="deep_gemm", n=n, k=k,
                               block_size=(block_m, block_m), layers=tuple(layers), m_values=m_values, **pairing))
    return steps


def grouped_steps(scope: Scope, max_tokens: int, block_m: int, num_sms: int, keyed: bool) -> list:
    steps = []
    for (weight, e, n, k, top_k), (relax_n, layers) in moe_weights(scope.engine.facts, block_m).items():
        m_values = grouped_m_values(scope, max_tokens, block_m, e, top_k, relax_n, num_sms)
        field = ("moe", layers[0], "hidden_size" if weight == "w13" else "intermediate_size")
        found = modelled_keys(
            scope, field, k, lambda: model.grouped_contiguous_keys(m_values, n, k, e, num_sms, mk_alignment=block_m),
            lambda: model.max_k(n, num_sms, grouped=True, mk_alignment=block_m)) if keyed else {}
        m_values, pairing = paired(found, m_values, scope.params["mode"] == "exact", m_values[-1])
        steps.append(scope.new(GroupedGemm, f"grouped_gemm-{weight}-e{e}-n{n}-k{k}",
                               kernel="m_grouped_fp8_gemm_nt_contiguous", backend="deep_gemm", weight=weight,
                               num_groups=e, n=n, k=k, top_k=top_k, alignment=block_m, layers=tuple(layers),
                               m_values=m_values, **pairing))
    return steps


def modelled_keys(scope: Scope, field: tuple, k: int, keys, largest_k) -> dict:
    """keys() of the DeepGEMM model, or exit 2 at the engine field behind a K it has no kernel
    for (the model raises for a K past shared memory: an engine value, not a planner bug)."""
    try:
        return keys()
    except ValueError as e:
        section, name, key = field
        where = scope.stage.where("mode")
        raise scope.engine.layer_error(
            section, name, key,
            f"{key} = {k:,}: {e}; DeepGEMM {model.VERSION}'s SM90 kernels take K up to {largest_k():,} "
            f"(in the {scope.stage.name} stage, {location(where.file, where.line)})") from None


def paired(found: dict, m_values, exact: bool, max_m: int) -> tuple[tuple, dict]:
    """(the step's M-values, its pairing fields) from the model's {key: first M}: in exact mode
    one M per key, the first, and the range the keys cover; otherwise every M, each key with its
    first M (where `warmup execute --jobs` compiles it). Without keys, no pairing."""
    if not found:
        return tuple(m_values), {}
    variants = tuple(Variant(key, m) for key, m in found.items())
    if exact:
        return tuple(found.values()), {"variants": variants, "exact": True, "max_value": max_m}
    return tuple(m_values), {"variants": variants, "exact": False}


def modelled(scope: Scope, num_sms: int, block_m: int) -> bool:
    """Whether the DeepGEMM model applies to this engine; `exact` needs it."""
    capability = scope.names["device_capability"]
    why = ("" if capability // 10 == 9 else f"the device is SM{capability}, not SM90") or \
          ("" if num_sms >= 2 and num_sms % 2 == 0 else f"num_sms {num_sms} is odd (DeepGEMM needs it even)") or \
          ("" if block_m % 16 == 0 else f"block_m {block_m} is no multiple of 16 (DeepGEMM's block sizes)") or \
          ("" if block_m >= 64 else f"block_m {block_m} is under 64 (DeepGEMM's smallest SM90 block for every M)")
    if why and scope.params["mode"] == "exact":
        raise scope.stage.where("mode").error(
            f"exact models DeepGEMM {model.VERSION}'s SM90 kernel selection only, and {why}")
    return not why


def from_m(m_values, min_m: int, max_tokens: int):
    """The M-values from `min_m` on (the M that DeepGEMM first sees behind FlashInfer's kernel,
    planner/engine/vllm_choices.py): relaxed M-values mark where DeepGEMM's config changes, so `min_m`
    itself stands for the config in force there. Unchanged for min_m 1."""
    if min_m <= 1:
        return m_values
    if min_m > max_tokens:
        return []
    if isinstance(m_values, range):
        return range(max(min_m, m_values.start), m_values.stop)
    return [min_m] + [m for m in m_values if m > min_m]


def dense_m_values(scope: Scope, mode: str, max_tokens: int, n: int, num_sms: int):
    """The M-values of one dense shape: every M (full, exact) or the relaxed ones."""
    if mode in ("full", "exact"):
        scope.count_limit("max_tokens", "full M-values (1..max_tokens)", max_tokens)
        return range(1, max_tokens + 1)
    return relax_m_values(max_tokens, n, num_sms)


def grouped_m_values(scope: Scope, max_tokens: int, block_m: int, num_experts: int, top_k: int,
                     relax_n: int, num_sms: int) -> list[int]:
    # Assumes every DP rank has the same max_num_batched_tokens, as vLLM does.
    tokens = scope.names["data_parallel_size"] * max_tokens
    exact = scope.params["mode"] == "exact"
    if scope.params["grouped_m_values"] == "block_m_steps" or exact:
        # Every multiple of block_m up to MAX_M: exact mode takes its kernels' first M_sums from
        # all of them, since paths that sum padded per-expert counts (DeepEP) reach any of them.
        chunk = scope.integer("moe_chunk_size", minimum=0)
        if chunk:
            tokens = min(tokens, chunk)
        max_m = round_up(tokens * top_k + num_experts * (block_m - 1), block_m)
        scope.count_limit("max_tokens", "grouped GEMM M-values", max_m // block_m)
        return range(block_m, max_m + 1, block_m) if exact else list(range(block_m, max_m + 1, block_m))
    return aligned_sum_m_values(tokens, top_k, num_experts, block_m, relax_n, num_sms)


def aligned_sum_m_values(tokens: int, top_k: int, num_experts: int, alignment: int, relax_n: int,
                         num_sms: int) -> list[int]:
    """vLLM's _get_grouped_gemm_params (017e9f4448b7, PR #43477): the M_sum of each relaxed
    request size.

    At most min(m*top_k, E) experts are active, each padded to the alignment. On
    Hopper DeepGEMM's theoretical alignment never shrinks below 128, so the
    alignment is block_m; the SM100 shrink is not modelled.
    """
    requests = sorted({m for m in (*relax_m_values(tokens, relax_n, num_sms), tokens) if m > 0})
    m_sums = set()
    for m in requests:
        routed = m * top_k
        m_sums.add(round_up(routed + min(routed, num_experts) * (alignment - 1), alignment))
    return sorted(m_sums)
