"""The sampler's features, its statistics against expectations, the rejection sampler, the drafter."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from executor.runner.sampler import NgramDrafter, SampleBatch, Sampler, SamplingParams  # noqa: E402

V = 8


def make_sampler(device, vocab=V, seqs=4, spec=2):
    return Sampler(vocab, seqs, spec, device, eos_token_id=vocab - 1, seed=3)


def plain_batch(params: list[SamplingParams], slots=None, num_output=None, history=None) -> SampleBatch:
    n = len(params)
    return SampleBatch(slots or [0] * n, params, [-1] * n, num_output or [5] * n, history or [()] * n,
                       list(range(n + 1)))


def chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    keep = expected > 0
    return (((counts - expected) ** 2)[keep] / expected[keep]).sum().item()


def test_params_from_plan_dict():
    p = SamplingParams.from_dict({"temperature": 0.9, "top_k": -1, "logit_bias": {"0": -1.0, "1": 0.5},
                                  "bad_words_token_ids": [[0], [1, 2]], "logprobs": 5, "prompt_logprobs": 1})
    assert p.top_k == 0 and p.logit_bias == {0: -1.0, 1: 0.5}
    with pytest.raises(ValueError, match="unknown sampling parameters"):
        SamplingParams.from_dict({"temperture": 1.0})


def test_greedy_is_argmax_after_processing(kernel_device):
    s = make_sampler(kernel_device)
    logits = torch.tensor([[0.0, 3.0, 2.9, 0.0, 0.0, 0.0, 0.0, 0.0]] * 3, device=kernel_device)
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.0, logit_bias={2: 0.5}),
              SamplingParams(temperature=0.0, bad_words_token_ids=[[5, 1]])]
    out = s(logits.clone(), plain_batch(params, history=[(), (), (4, 5)]))
    assert out.tokens == [[1], [2], [2]]  # plain argmax; bias lifts 2; "5 1" bans 1 after a 5


def test_min_tokens_bans_eos_and_penalties_use_state(kernel_device):
    s = make_sampler(kernel_device)
    s.add_requests([1], [[3]])
    s.count_outputs([1], [[4, 4]])
    logits = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0, 0.0, 0.0, 5.0]], device=kernel_device)
    greedy = SamplingParams(temperature=0.0, min_tokens=3, repetition_penalty=2.0, frequency_penalty=0.6)
    out = s(logits.clone(), plain_batch([greedy], slots=[1], num_output=[2]))
    # eos (7) banned below min_tokens; 3 (prompt) -> 1.0; 4 (output x2) -> 1.0 - 1.2 < 0: all tie at 0/1.
    assert out.tokens == [[3]]
    out = s(logits.clone(), plain_batch([greedy], slots=[1], num_output=[3]))
    assert out.tokens == [[7]]


def test_top_k_top_p_min_p_masks(kernel_device):
    s = make_sampler(kernel_device)
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.15, 0.1, 0.05, 0.0, 0.0, 0.0]])).repeat(4, 1)
    params = [SamplingParams(top_k=2), SamplingParams(top_p=0.7), SamplingParams(min_p=0.3),
              SamplingParams(top_k=3, top_p=0.5)]
    kept = (s._truncate(logits.to(kernel_device), params) > float("-inf")).cpu()
    assert kept[0].tolist()[:5] == [True, True, False, False, False]
    assert kept[1].tolist()[:5] == [True, True, False, False, False]  # 0.4 + 0.3 >= 0.7
    assert kept[2].tolist()[:5] == [True, True, True, False, False]   # p >= 0.3 * 0.4
    assert kept[3].tolist()[:5] == [True, True, False, False, False]
    assert not kept[:, 5:].any()


def test_bitmask_restricts_sampling(kernel_device):
    s = make_sampler(kernel_device)
    logits = torch.zeros(2, V, device=kernel_device)
    logits[:, 0] = 5.0
    bitmask = torch.tensor([[0b10100000]], dtype=torch.int32, device=kernel_device)  # tokens 5 and 7
    batch = plain_batch([SamplingParams(temperature=0.0), SamplingParams(temperature=0.0)])
    batch.bitmask_rows = [0, -1]
    out = s(logits, batch, bitmask)
    assert out.tokens == [[5], [0]]


def test_sampling_statistics_match_softmax_with_temperature(kernel_device):
    """Temperature 2 flattens the distribution: draws follow softmax(logits / 2)."""
    n = 2000 if kernel_device == "cuda" else 300
    s = make_sampler(kernel_device, seqs=1)
    logits = torch.tensor([1.0, 0.0, 2.0, -1.0, 0.5, 1.5, 0.2, -0.5])
    out = s(logits.repeat(n, 1).to(kernel_device), plain_batch([SamplingParams(temperature=2.0)] * n))
    counts = torch.bincount(torch.tensor([t[0] for t in out.tokens]), minlength=V).double()
    assert chi2(counts, torch.softmax(logits.double() / 2.0, 0)) < 24.3  # 7 dof, p = 0.001


def test_rejection_sampler_preserves_the_target_distribution(kernel_device):
    """With a one-hot draft, accept-with-p-else-residual yields exactly the target p."""
    n = 1500 if kernel_device == "cuda" else 200
    s = make_sampler(kernel_device, vocab=4, seqs=1, spec=1)
    target = torch.tensor([0.5, 0.2, 0.2, 0.1])
    row = torch.log(target)
    logits = row.repeat(2 * n, 1).to(kernel_device)
    params = [SamplingParams(temperature=1.0)] * (2 * n)
    batch = SampleBatch([0] * 2 * n, params, [0, -1] * n, [1] * 2 * n, [()] * 2 * n, list(range(0, 2 * n + 1, 2)))
    out = s(logits, batch)
    first = torch.tensor([t[0] for t in out.tokens])
    accepted = sum(len(t) == 2 for t in out.tokens)
    assert abs(accepted / n - 0.5) < 4 * math.sqrt(0.25 / n)  # the draft (0) is accepted with p = 0.5
    assert chi2(torch.bincount(first, minlength=4).double(), target.double()) < 16.3  # 3 dof, p = 0.001
    assert all(t[0] != 0 for t in out.tokens if len(t) == 1), "a rejected draft is never re-drawn"


def test_rejection_sampler_greedy(kernel_device):
    s = make_sampler(kernel_device, spec=2)
    logits = torch.tensor([[0.0, 5.0, 0, 0, 0, 0, 0, 0], [0, 0, 5.0, 0, 0, 0, 0, 0], [0, 0, 0, 5.0, 0, 0, 0, 0]] * 2)
    greedy = SamplingParams(temperature=0.0)
    # request 0 drafts [1, 2]: both right, bonus 3; request 1 drafts [1, 4]: the second is wrong.
    batch = SampleBatch([0] * 6, [greedy] * 6, [1, 2, -1, 1, 4, -1], [1] * 6, [()] * 6, [0, 3, 6])
    out = s(logits.to(kernel_device), batch)
    assert out.tokens == [[1, 2, 3], [1, 2]]


def test_logprobs_are_of_the_raw_logits(kernel_device):
    s = make_sampler(kernel_device)
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0]], device=kernel_device)
    out = s(logits.clone(), plain_batch([SamplingParams(temperature=0.0, logprobs=2, logit_bias={0: 10.0})]))
    token, logprob, top_ids, top_values = out.logprobs[0][0]
    raw = torch.log_softmax(logits.cpu()[0], 0)
    assert token == 0 and logprob == pytest.approx(raw[0].item(), abs=1e-5)
    assert top_ids == [3, 2] and top_values == pytest.approx(raw[[3, 2]].tolist(), abs=1e-5)


def test_ngram_drafter():
    d = NgramDrafter(3)
    assert d.propose([1, 2, 3, 4, 9, 9, 1, 2, 3]) == [4, 9, 9]   # "1 2 3" seen before
    assert d.propose([5, 6, 7, 5, 6]) == [7, 5, 6]                # "5 6" -> 7 5 6
    assert d.propose([1, 2, 3]) == []
    assert NgramDrafter(2).propose([4, 4, 4, 4]) == [4]  # only one token follows the match
