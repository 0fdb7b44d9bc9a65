"""Confidence, budget schedules, rankers and the policy registry: the pure parts of a policy."""

from __future__ import annotations

import math

import pytest
import torch

from confkv.budget import FixedBudget, GatedBudget, ReplayBudget, pyramid_budgets
from confkv.confidence import ConfidenceLogitsProcessor, confidence
from confkv.policies import PRESETS, PolicyError, get_policy, parse_overrides
from confkv.rankers import EMARanker, H2ORanker, RandomRanker, RecencyRanker, recency

VOCAB = 151_936  # Qwen2.5's vocabulary: the size the numerics must survive


def test_one_hot_is_fully_confident() -> None:
    logits = torch.full((VOCAB,), -1e4)
    logits[7] = 1e4
    assert confidence(logits).item() == pytest.approx(1.0, abs=1e-4)


def test_uniform_sits_at_the_formula_floor_and_rescales_to_zero() -> None:
    logits = torch.zeros(VOCAB)
    floor = 0.3 * 0.5 + 0.3 / VOCAB  # sigmoid(0) = 0.5 for the margin term, max p = 1/V
    assert confidence(logits).item() == pytest.approx(floor, abs=1e-5)
    assert confidence(logits, rescale=True).item() == pytest.approx(0.0, abs=1e-5)


def test_confidence_is_monotone_in_sharpness_and_margin() -> None:
    base = torch.randn(2, 1000, generator=torch.Generator().manual_seed(0))
    temps = [4.0, 2.0, 1.0, 0.5, 0.1]
    values = [confidence(base / t).tolist() for t in temps]
    for row in range(2):
        seq = [v[row] for v in values]
        assert seq == sorted(seq), f"sharper distributions must be more confident: {seq}"
    two = torch.zeros(1000)
    two[0] = 5.0
    wider = two.clone()
    wider[1] = 4.9
    assert confidence(two) > confidence(wider)


def test_confidence_is_batched_and_stable_with_extreme_and_masked_logits() -> None:
    logits = torch.randn(3, 4, VOCAB) * 50
    logits[0, 0, :100] = float("-inf")
    c = confidence(logits)
    assert c.shape == (3, 4) and torch.isfinite(c).all() and (c >= 0).all() and (c <= 1).all()
    half = confidence(logits.half())
    torch.testing.assert_close(half, c, atol=2e-2, rtol=0)


def test_confidence_weights_are_applied() -> None:
    logits = torch.randn(50)
    only_entropy = confidence(logits, weights=(1.0, 0.0, 0.0))
    p = torch.softmax(logits, -1)
    expected = 1 + (p * p.log()).sum() / math.log(50)
    assert only_entropy.item() == pytest.approx(expected.item(), abs=1e-5)


def test_logits_processor_reports_the_least_confident_row() -> None:
    seen = []
    proc = ConfidenceLogitsProcessor(seen.append)
    scores = torch.stack([torch.zeros(10), torch.tensor([9.0] + [0.0] * 9)])
    out = proc(torch.zeros(2, 3, dtype=torch.long), scores)
    assert out is scores and len(seen) == 1
    assert seen[0] == pytest.approx(confidence(scores[0]).item())


def test_gated_budget_follows_tau_and_starts_cautious() -> None:
    gate = GatedBudget(n_low=128, n_high=256, tau=0.6)
    assert gate.budget(None) == 256
    assert gate.budget(0.59) == 256
    assert gate.budget(0.6) == 128
    assert FixedBudget(300).budget(0.1) == 300
    with pytest.raises(ValueError):
        GatedBudget(n_low=300, n_high=200, tau=0.5)


def test_replay_budget_replays_then_holds_the_last_value() -> None:
    replay = ReplayBudget([10, 20, 30])
    assert [replay.budget(None) for _ in range(5)] == [10, 20, 30, 30, 30]


@pytest.mark.parametrize("budget,layers", [(512, 24), (256, 30), (100, 7), (64, 2), (33, 5)])
def test_pyramid_budgets_average_the_global_budget_and_shrink_with_depth(budget: int, layers: int) -> None:
    split = pyramid_budgets(budget, layers, spread=0.5, minimum=8)
    assert sum(split) == budget * layers
    assert all(a >= b for a, b in zip(split, split[1:], strict=False))
    assert split[0] > split[-1] and min(split) >= 8


def test_ema_ranker_keeps_attended_and_recent_tokens_and_new_tokens_start_at_the_mean() -> None:
    ranker = EMARanker(alpha=0.5, decay=0.5)
    acc = torch.zeros(1, 1, 4)
    ranker.accumulate(acc, torch.tensor([[[0.7, 0.1, 0.1, 0.1]]]))
    pos = torch.tensor([[[0, 1, 2, 3]]])
    scores = ranker.rank(acc, pos, now=3)
    assert scores[0, 0, 0] > scores[0, 0, 1]  # attended beats unattended of similar age
    assert scores[0, 0, 3] > scores[0, 0, 1]  # recent beats old when attention ties
    fresh = torch.zeros(1, 1, 2)
    ranker.seed_new(acc, fresh)
    torch.testing.assert_close(fresh, acc.mean(-1, keepdim=True).expand(1, 1, 2))


def test_h2o_accumulates_and_recency_and_random_rankers() -> None:
    acc = torch.zeros(1, 2, 3)
    h2o = H2ORanker()
    for _ in range(3):
        h2o.accumulate(acc, torch.tensor([[[0.2, 0.5, 0.3], [0.6, 0.2, 0.2]]]))
    torch.testing.assert_close(h2o.rank(acc, None, 0), torch.tensor([[[0.6, 1.5, 0.9], [1.8, 0.6, 0.6]]]))
    h2o.accumulate(acc, torch.tensor([[[0.2, 0.5, 0.3], [0.6, 0.2, 0.2]]]), queries=4)  # a 4-query call weighs 4
    torch.testing.assert_close(h2o.rank(acc, None, 0), torch.tensor([[[1.4, 3.5, 2.1], [4.2, 1.4, 1.4]]]))
    pos = torch.tensor([[[5, 9, 7], [1, 2, 3]]])
    assert RecencyRanker().rank(acc, pos, 9).argmax(-1).tolist() == [[1, 2]]
    r1, r2 = RandomRanker(seed=3), RandomRanker(seed=3)
    torch.testing.assert_close(r1.rank(acc, pos, 9), r2.rank(acc, pos, 9))
    torch.testing.assert_close(recency(pos, 9)[0, 0], torch.tensor([0.0, 1.0, 0.5]))


def test_every_preset_builds_and_ablations_share_the_confkv_gate() -> None:
    assert set(PRESETS) == {"full", "sliding", "h2o", "random", "recency", "attention", "confkv", "confkv-pyramid",
                            "confkv-paper", "confkv-recall", "confkv-turn", "confkv-turn-recall", "confkv-turn-wide"}
    recall = get_policy("confkv-recall")  # the preset's gate with a cold tier that gives tokens back
    assert (recall.cold, recall.recall_block, recall.recall_rerun) == (2048, 16, True) and get_policy("confkv").cold == 0
    paper = get_policy("confkv-paper")  # the paper's literal schedule: fixed tau, immediate switch
    assert (paper.gated, paper.tau, paper.tau_quantile, paper.shrink, paper.n_low, paper.n_high) == (
        True, 0.5, None, None, 256, 512)
    confkv = get_policy("confkv")
    for name in ("random", "recency", "attention"):
        p = get_policy(name)
        assert (p.gated, p.n_low, p.n_high, p.tau, p.sinks, p.protected) == (
            True, confkv.n_low, confkv.n_high, confkv.tau, confkv.sinks, confkv.protected,
        )
    assert get_policy("sliding").sinks == 4 and not get_policy("full").evicts


def test_overrides_are_typed_and_bad_input_is_a_clear_error() -> None:
    p = get_policy("confkv", parse_overrides(["n_low=128", "n_high=256", "tau=0.4", "int8_after=none", "pyramid=on"]))
    assert (p.n_low, p.n_high, p.tau, p.int8_after, p.pyramid) == (128, 256, 0.4, None, True)
    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        get_policy("nope")
    with pytest.raises(PolicyError, match="unknown policy key 'n_lo'"):
        get_policy("confkv", {"n_lo": "3"})
    with pytest.raises(PolicyError, match="expected int"):
        get_policy("confkv", {"n_low": "many"})
    with pytest.raises(PolicyError, match="key=value"):
        parse_overrides(["n_low"])
    with pytest.raises(PolicyError, match="leaves no room"):
        get_policy("sliding", {"budget": "3"})


def test_confidence_matches_the_softmax_formula_term_by_term() -> None:
    """The shifted-logit computation equals the formula written with softmax, entropy and the top-2 log-probs,
    ties for the top (margin 0) and masked logits included."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 2000, generator=gen) * torch.tensor([[0.5], [3.0], [20.0], [1.0]])
    logits[3, :2] = logits[3].max() + 1.0  # two tokens tie for the top
    logits[1, :50] = float("-inf")
    logp = torch.log_softmax(logits, -1)
    p = logp.exp()
    entropy = -(p * logp).nan_to_num(0.0).sum(-1)
    top = logp.topk(2, dim=-1).values
    expected = 0.4 * (1 - entropy / math.log(2000)) + 0.3 * torch.sigmoid(top[:, 0] - top[:, 1]) + 0.3 * p.amax(-1)
    torch.testing.assert_close(confidence(logits), expected, atol=1e-5, rtol=0)
    assert confidence(logits[3]).item() == pytest.approx(expected[3].item(), abs=1e-5)


@pytest.mark.parametrize("vocab", [2, 17, 49152])
@pytest.mark.parametrize("rescale", [False, True])
def test_the_compiled_confidence_matches_its_tensor_op_reference(vocab: int, rescale: bool) -> None:
    from confkv.confidence import reference_confidence
    from confkv.kernels import cpu_decode

    if cpu_decode.kernel() is None:
        pytest.skip(f"no CPU kernel: {cpu_decode.build_error()}")
    torch.manual_seed(vocab)
    logits = torch.randn(2, 3, vocab) * 4
    logits[0, 1, :2] = logits[0, 1].max() + 1  # a tie for the top: margin 0
    logits[1, 0, 1:] = float("-inf")  # masked: one token left
    logits[1, 2] = 0.0  # uniform
    got = confidence(logits, rescale=rescale)
    assert got.shape == (2, 3) and got.dtype == torch.float32
    torch.testing.assert_close(got, reference_confidence(logits, (0.4, 0.3, 0.3), rescale), atol=2e-6, rtol=0)
    torch.testing.assert_close(confidence(logits.bfloat16()), reference_confidence(logits.bfloat16(), (0.4, 0.3, 0.3)),
                               atol=2e-6, rtol=0)  # fmt: skip
