"""The reference runner's Triton kernels against torch references, on random data.

On CPU they run under the Triton interpreter (tests/executor/conftest.py), in fp16:
the interpreter cannot do a bf16 tl.dot. The GPU variants (bf16, engine-sized) are
marked gpu.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from executor.runner import kernels  # noqa: E402
from runner_refs import causal_attention, rel_err  # noqa: E402


def dtype_for(device):
    return torch.bfloat16 if device == "cuda" else torch.float16


def paged_setup(device, seed, lens, page, kvh, d, num_blocks=64, max_blocks=16, dtype=None):
    """Random K/V for sequences of `lens` tokens, scattered over shuffled blocks."""
    gen = torch.Generator().manual_seed(seed)
    dtype = dtype or dtype_for(device)
    k_cache = torch.randn(num_blocks, page, kvh, d, generator=gen).to(dtype).to(device)
    v_cache = torch.randn(num_blocks, page, kvh, d, generator=gen).to(dtype).to(device)
    free = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    table = torch.zeros(len(lens) + 2, max_blocks, dtype=torch.int32)
    rows = [len(lens) + 1 - i for i in range(len(lens))]  # rows out of order: idx_mapping matters
    for r, n in zip(rows, lens):
        blocks = [free.pop() for _ in range(-(-n // page))]
        table[r, :len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
    return k_cache, v_cache, table.to(device), torch.tensor(rows, dtype=torch.int32, device=device)


def gather_kv(cache, table, row, n, page):
    blocks = table[row, :-(-n // page)].long().cpu()
    return cache.cpu()[blocks].reshape(-1, *cache.shape[2:])[:n]


@pytest.mark.parametrize("num_tokens,padded", [(9, 12), (1, 1), (16, 16), (3, 3)])
def test_prepare_inputs(kernel_device, seed, num_tokens, padded):
    gen = torch.Generator().manual_seed(seed)
    page = 4
    sizes = [num_tokens] if num_tokens < 4 else [5, 1, num_tokens - 6]
    table = torch.randint(1, 50, (6, 8), generator=gen, dtype=torch.int32)
    idx = torch.tensor([4, 0, 2][:len(sizes)], dtype=torch.int32)
    qsl = torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist(), dtype=torch.int32)
    computed = torch.tensor([0, 7, 2][:len(sizes)], dtype=torch.int32)
    pos = torch.full((padded + 4,), 99, dtype=torch.int64)
    slot = torch.full((padded + 4,), 99, dtype=torch.int64)
    seq_lens = torch.zeros(len(sizes), dtype=torch.int32)
    dev = [t.to(kernel_device) for t in (idx, qsl, computed, table, pos, slot, seq_lens)]
    kernels.prepare_inputs(*dev, num_tokens, padded, page)
    pos, slot, seq_lens = (t.cpu() for t in dev[4:])
    for r, size in enumerate(sizes):
        for t in range(int(qsl[r]), int(qsl[r + 1])):
            p = int(computed[r]) + t - int(qsl[r])
            assert pos[t] == p and slot[t] == int(table[idx[r], p // page]) * page + p % page
        assert seq_lens[r] == computed[r] + size
    assert (slot[num_tokens:padded] == -1).all() and (pos[num_tokens:padded] == 0).all()
    assert (slot[padded:] == 99).all(), "wrote past the padded size"


def test_write_kv_strided_rows_and_padding(kernel_device, seed):
    gen = torch.Generator().manual_seed(seed)
    T, kvh, d, page = 7, 2, 32, 4
    qkv = torch.randn(T, 5 * kvh * d, generator=gen).half().to(kernel_device)
    k = qkv[:, kvh * d:2 * kvh * d].view(T, kvh, d)  # strided rows, as sliced out of a packed qkv
    v = qkv[:, 3 * kvh * d:4 * kvh * d].view(T, kvh, d)
    k_cache = torch.zeros(10, page, kvh, d, dtype=torch.float16, device=kernel_device)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.tensor([5, 9, -1, 0, 39, 12, -1], device=kernel_device)
    kernels.write_kv(k, v, k_cache, v_cache, slots)
    flat_k, flat_v = k_cache.view(-1, kvh, d).cpu(), v_cache.view(-1, kvh, d).cpu()
    written = set()
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            assert torch.equal(flat_k[s], k[t].cpu()) and torch.equal(flat_v[s], v[t].cpu())
            written.add(s)
    untouched = [s for s in range(flat_k.shape[0]) if s not in written]
    assert not flat_k[untouched].any() and not flat_v[untouched].any()


@pytest.mark.parametrize("q_lens,contexts,heads,kvh", [
    ([5, 1, 3], [0, 9, 4], 4, 2),      # a fresh prefill, a decode, a chunk with context
    ([20], [11], 2, 1),                 # more queries than a small tile, context across pages
    ([1, 1], [0, 30], 4, 4),            # no GQA
])
def test_prefill_attention_matches_dense(kernel_device, seed, q_lens, contexts, heads, kvh):
    d, page = 32, 4
    seq_lens = [q + c for q, c in zip(q_lens, contexts)]
    k_cache, v_cache, table, idx = paged_setup(kernel_device, seed, seq_lens, page, kvh, d)
    gen = torch.Generator().manual_seed(seed + 1)
    T = sum(q_lens)
    q = torch.randn(T, heads, d, generator=gen).to(dtype_for(kernel_device)).to(kernel_device)
    out = torch.full_like(q, float("nan"))
    qsl = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32, device=kernel_device)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=kernel_device)
    scale = d ** -0.5
    kernels.prefill_attention(q, k_cache, v_cache, out, qsl, lens, idx, table, max(q_lens), scale)
    for r, (n, s) in enumerate(zip(q_lens, seq_lens)):
        rows = slice(int(qsl[r]), int(qsl[r + 1]))
        ref = causal_attention(q[rows].cpu(), gather_kv(k_cache, table, int(idx[r]), s, page),
                               gather_kv(v_cache, table, int(idx[r]), s, page), scale)
        assert rel_err(out[rows], ref) < 2e-2


@pytest.mark.parametrize("q_len,heads,kvh", [(1, 4, 2), (3, 8, 2), (2, 2, 2)])
def test_decode_attention_matches_dense(kernel_device, seed, q_len, heads, kvh):
    d, page = 32, 4
    seq_lens = [q_len + 6, q_len, q_len + 17]
    k_cache, v_cache, table, idx = paged_setup(kernel_device, seed, seq_lens, page, kvh, d)
    gen = torch.Generator().manual_seed(seed + 1)
    num_reqs = len(seq_lens) + 1  # the last one is CUDA-graph padding: seq_len 0
    q = torch.randn(num_reqs * q_len, heads, d, generator=gen).to(dtype_for(kernel_device)).to(kernel_device)
    out = torch.full_like(q, float("nan"))
    lens = torch.tensor(seq_lens + [0], dtype=torch.int32, device=kernel_device)
    idx = torch.cat([idx, idx[:1]])
    kernels.decode_attention(q, k_cache, v_cache, out, lens, idx, table, q_len, d ** -0.5)
    for r, s in enumerate(seq_lens):
        rows = slice(r * q_len, (r + 1) * q_len)
        ref = causal_attention(q[rows].cpu(), gather_kv(k_cache, table, int(idx[r]), s, page),
                               gather_kv(v_cache, table, int(idx[r]), s, page), d ** -0.5)
        assert rel_err(out[rows], ref) < 2e-2
    assert not out[-q_len:].isnan().any()


def test_apply_bitmask(kernel_device, seed):
    gen = torch.Generator().manual_seed(seed)
    R, V = 4, 100
    logits = torch.randn(R, V, generator=gen).to(kernel_device)
    bitmask = torch.randint(-2**31, 2**31 - 1, (2, -(-V // 32)), generator=gen, dtype=torch.int64).to(torch.int32)
    rows = torch.tensor([1, -1, 0, 1], dtype=torch.int32)
    expected = logits.cpu().clone()
    bits = ((bitmask[:, :, None] >> torch.arange(32)) & 1).reshape(2, -1)[:, :V].bool()
    for r, src in enumerate(rows.tolist()):
        if src >= 0:
            expected[r][~bits[src]] = float("-inf")
    kernels.apply_bitmask(logits, bitmask.to(kernel_device), rows.to(kernel_device))
    assert torch.equal(logits.cpu(), expected)


def test_penalties_and_temperature(kernel_device, seed):
    gen = torch.Generator().manual_seed(seed)
    R, V, S = 3, 70, 5
    logits = torch.randn(R, V, generator=gen)
    counts = torch.randint(0, 3, (S, V), generator=gen, dtype=torch.int32) * (torch.rand(S, V, generator=gen) < 0.3)
    prompt = (torch.rand(S, V, generator=gen) < 0.2).to(torch.uint8)
    slot = torch.tensor([4, 0, 4], dtype=torch.int32)
    temp = torch.tensor([0.5, 0.0, 1.0])
    rep, freq, pres = torch.tensor([1.2, 1.0, 2.0]), torch.tensor([0.5, 0.0, 0.1]), torch.tensor([0.3, 0.0, 0.0])
    c = counts[slot.long()].float()
    seen = (c > 0) | prompt[slot.long()].bool()
    ref = torch.where(seen, torch.where(logits > 0, logits / rep[:, None], logits * rep[:, None]), logits)
    ref = ref - freq[:, None] * c - pres[:, None] * (c > 0)
    ref = ref / torch.where(temp > 0, temp, 1.0)[:, None]
    out = logits.to(kernel_device)
    args = [t.to(kernel_device) for t in (slot, temp, rep, freq, pres, counts, prompt)]
    kernels.apply_penalties_and_temperature(out, *args)
    assert torch.allclose(out.cpu(), ref, atol=1e-5)


def test_gumbel_sample_greedy_and_excluded(kernel_device, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 3000, generator=gen)  # more than one vocab block
    top2 = logits.topk(2).indices
    temp = torch.zeros(3)
    excluded = torch.tensor([-1, int(top2[1, 0]), 5], dtype=torch.int32)
    out = torch.empty(3, dtype=torch.int32, device=kernel_device)
    kernels.gumbel_sample(logits.to(kernel_device), temp.to(kernel_device),
                          torch.arange(3, dtype=torch.int64).to(kernel_device), excluded.to(kernel_device), out)
    assert out.tolist() == [int(top2[0, 0]), int(top2[1, 1]), int(top2[2, 0]) if int(top2[2, 0]) != 5
                            else int(top2[2, 1])]


def test_gumbel_sample_follows_softmax(kernel_device, seed):
    """Many rows of one distribution: token frequencies match softmax(logits) (chi-square)."""
    R = 4000 if kernel_device == "cuda" else 300  # the interpreter runs ~20 ms a program
    logits = torch.tensor([1.0, 0.5, 0.0, -0.5, 0.2, 0.8, 0.3, float("-inf")])
    V = logits.shape[0]
    rows = logits.repeat(R, 1).to(kernel_device)
    out = torch.empty(R, dtype=torch.int32, device=kernel_device)
    seeds = torch.randint(0, 2**31 - 1, (R,), generator=torch.Generator().manual_seed(seed))
    kernels.gumbel_sample(rows, torch.ones(R, device=kernel_device), seeds.to(kernel_device),
                          torch.full((R,), -1, dtype=torch.int32, device=kernel_device), out)
    freq = torch.bincount(out.cpu().long(), minlength=V).double()
    expected = torch.softmax(logits.double(), 0) * R
    assert freq[7] == 0
    chi2 = ((freq[:7] - expected[:7]) ** 2 / expected[:7]).sum().item()
    assert chi2 < 22.5, (freq, expected)  # 6 degrees of freedom: p(chi2 > 22.5) = 0.001


def test_rejection_sample_kernel(kernel_device):
    # Three requests: 2 drafts (second rejected), 0 drafts (bonus only), 3 drafts (all accepted).
    cu = torch.tensor([0, 3, 4, 8], dtype=torch.int32)
    drafts = torch.tensor([11, 12, -1, -1, 31, 32, 33, -1], dtype=torch.int32)
    accept = torch.tensor([0.9, 0.2, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0])
    uniforms = torch.tensor([0.5, 0.7, 0.0, 0.0, 0.99, 0.0, 0.4, 0.0])
    sampled = torch.tensor([91, 92, 93, 94, 95, 96, 97, 98], dtype=torch.int32)
    dev = [t.to(kernel_device) for t in (drafts, accept, uniforms, sampled, cu)]
    out, num = kernels.rejection_sample(*dev, max_spec=3)
    assert num.tolist() == [2, 1, 4]
    assert out.tolist() == [[11, 92, -1, -1], [94, -1, -1, -1], [31, 32, 33, 98]]
