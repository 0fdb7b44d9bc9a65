"""Recallable eviction (`Storage.cold`): evicted slots wait in a cold tier and come back when the budget rises.

What must hold: attention never reads the cold tier; a recall refills exactly the layer's room with the cold slots
the last query scores highest; every forward still sees exactly what the masked oracle (evictions AND recalls)
says it saw; cold bytes are accounted apart from resident bytes; and without a cold tier nothing changes.
"""

from __future__ import annotations

import pytest
import torch

from confkv import ConfKVSession, get_policy
from confkv.testing import tiny_model
from tests.confkv.oracle import oracle_logits

SMALL = {"sinks": "2", "protect": "4", "prefill_chunk": "16", "slack": "0", "n_low": "12", "n_high": "24"}


def _forced_run(model, ids, policy, low_until: int, prefill: int = 20):
    """Prefill, then decode with budget 12 until `low_until`, then 24 (the gate opens and stays open)."""
    session = ConfKVSession(model, policy, record_evictions=True)
    logits = [session.append(ids[:, :prefill])]
    for t in range(prefill, ids.shape[1] - 1):
        session.cache.set_budget(12 if t < low_until else 24)
        logits.append(session.step(int(ids[0, t])))
    return session, torch.stack(logits, dim=1)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("rerun", ["true", "false"])
def test_recalled_tokens_are_seen_again_exactly_as_the_oracle_says(arch: str, rerun: str) -> None:
    """With `recall_rerun` the token whose step recalled is run again, so it (query 40) already sees what came back;
    without, the next token (41) is the first."""
    model, vocab = tiny_model(arch)
    ids = torch.randint(0, vocab, (1, 56), generator=torch.Generator().manual_seed(5))
    policy = get_policy("confkv", {**SMALL, "int8_after": "none", "cold": "64", "recall_rerun": rerun})
    session, got = _forced_run(model, ids, policy, low_until=40)
    layers = session.cache.layers
    assert all(layer.recalls for layer in layers), "the test must recall"
    assert session.seen == 55 and session.stats.decoded_tokens == 35  # the rerun adds no token
    for layer in layers:  # the first step with budget 24 refills the room: 24 - (12 + 1 new token)
        assert layer.recalls[0][0].shape[-1] == 11 and layer.recalls[0][1] == (40 if rerun == "true" else 41)
        pos = layer.positions()
        assert pos.sort(dim=-1).values.unique_consecutive(dim=-1).shape == pos.shape  # no slot twice
        assert layer.physical_length <= 24
        cold = layer.cold.view("pos")  # resident and cold are disjoint, per head
        assert not (pos[..., :, None] == cold[..., None, :]).any()
    want = oracle_logits(model, ids[:, :-1], session.cache)
    torch.testing.assert_close(got, want[:, 19:], atol=5e-5, rtol=1e-4)


def test_recall_picks_the_cold_slots_the_query_scores_highest() -> None:
    model, vocab = tiny_model("qwen2")  # GQA: the KV head's score is its group's mean query
    ids = torch.randint(0, vocab, (1, 40), generator=torch.Generator().manual_seed(6))
    for storage in ({"int8_after": "none"}, {"int8_after": "4"}):
        policy = get_policy("confkv", {**SMALL, **storage, "cold": "64"})
        session, _ = _forced_run(model, ids, policy, low_until=10_000)  # never opens: only evictions
        layer = session.cache.layers[0]
        assert layer.cold.n > 3 and not layer.recalls
        store = layer.q8 if "k_scale" in layer.cold.bufs else layer.fp
        b, h_kv = layer.cold.bufs["k"].shape[:2]
        group = layer.last_query.shape[1] // h_kv
        keys = layer.cold.view("k").float()
        if "k_scale" in layer.cold.bufs:
            keys = keys * layer.cold.view("k_scale")[..., None] * layer.k_channel[:, :, None, :]
        target = 2  # make every head's query point at its cold slot 2
        layer.last_query = keys[:, :, target].repeat_interleave(group, dim=1) * 10
        wanted = layer.cold.view("pos")[:, :, target].clone()
        n_before, cold_before = store.n, layer.cold.n
        layer.recall(store, 1)
        assert store.n == n_before + 1 and layer.cold.n == cold_before - 1
        assert torch.equal(store.view("pos")[:, :, -1], wanted)


def test_block_recall_brings_back_the_best_slot_and_its_block_neighbours_first() -> None:
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 48), generator=torch.Generator().manual_seed(8))
    policy = get_policy("confkv", {**SMALL, "int8_after": "none", "cold": "64"})
    session, _ = _forced_run(model, ids, policy, low_until=10_000)
    layer = session.cache.layers[0]
    pos = layer.cold.view("pos")
    block = 4
    full_blocks = [b for b in range(48 // block)  # a block every head holds completely in the cold tier
                   if all(((pos[0, h] // block) == b).sum() == block for h in range(pos.shape[1]))]
    assert full_blocks, "the test needs a whole block in the cold tier"
    b = full_blocks[0]
    target = (pos[0, 0] // block == b).nonzero()[0, 0]  # one slot of that block, on head 0
    group = layer.last_query.shape[1] // pos.shape[1]
    layer.last_query = layer.cold.view("k")[:, :, target].float().repeat_interleave(group, dim=1) * 10
    n_before = layer.fp.n
    layer.recall(layer.fp, block, block=block)
    back = layer.fp.view("pos")[0, 0, n_before:]
    assert sorted((back // block).tolist()) == [b] * block  # head 0 took the whole block of its best slot


def test_cold_tier_is_bounded_accounted_apart_and_off_by_default() -> None:
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 60), generator=torch.Generator().manual_seed(7))
    policy = get_policy("confkv", {**SMALL, "int8_after": "4", "cold": "16"})
    session, _ = _forced_run(model, ids, policy, low_until=10_000)
    mem = session.memory()
    for layer in session.cache.layers:
        assert layer.cold.n == 16  # more than 16 were evicted; the least-attended beyond 16 are gone
    assert mem.cold_bytes == sum(layer.cold_bytes() for layer in session.cache.layers) > 0
    assert mem.kv_bytes == sum(layer.kv_bytes() for layer in session.cache.layers)  # resident only
    assert session.stats.steps[-1].cold_bytes == mem.cold_bytes
    plain, _ = _forced_run(model, ids, get_policy("confkv", {**SMALL, "int8_after": "4"}), low_until=40)
    assert all(layer.cold.n == 0 and not layer.recalls for layer in plain.cache.layers)
    assert plain.memory().cold_bytes == 0


def test_chunk_confidence_last_judges_the_final_position_alone() -> None:
    from confkv.confidence import confidence

    logits = torch.zeros(1, 5, 50)
    logits[0, :4, 0] = 30.0  # four certain positions, then a flat one (the model must look something up)
    mean = get_policy("confkv").confidence(logits)
    last = get_policy("confkv", {"chunk_confidence": "last"}).confidence(logits)
    assert float(last) == pytest.approx(float(confidence(logits[:, -1:])[0, 0]))
    assert float(last) < 0.5 < float(mean)  # averaged, the flat position would not open a tau = 0.5 gate
    with pytest.raises(ValueError, match="chunk_confidence"):
        get_policy("confkv", {"chunk_confidence": "median"})


@pytest.mark.parametrize("rerun", ["true", "false"])
def test_a_rerun_folds_its_position_s_mass_once(rerun: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One accumulator update per forward the caller asked for: the rerun of a recalling token is not a second EMA
    step (every slot would decay twice for one position)."""
    from confkv.rankers import EMARanker

    folds = []
    original = EMARanker.accumulate_all
    monkeypatch.setattr(EMARanker, "accumulate_all", lambda self, pairs, queries=1: folds.append(queries)
                        or original(self, pairs, queries))
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 56), generator=torch.Generator().manual_seed(5))
    policy = get_policy("confkv", {**SMALL, "int8_after": "none", "cold": "64", "recall_rerun": rerun})
    session, _ = _forced_run(model, ids, policy, low_until=40)
    assert all(layer.recalls for layer in session.cache.layers), "the test must recall"
    chunks = [s for s in session.stats.steps if s.kind == "prefill"]
    assert len(folds) == len(chunks) + session.stats.decoded_tokens
