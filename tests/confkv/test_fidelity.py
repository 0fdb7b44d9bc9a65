"""Fidelity of the rankers' inputs against dense attention (issue 12): each test fails on the old behaviour."""

from __future__ import annotations

import torch

from confkv.policies import get_policy
from confkv.session import ConfKVSession
from confkv.testing import tiny_model


def _dense_probs(arch: str, ids: torch.Tensor) -> list[torch.Tensor]:
    """Per-layer eager attention probabilities `[B, Hq, L, L]` of one full forward."""
    model, _ = tiny_model(arch, attn_implementation="eager")
    with torch.no_grad():
        return list(model(ids, output_attentions=True).attentions)


def test_h2o_sums_a_prefill_chunk_over_its_queries() -> None:
    """H2O's score is attention mass summed over every query since the token arrived: after one 20-token chunk,
    each key's accumulator is the column sum of the dense attention matrix (GQA group mean), not the per-call mean
    (the old behaviour, 20x too small, which let one decode step weigh as much as a whole prefill chunk)."""
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 20), generator=torch.Generator().manual_seed(3))
    policy = get_policy("h2o", {"budget": "64", "sinks": "2", "protect": "4", "prefill_chunk": "32"})
    session = ConfKVSession(model, policy)
    session.append(ids)
    for layer, probs in zip(session.cache.layers, _dense_probs("llama", ids), strict=True):
        b, hq, _, t = probs.shape
        h_kv = layer.n_kv_heads
        want = probs.sum(dim=2).view(b, h_kv, hq // h_kv, t).mean(dim=2)
        torch.testing.assert_close(layer.fp.view("acc"), want, rtol=1e-4, atol=1e-5)


def test_ema_rank_is_normalised_over_evictable_slots_not_the_sinks() -> None:
    """A sink with 50x the mass of any candidate used to set the EMA scale (and position 0 the recency scale), so
    the EMA term of every candidate was ~0 and recency alone decided: the attended old token A lost to the
    unattended recent token B. Normalised over the evictable slots, A's attention counts and B goes."""
    from confkv.rankers import EMARanker

    acc = torch.tensor([[[50.0, 0.9, 0.0]]])  # sink, A (attended, old), B (never attended, recent)
    pos = torch.tensor([[[0, 10, 40]]])
    protected = torch.tensor([[[True, False, False]]])
    scores = EMARanker(alpha=0.5).rank(acc, pos, now=41, protected=protected)
    assert scores[0, 0, 1] > scores[0, 0, 2], "the attended token must outrank the unattended one"


def test_kv_bytes_count_every_live_slot_buffer() -> None:
    """Resident bytes include each slot's position and accumulator, not just K, V and scales (they were left out:
    ~4.5% of an INT8 token), so equal-bytes comparisons between policies are honest."""
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 40), generator=torch.Generator().manual_seed(1))
    policy = get_policy("h2o", {"budget": "24", "sinks": "2", "protect": "4", "int8_after": "6", "prefill_chunk": "8"})
    session = ConfKVSession(model, policy)
    session.append(ids)
    for layer in session.cache.layers:
        live = sum(s.view(n).numel() * s.view(n).element_size() for s in (layer.fp, layer.q8) for n in s.bufs)
        assert layer.q8.n > 0 and layer.kv_bytes() == live


def test_tau_auto_opens_the_gate_on_about_a_share_q_of_forwards() -> None:
    """`tau=auto:q` (issue 12): the threshold is the running q-quantile of the cache's own confidences, so the gate
    opens on ~q of the forwards after warmup, while the fixed tau=0.5 of the preset never opens on a model whose
    confidences sit above it (here: a shifted stream, like SmolLM2's ~0.8)."""
    from confkv.budget import QuantileGate

    gen = torch.Generator().manual_seed(0)
    stream = (0.8 + 0.05 * torch.randn(600, generator=gen)).tolist()
    gate = get_policy("confkv", {"tau": "auto:0.2"}).schedule()
    assert isinstance(gate, QuantileGate) and gate.q == 0.2
    fixed = get_policy("confkv").schedule()
    opened = [gate.budget(c) == gate.n_high for c in stream][gate.warmup :]
    assert 0.15 < sum(opened) / len(opened) < 0.25
    assert not any(fixed.budget(c) == fixed.n_high for c in stream)


def test_the_cache_reports_its_gate_open_rate_with_tau_auto() -> None:
    model, vocab = tiny_model("qwen2")
    ids = torch.randint(0, vocab, (1, 8), generator=torch.Generator().manual_seed(2))
    sets = {"n_low": "12", "n_high": "20", "sinks": "2", "protect": "4", "int8_after": "none", "tau": "auto:0.3"}
    session = ConfKVSession(model, get_policy("confkv", sets))
    session.append(ids)
    session.decode(80)
    rate = session.cache.gate_open_rate
    assert rate is not None and 0.1 < rate < 0.6, rate
    assert ConfKVSession(model, get_policy("full")).cache.gate_open_rate is None


def test_channel_scaled_int8_keys_shrink_the_error_on_outlier_channels() -> None:
    """Keys with a few outlier channels (what real models have, KIVI): per-token INT8 wastes the grid on them; the
    per-channel pre-scaling about halves the relative score error, and the segment still dequantizes exactly
    as `q * k_scale * k_channel` (the reference attention agrees with a dense fp64 oracle)."""
    from confkv.kernels import SegmentedKV, reference_attention

    gen = torch.Generator().manual_seed(4)
    k = torch.randn(1, 2, 64, 32, generator=gen)
    k[..., :2] *= 30.0  # two outlier channels in every token
    v = torch.randn(1, 2, 64, 32, generator=gen)
    q = torch.randn(1, 4, 1, 32, generator=gen)
    exact = (q.view(1, 2, 2, 32) @ k.transpose(-1, -2)).flatten()
    errors = {}
    for channel in (False, True):
        kv = SegmentedKV.from_dense(k, v, 64, channel_keys=channel)
        deq = kv.k_q.float() * kv.k_scale.unsqueeze(-1) * (1 if kv.k_channel is None else kv.k_channel.unsqueeze(2))
        approx = (q.view(1, 2, 2, 32) @ deq.transpose(-1, -2)).flatten()
        errors[channel] = float((approx - exact).abs().mean() / exact.abs().mean())
        out, _ = reference_attention(q, kv, None, 32**-0.5)
        probs = torch.softmax((q.view(1, 2, 2, 32).double() @ deq.double().transpose(-1, -2)) * 32**-0.5, -1)
        v_deq = kv.v_q.double() * kv.v_scale.double().unsqueeze(-1)
        torch.testing.assert_close(out.view(1, 2, 2, 32).double(), probs @ v_deq, atol=1e-5, rtol=0)
    assert errors[True] < 0.6 * errors[False], errors  # about half, measured 0.0050 vs 0.0092


def test_hysteresis_opens_at_once_and_closes_by_at_most_shrink_tokens_per_forward() -> None:
    """`shrink` (issue 12): one confident step after an uncertain one no longer drops 512 -> 256 at once (which threw
    away everything the expansion kept); the budget decays `shrink` tokens per confident forward and snaps back up
    when the model is unsure again. Without it the literal schedule is unchanged."""
    from confkv.budget import GatedBudget, Hysteresis

    gate = get_policy("confkv", {"shrink": "100"}).schedule()
    assert isinstance(gate, Hysteresis)
    budgets = [gate.budget(c) for c in (0.1, 0.9, 0.9, 0.9, 0.1, 0.9)]
    assert budgets == [512, 412, 312, 256, 512, 412]
    literal = get_policy("confkv").schedule()
    assert isinstance(literal, GatedBudget)
    assert [literal.budget(c) for c in (0.1, 0.9, 0.9)] == [512, 256, 256]


def test_a_session_with_hysteresis_evicts_gradually() -> None:
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 40), generator=torch.Generator().manual_seed(8))
    from confkv.budget import GatedBudget

    sets = {"n_low": "12", "n_high": "36", "sinks": "2", "protect": "4", "int8_after": "none", "slack": "0",
            "shrink": "4", "prefill_chunk": "8", "tau": "1.0"}  # tau 1: always unsure while prefilling
    session = ConfKVSession(model, get_policy("confkv", sets))
    session.append(ids)
    assert session.cache.layers[0].physical_length == 36
    session.cache.schedule.inner = GatedBudget(12, 36, 0.0)  # from now on always confident
    kept = [36]
    for _ in range(8):
        session.step(1)
        kept.append(session.cache.layers[0].physical_length)
    assert kept[-1] == 12, kept  # it does close ...
    # ... by `shrink` kept tokens per step (the budget's own step), never 24 at once
    assert all(a - b <= 4 for a, b in zip(kept, kept[1:], strict=False)), kept


def test_dense_attention_folds_gqa_heads_into_the_query_axis_exactly() -> None:
    """The `full` path's sdpa call folds each KV head's query heads into the query axis (no per-head K/V copies);
    against `enable_gqa` sdpa it must give the same output, for decode and for a prefill chunk at the end of older
    keys (the tail mask repeated per folded head), with a non-contiguous query as transformers passes it."""
    import torch.nn.functional as F

    from confkv.attention import dense_attention

    gen = torch.Generator().manual_seed(0)
    for heads, kv_heads, q_len, n_keys in [(6, 2, 1, 40), (6, 2, 7, 40), (4, 4, 5, 9), (8, 1, 3, 3)]:
        query = torch.randn(1, q_len, heads, 16, generator=gen).transpose(1, 2)  # [B, H, L, D], not contiguous
        k, v = (torch.randn(1, kv_heads, n_keys, 16, generator=gen) for _ in range(2))
        visible = torch.ones(q_len, n_keys, dtype=torch.bool)
        visible[:, n_keys - q_len :] = torch.ones(q_len, q_len, dtype=torch.bool).tril()
        want = F.scaled_dot_product_attention(query, k, v, attn_mask=visible, scale=0.25, enable_gqa=True)
        got = dense_attention(query, k, v, 0.25)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
