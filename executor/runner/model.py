"""A few decoder layers with random seeded weights, sized from the engine config.

Llama-style: RMSNorm, RoPE (neox), GQA attention over a paged KV cache, then a
SiLU MLP or a top-k MoE. Linear layers whose engine entry is block-FP8 run the
executor's ``fp8_gemm`` (activations quantized per 1x128 group), MoE experts the
grouped ``grouped_fp8_gemm`` over a contiguous expert-sorted layout; unquantized
layers (Mixtral, the router, lm_head) use torch matmuls. Every shape is static
in the token count, so the decode forward can be captured in a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from executor.kernels.fp8_gemm import fp8_gemm
from executor.kernels.grouped_gemm import grouped_fp8_gemm
from executor.kernels.reference import quantize_fp8_block, quantize_fp8_per_token_group
from kernel_model.arith import cdiv
from planner.engine.facts import EngineFacts, LinearLayer, MoeLayer

from . import kernels

MOE_BLOCK_M = 128  # per-expert row alignment of the grouped GEMM (the plan's triton_gemm block_m)


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    num_layers: int
    scale: float
    fp8: dict            # layer role -> block-FP8 weights? (qkv_proj, o_proj, mlp, experts)
    intermediate_size: int = 0  # dense MLP, per rank
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate_size: int = 0
    rope_theta: float = 1e6
    eps: float = 1e-6
    table_device: str | None = None  # whose tuned GEMM tables the kernels read: the engine's device

    @classmethod
    def from_engine(cls, engine: EngineFacts, num_layers: int = 2) -> "ModelConfig":
        model = engine.model
        if not model.hidden_size:
            raise ValueError("the reference runner needs model.hidden_size in the engine config")
        if not model.attention:
            raise ValueError("the reference runner needs an attention layer in the engine config")
        attn = model.attention[0]
        if attn.is_mla:
            raise ValueError(f"attention {attn.name!r}: MLA (head_size_v != head_size) is not supported "
                             "by the reference runner")
        linear = {layer.name: layer for layer in model.linear}
        fp8 = {name: _is_block_fp8(linear.get(name)) for name in ("qkv_proj", "o_proj")}
        fields = dict(vocab_size=model.vocab_size, hidden_size=model.hidden_size, num_heads=attn.num_heads,
                      num_kv_heads=attn.num_kv_heads, head_size=attn.head_size, num_layers=num_layers,
                      scale=attn.softmax_scale)
        if model.moe:
            moe = model.moe[0]
            fp8["experts"] = _is_block_fp8(moe)
            fields.update(num_experts=moe.num_experts, top_k=moe.top_k, moe_intermediate_size=moe.intermediate_size)
        elif "gate_up_proj" in linear and "down_proj" in linear:
            fp8["mlp"] = _is_block_fp8(linear["gate_up_proj"]) and _is_block_fp8(linear["down_proj"])
            fields["intermediate_size"] = linear["down_proj"].k
        else:
            raise ValueError("the reference runner needs either model.moe or gate_up_proj/down_proj linears")
        return cls(fp8=fp8, table_device=engine.device.name, **fields)


def _is_block_fp8(layer: LinearLayer | MoeLayer | None) -> bool:
    """Whether the runner quantizes the layer's weight in [128, 128] FP8 blocks: an FP8 layer with
    those blocks, or with none (the runner has block-FP8 kernels only, so an FP8 weight the engine
    gives no block takes the [128, 128] blocks of the planner's GEMM stages)."""
    return layer is not None and layer.quant.method == "fp8" and layer.quant.block in (None, (128, 128))


@dataclass
class AttentionMetadata:
    """Per-step attention inputs; slices of the runner's persistent input buffers."""
    positions: torch.Tensor        # (T,) int64
    slot_mapping: torch.Tensor     # (T,) int64, -1 for padding
    seq_lens: torch.Tensor         # (R,) int32, 0 for padded requests
    idx_mapping: torch.Tensor      # (R,) int32: row of each request in the block table
    block_table: torch.Tensor      # (max_num_seqs + 1, max_blocks) int32
    query_start_loc: torch.Tensor  # (R + 1,) int32 (prefill path)
    max_query_len: int
    decode_query_len: int          # uniform decode: every request has this many tokens
    is_decode: bool


class Linear:
    def __init__(self, n: int, k: int, fp8: bool, dtype, device, gen: torch.Generator,
                 table_device: str | None = None):
        w = torch.randn(n, k, generator=gen, device=device) * k ** -0.5
        self.dtype = dtype
        self.table_device = table_device
        self.fp8 = fp8 and k % 128 == 0
        if self.fp8:
            self.weight, self.scales = quantize_fp8_block(w)
        else:
            self.weight, self.scales = w.to(dtype), None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fp8:
            return x @ self.weight.t()
        xq, xs = quantize_fp8_per_token_group(x)
        out = x.new_empty(x.shape[0], self.weight.shape[0])
        return fp8_gemm(xq, xs, self.weight, self.scales, out=out, table_device=self.table_device)


class MoE:
    """Top-k routed experts. fp8: grouped GEMM over rows sorted by expert, each expert
    padded to MOE_BLOCK_M, with a static row count (the upper bound for T tokens) so that
    no step reads routing results back to the host; bf16: a loop over experts."""

    def __init__(self, cfg: ModelConfig, dtype, device, gen):
        e, h, i = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.dtype = dtype
        self.table_device = cfg.table_device
        self.num_experts, self.top_k, self.inter = e, cfg.top_k, i
        self.router = (torch.randn(e, h, generator=gen, device=device) * h ** -0.5).to(dtype)
        w13 = torch.randn(e, 2 * i, h, generator=gen, device=device) * h ** -0.5
        w2 = torch.randn(e, h, i, generator=gen, device=device) * i ** -0.5
        self.fp8 = cfg.fp8["experts"] and h % 128 == 0 and i % 128 == 0
        if self.fp8:
            self.w13, self.w13_s = quantize_fp8_block(w13)
            self.w2, self.w2_s = quantize_fp8_block(w2)
        else:
            self.w13, self.w2 = w13.to(dtype), w2.to(dtype)

    def max_rows(self, num_tokens: int) -> int:
        pairs = num_tokens * self.top_k
        rows = pairs + min(pairs, self.num_experts) * (MOE_BLOCK_M - 1)
        return cdiv(rows, MOE_BLOCK_M) * MOE_BLOCK_M

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax((x @ self.router.t()).float(), dim=-1)
        weights, ids = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        if self.fp8:
            return self._grouped(x, weights, ids)
        out = torch.zeros_like(x, dtype=torch.float32)
        for e in range(self.num_experts):
            gate = (weights * (ids == e)).sum(-1, keepdim=True)
            h = x @ self.w13[e].t()
            out += (_silu_and_mul(h) @ self.w2[e].t()).float() * gate
        return out.to(x.dtype)

    def _grouped(self, x, weights, ids) -> torch.Tensor:
        T, H = x.shape
        flat = ids.flatten()
        pairs = flat.shape[0]
        counts = torch.zeros(self.num_experts, dtype=torch.int64, device=x.device)
        counts.scatter_add_(0, flat, torch.ones_like(flat))
        padded = cdiv(counts, MOE_BLOCK_M) * MOE_BLOCK_M  # each expert's rows, whole MoE blocks
        order = torch.sort(flat, stable=True).indices
        sorted_ids = flat[order]
        rank = torch.arange(pairs, device=x.device) - (torch.cumsum(counts, 0) - counts)[sorted_ids]
        dest = torch.empty_like(order)
        dest[order] = (torch.cumsum(padded, 0) - padded)[sorted_ids] + rank  # grouped row of each pair
        rows = self.max_rows(T)
        expert_ids = torch.full((rows,), -1, dtype=torch.int32, device=x.device)
        expert_ids[dest] = flat.to(torch.int32)
        xq, xs = quantize_fp8_per_token_group(x)
        token = torch.arange(pairs, device=x.device) // self.top_k
        a = torch.zeros(rows, H, dtype=torch.uint8, device=x.device)
        a[dest] = xq.view(torch.uint8)[token]
        a_s = torch.zeros(rows, xs.shape[1], dtype=torch.float32, device=x.device)
        a_s[dest] = xs[token]
        h = grouped_fp8_gemm(a.view(torch.float8_e4m3fn), a_s, self.w13, self.w13_s, expert_ids,
                             block_m=MOE_BLOCK_M, out=x.new_empty(rows, 2 * self.inter), table_device=self.table_device)
        hq, hs = quantize_fp8_per_token_group(_silu_and_mul(h))
        y = grouped_fp8_gemm(hq, hs, self.w2, self.w2_s, expert_ids, block_m=MOE_BLOCK_M,
                             out=x.new_empty(rows, H), table_device=self.table_device)
        return (y[dest].view(T, self.top_k, H).float() * weights[..., None]).sum(1).to(x.dtype)


class MLP:
    def __init__(self, cfg: ModelConfig, dtype, device, gen):
        i, h, fp8 = cfg.intermediate_size, cfg.hidden_size, cfg.fp8["mlp"]
        self.gate_up = Linear(2 * i, h, fp8, dtype, device, gen, cfg.table_device)
        self.down = Linear(h, i, fp8, dtype, device, gen, cfg.table_device)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(_silu_and_mul(self.gate_up(x)))


def _silu_and_mul(h: torch.Tensor) -> torch.Tensor:
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def rms_norm(x, weight, eps, residual=None):
    if residual is not None:
        x = x + residual
    residual = x
    xf = x.float()
    out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight
    return out, residual


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding of x (T, heads, D) at positions (T,)."""
    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    freqs = positions.float()[:, None] * inv_freq[None, :]
    cos, sin = freqs.cos()[:, None, :], freqs.sin()[:, None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class DecoderLayer:
    def __init__(self, cfg: ModelConfig, dtype, device, gen):
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_size
        self.q_size, self.kv_size = cfg.num_heads * d, cfg.num_kv_heads * d
        self.qkv = Linear(self.q_size + 2 * self.kv_size, h, cfg.fp8["qkv_proj"], dtype, device, gen, cfg.table_device)
        self.o_proj = Linear(h, self.q_size, cfg.fp8["o_proj"], dtype, device, gen, cfg.table_device)
        self.input_norm = torch.ones(h, dtype=dtype, device=device)
        self.post_norm = torch.ones(h, dtype=dtype, device=device)
        if cfg.num_experts:
            self.mlp = MoE(cfg, dtype, device, gen)
        else:
            self.mlp = MLP(cfg, dtype, device, gen)

    def __call__(self, x, residual, k_cache, v_cache, meta: AttentionMetadata):
        cfg = self.cfg
        x, residual = rms_norm(x, self.input_norm, cfg.eps, residual)
        T = x.shape[0]
        qkv = self.qkv(x)
        q = rope(qkv[:, :self.q_size].view(T, cfg.num_heads, cfg.head_size), meta.positions, cfg.rope_theta)
        k = rope(qkv[:, self.q_size:self.q_size + self.kv_size].view(T, cfg.num_kv_heads, cfg.head_size),
                 meta.positions, cfg.rope_theta)
        v = qkv[:, self.q_size + self.kv_size:].view(T, cfg.num_kv_heads, cfg.head_size)
        kernels.write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        o = torch.empty_like(q)
        if meta.is_decode:
            kernels.decode_attention(q, k_cache, v_cache, o, meta.seq_lens, meta.idx_mapping, meta.block_table,
                                     meta.decode_query_len, cfg.scale)
        else:
            kernels.prefill_attention(q, k_cache, v_cache, o, meta.query_start_loc, meta.seq_lens,
                                      meta.idx_mapping, meta.block_table, meta.max_query_len, cfg.scale)
        x = self.o_proj(o.view(T, self.q_size))
        x, residual = rms_norm(x, self.post_norm, cfg.eps, residual)
        return self.mlp(x), residual


class Model:
    def __init__(self, cfg: ModelConfig, dtype=torch.bfloat16, device="cuda", seed: int = 0):
        self.cfg, self.dtype, self.device = cfg, dtype, torch.device(device)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        h = cfg.hidden_size
        self.embed = torch.randn(cfg.vocab_size, h, generator=gen, device=self.device).to(dtype)
        self.layers = [DecoderLayer(cfg, dtype, self.device, gen) for _ in range(cfg.num_layers)]
        self.final_norm = torch.ones(h, dtype=dtype, device=self.device)
        # Logits of about unit scale: sampling stays non-degenerate with random weights.
        self.lm_head = (torch.randn(cfg.vocab_size, h, generator=gen, device=self.device) * 2 * h ** -0.5).to(dtype)

    def forward(self, input_ids, kv_caches, meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states (T, hidden) after the final norm; kv_caches[layer] = (k, v)."""
        x, residual = self.embed[input_ids], None
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches):
            x, residual = layer(x, residual, k_cache, v_cache, meta)
        x, _ = rms_norm(x, self.final_norm, self.cfg.eps, residual)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return (hidden @ self.lm_head.t()).float()

